"""The C++ trainer example (examples/train_llama.cc, target train_llama_cpp) under
`torchrun --no-python` on 2 ranks: it builds its Gloo group from C++, trains 2 steps, exits 0
and prints finite losses on rank 0; with 2 sequence ranks or 2 replicas per stage (4 ranks), and
with the spread head (heads run on both stages), it prints the same losses.

The binary is $INFINIPIPE_TRAIN_LLAMA_CPP, or build/train_llama_cpp (setup.sh builds it). When
it is missing the test is skipped, except under CI (CI=true), where that is a failure."""

from __future__ import annotations

import math
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

# The C++ trainer example end to end under torchrun, 2 and 4 processes: the slow tier, with the
# Python examples (the C++ LLaMA stage's parity is in the fast tier: test_cpp_llama.py).
pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(REPO / "tests" / "python" / "runtime"))
from launcher import free_port  # noqa: E402


def binary() -> Path:
    path = Path(os.environ.get("INFINIPIPE_TRAIN_LLAMA_CPP", REPO / "build" / "train_llama_cpp"))
    if not path.is_file():
        message = (
            f"{path} is not built: cmake --build build --target train_llama_cpp "
            f"(needs INFINIPIPE_WITH_TORCH=ON and libgloo-dev)"
        )
        if os.environ.get("CI") == "true":
            pytest.fail(message)
        pytest.skip(message)
    return path


def train(ranks: int, *extra: str) -> list[float]:
    """Rank 0's printed losses of a 2-step run on `ranks` processes."""
    return run_example(ranks, *extra)[0]


def run_example(ranks: int, *extra: str, steps: int = 2) -> tuple[list[float], str]:
    """Rank 0's printed losses of a `steps`-step run on `ranks` processes, and its output."""
    command = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--no-python",
        f"--nproc_per_node={ranks}",
        "--master_addr=127.0.0.1",
        f"--master_port={free_port()}",
        str(binary()),
        *("--steps", str(steps), "--batch", "4", "--context", "256", "--timeout-s", "60"),
        *extra,
    ]
    done = subprocess.run(
        command,
        capture_output=True,
        text=True,
        timeout=240,
        env=dict(os.environ, OMP_NUM_THREADS="1"),
    )
    log = f"--- stdout\n{done.stdout[-3000:]}\n--- stderr\n{done.stderr[-3000:]}"
    assert done.returncode == 0, log
    assert re.search(r"tokens/s", done.stdout), log
    losses = [float(x) for x in re.findall(r"^step +\d+ +loss (\S+)", done.stdout, re.M)]
    assert len(losses) == steps, log
    assert all(math.isfinite(x) and x > 0 for x in losses), log
    return losses, done.stdout


def test_cpp_example_trains_two_steps_on_two_ranks():
    _, out = run_example(2)
    # The example flushes denormal floats in its own process (docs/runtime.md); x86 CPUs can.
    assert "denormal floats: flushed to zero" in out, out


def test_cpp_example_keeps_denormals_when_asked():
    _, out = run_example(2, "--keep-denormals", steps=1)
    assert "denormal floats: kept (--keep-denormals)" in out, out


@pytest.mark.parametrize("layout", [("--sequence", "2"), ("--replicas", "2")])
def test_cpp_example_trains_alike_with_sequence_ranks_or_replicas(layout):
    """2 stages x 2 sequence ranks, and 2 stages x 2 replicas (4 processes): the 2-rank run's
    losses (the same batches; the gradients summed in other orders)."""
    want = train(2)
    got = train(4, *layout)
    assert got == pytest.approx(want, rel=1e-4), (layout, got, want)


def test_cpp_example_spread_head_trains_alike_with_heads_on_both_stages():
    """--spread-head: head replicas on both stages, heads where the planner puts them (some on
    stage 0), the head's gradients summed over every rank: the plain run's losses."""
    want, _ = run_example(2, steps=4)  # the first two steps' plans keep every head last
    got, out = run_example(2, "--spread-head", steps=4)
    assert got == pytest.approx(want, rel=1e-4), (got, want)
    heads = re.search(
        r"LM heads run per stage over the steps \(spread head\): \[(\d+), (\d+)\]", out
    )
    assert heads, out
    assert int(heads.group(1)) > 0, out
