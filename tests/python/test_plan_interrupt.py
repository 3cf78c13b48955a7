"""Ctrl-C stops a long planner call (the bindings' plan_step runs the planner on a worker thread
and tells it to stop; docs/design.md, "Failures")."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]

# A step whose EPP plan takes 10-25 s on this 2-core machine (4,000 Wikipedia-distributed
# sequences and one of 400K tokens, tiny LLaMA, 16 GiB per stage): far longer than the wait
# allowed below, so an uninterruptible call could not pass.
CHILD = """
import sys, torch
sys.path.insert(0, sys.argv[1])
from infinipipe import _C
from infinipipe.cost import model_shape_json
from infinipipe.models.llama import LlamaConfig
cost = _C.plan.CostModel.analytic(model_shape_json(LlamaConfig.tiny(), torch.float32), "cpu", [4, 4])
lengths = list(_C.plan.sample_lengths("wikipedia", 4000, 32768, 0)) + [400000]
print("planning", flush=True)
try:
    _C.plan.plan_step(lengths, cost, 16 * 2**30, "epp", max_k=64)
    print("finished", flush=True)
except KeyboardInterrupt:
    print("interrupted", flush=True)
"""


def test_ctrl_c_interrupts_a_long_plan():
    child = subprocess.Popen(
        [sys.executable, "-c", CHILD, str(REPO / "python")],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert child.stdout.readline().strip() == "planning", child.stderr.read()
        time.sleep(1.0)  # inside the planner by now
        child.send_signal(signal.SIGINT)
        sent = time.monotonic()
        out, err = child.communicate(timeout=60)
        waited = time.monotonic() - sent
    finally:
        child.kill()
    assert out.strip() == "interrupted", (out, err)
    assert waited < 3.0, f"the planner took {waited:.1f} s to stop after Ctrl-C"
