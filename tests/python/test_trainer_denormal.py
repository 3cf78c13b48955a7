"""The trainer flushes denormal numbers to zero in its process when asked to, and only then
(trainer.py, flush_denormal; docs/runtime.md, "Denormal numbers on the CPU"). Each case runs in a
process of its own: the setting is the process's, and this one's other tests must not inherit
it."""

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
BODY = """
import torch, infinipipe
from infinipipe.models.llama import LlamaConfig
tiny = torch.tensor([1e-39])  # below float32's smallest normal number, 1.2e-38
assert (tiny * 1.0).item() != 0.0  # IEEE denormals before the trainer
infinipipe.Trainer(LlamaConfig.tiny(){flag})
print((tiny * 1.0).item())
"""


@pytest.mark.parametrize(
    "flag, flushed",
    [(", flush_denormal=True", True), (", flush_denormal=False", False), ("", False)],
)
def test_the_trainer_flushes_denormals_when_asked_to(flag, flushed):
    proc = subprocess.run(
        [sys.executable, "-c", BODY.format(flag=flag)],
        capture_output=True,
        text=True,
        timeout=120,
        env={"PYTHONPATH": str(ROOT / "python"), "PATH": "/usr/bin:/bin"},
    )
    assert proc.returncode == 0, proc.stderr
    value = float(proc.stdout.strip().splitlines()[-1])
    assert (value == 0.0) == flushed, value
