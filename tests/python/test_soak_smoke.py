"""The soak (benchmarks/soak.py) for 5 short steps on 2 ranks under torchrun: its JSON holds the
settings and finite per-step arrays for every rank, and benchmarks/plot_soak.py renders it (the
verdict numbers, the PNG, the docs section). No thresholds: the full soak's numbers are in
docs/benchmarks.md, measured, not asserted."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
BENCHMARKS = REPO / "benchmarks"
STEPS = 5


def run(command, timeout):
    done = subprocess.run(
        command,
        capture_output=True,
        text=True,
        timeout=timeout,
        env=dict(os.environ, OMP_NUM_THREADS="1"),
    )
    log = f"--- stdout\n{done.stdout[-3000:]}\n--- stderr\n{done.stderr[-3000:]}"
    assert done.returncode == 0, log
    return done.stdout


def finite(values):
    return len(values) == STEPS and all(math.isfinite(v) for v in values)


def test_soak_writes_finite_curves_and_plots_them(tmp_path):
    out = tmp_path / "soak.json"
    stdout = run(
        [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--standalone",
            "--nproc_per_node=2",
            str(BENCHMARKS / "soak.py"),
            "--steps",
            str(STEPS),
            "--batch",
            "4",
            "--context",
            "256",
            "--save-every",
            "2",
            "--gc-every",
            "2",
            "--out",
            str(out),
        ],
        timeout=300,
    )
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
        stdout = run(
            [
                sys.executable,
                str(BENCHMARKS / "plot_soak.py"),
                str(out),
                "--output",
                str(png),
                "--docs",
                str(page),
            ],
            timeout=120,
        )
    assert "rank 1: RSS" in stdout and "nan" not in stdout, stdout
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    text = page.read_text()
    assert text.count("## Soak") == 1 and text.count("## Reproducing") == 1
    assert text.index("## Soak") < text.index("## Reproducing")
    assert "![RSS, step time and loss over the soak](img/soak.png)" in text
