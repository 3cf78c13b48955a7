"""The soak (benchmarks/experiments/soak.py) for 5 short steps on 2 ranks under torchrun: its JSON holds the
settings and finite per-step arrays for every rank, and benchmarks/tools/plot_soak.py renders it (the
verdict numbers, the PNG, the docs section). Then a soak that saves its state after 2 steps and
one resumed from that checkpoint: the resumed run's losses equal the uninterrupted one's, bitwise,
and plot_soak.py --resumed says so. No thresholds: the full soak's numbers are in
docs/benchmarks.md, measured, not asserted."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
BENCHMARKS = REPO / "benchmarks"
STEPS = 5


def run(command, timeout, fails=False):
    """The command's stdout (and stderr, when it is to fail), asserting it succeeds or fails."""
    done = subprocess.run(
        command,
        capture_output=True,
        text=True,
        timeout=timeout,
        env=dict(os.environ, OMP_NUM_THREADS="1"),
    )
    log = f"--- stdout\n{done.stdout[-3000:]}\n--- stderr\n{done.stderr[-3000:]}"
    assert (done.returncode != 0) == fails, log
    return done.stdout + (done.stderr if fails else "")


def soak(out, *options, batch=4, fails=False):
    """benchmarks/experiments/soak.py on 2 ranks for STEPS steps of `batch` sequences of at most 256 tokens."""
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2"]
    command += [
        str(BENCHMARKS / "experiments" / "soak.py"),
        "--steps",
        str(STEPS),
        "--batch",
        str(batch),
    ]
    command += ["--context", "256", "--save-every", "2", "--gc-every", "2", "--out", str(out)]
    return run([*command, *options], timeout=300, fails=fails)


def plot_soak(results, png, page, *options):
    command = [sys.executable, str(BENCHMARKS / "tools" / "plot_soak.py"), str(results)]
    return run([*command, "--output", str(png), "--docs", str(page), *options], timeout=120)


def finite(values):
    return len(values) == STEPS and all(math.isfinite(v) for v in values)


def test_soak_writes_finite_curves_and_plots_them(tmp_path):
    out = tmp_path / "soak.json"
    stdout = soak(out)
    assert "rank 0: RSS" in stdout and "rank 1: RSS" in stdout, stdout
    data = json.loads(out.read_text())
    assert data["complete"] is True and data["steps_done"] == STEPS
    settings = data["settings"]
    for key in ("steps", "batch", "context", "world_size", "commit", "torch", "model"):
        assert key in settings, key
    assert settings["world_size"] == 2 and settings["steps"] == STEPS
    assert len(data["tokens"]) == STEPS and all(t > 0 for t in data["tokens"])
    assert [r["rank"] for r in data["ranks"]] == [0, 1]
    for r in data["ranks"]:
        assert finite(r["step_seconds"]) and all(s > 0 for s in r["step_seconds"])
        assert finite(r["rss_bytes"]) and all(b > 0 for b in r["rss_bytes"])
        assert finite(r["loss"]) and all(x > 0 for x in r["loss"])
        held = r["malloc_in_use_bytes"]
        assert len(held) == STEPS and all(b is None or b > 0 for b in held)
        assert [s for s, _ in r["gc_objects"]] == [0, 2, 4]
    # Every rank reports the step's loss.
    assert data["ranks"][0]["loss"] == data["ranks"][1]["loss"]

    page = tmp_path / "benchmarks.md"
    page.write_text("# Benchmarks\n\ntext\n\n## Reproducing\n\nmore\n")
    png = tmp_path / "soak.png"
    for _ in range(2):  # the second run replaces the section, not adds one
        stdout = plot_soak(out, png, page)
    assert "rank 1: RSS" in stdout and "nan" not in stdout, stdout
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    text = page.read_text()
    assert text.count("## Soak") == 1 and text.count("## Reproducing") == 1
    assert text.index("## Soak") < text.index("## Reproducing")
    assert "![RSS, step time and loss over the soak](img/soak.png)" in text
    assert "Not measured here: the same losses from a run resumed halfway" in text


@pytest.mark.slow  # a soak, saved, resumed in fresh processes
def test_soak_resumed_halfway_has_the_same_losses(tmp_path):
    ckpt, full, resumed = tmp_path / "ckpt", tmp_path / "soak.json", tmp_path / "resumed.json"
    soak(full, "--checkpoint-dir", str(ckpt), "--save-at", "2")
    soak(resumed, "--checkpoint-dir", str(ckpt), "--resume")
    a, b = json.loads(full.read_text()), json.loads(resumed.read_text())
    assert a["first_step"] == 0 and a["checkpoint"]["saved_at_step"] == 2
    assert (ckpt / "step-2").is_dir()
    assert b["complete"] is True and b["first_step"] == 2 and b["steps_done"] == STEPS - 2
    assert b["checkpoint"]["resumed_from_step"] == 2 and b["checkpoint"]["loaded"].endswith("2")
    assert [s for s, _ in b["ranks"][0]["gc_objects"]] == [2, 4]
    assert b["plan_hashes"] == a["plan_hashes"][2:] and b["tokens"] == a["tokens"][2:]
    for x, y in zip(a["ranks"], b["ranks"]):
        assert y["loss"] == x["loss"][2:]  # JSON keeps a double exactly: bitwise equal

    page = tmp_path / "benchmarks.md"
    page.write_text("# Benchmarks\n")
    stdout = plot_soak(full, tmp_path / "soak.png", page, "--resumed", str(resumed))
    steps = STEPS - 2
    assert f"losses equal (bitwise) on {steps} of {steps} steps" in stdout, stdout
    compared = json.loads(full.read_text())["resumed"]  # kept for benchmarks/report.py
    assert compared["steps"] == steps and compared["resumed_from_step"] == 2
    assert all(r["equal"] == steps and r["max_abs_difference"] == 0 for r in compared["ranks"])
    text = page.read_text()
    assert f"bitwise, on all {steps} steps on every rank" in text
    assert "--resume --checkpoint-dir" in text and "--save-at 2" in text

    # A resume whose batches would differ from the saved run's is refused.
    stderr = soak(
        tmp_path / "other.json", "--checkpoint-dir", str(ckpt), "--resume", batch=3, fails=True
    )
    assert "was saved with other batch settings: batch 4 (this run's: 3)" in stderr, stderr
