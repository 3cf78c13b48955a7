"""docs/benchmarks.md's "On the GPU" (benchmarks/lib/gpu_report.py): the fit's error at every
grid point and the section rendered from the committed GPU results."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))
from lib import gpu_report  # noqa: E402
from lib.results import RESULTS  # noqa: E402

COEFFICIENTS = dict(a1=2e-11, a2=7e-7, b=5e-4, a3=1e-8)


def meta_with(times) -> dict:
    """A profile's sidecar whose runs take times(tokens, context, part) seconds."""
    meta = {**COEFFICIENTS, **{f"backward_{k}": 2 * v for k, v in COEFFICIENTS.items()}}
    meta["runs"] = dict(
        layer=[
            dict(
                tokens=s,
                context=c,
                forward_s=[times(s, c, "forward")] * 3,
                backward_s=[times(s, c, "backward")] * 3,
            )
            for s in (256, 4096)
            for c in (0, 8192)
        ]
    )
    meta["held_out"] = [1]
    return meta


def exact(s: int, c: int, part: str) -> float:
    k = 1 if part == "forward" else 2
    return k * (2e-11 * ((c + s) ** 2 - c**2) + 7e-7 * s + 5e-4 + 1e-8 * c)


def test_point_errors_are_zero_where_the_fit_is_exact_and_signed_where_not():
    rows = gpu_report.point_errors(meta_with(exact))
    assert [r["held_out"] for r in rows] == [False, True, False, False]
    for r in rows:
        assert r["forward_error"] == pytest.approx(0, abs=1e-12)
        assert r["backward_error"] == pytest.approx(0, abs=1e-12)
    # runs 25% slower than the fit: the fit is 20% fast
    slow = gpu_report.point_errors(meta_with(lambda s, c, p: 1.25 * exact(s, c, p)))
    assert all(r["forward_error"] == pytest.approx(-0.2) for r in slow)


def test_the_section_renders_the_committed_gpu_results(tmp_path):
    lines = gpu_report.gpu_section(RESULTS, tmp_path)
    page = "\n".join(lines)
    assert "NVIDIA H200" in page
    for model in gpu_report.PROFILES:
        assert f"| {model} |" in page
    grid = [line for line in lines if line.startswith("| 16384 |")]
    assert grid and grid[0].count("ms") == 6  # every context of the largest chunk
    assert (tmp_path / "img" / "gpu_efficiency_h200.png").stat().st_size > 0


def test_without_results_the_section_says_so(tmp_path):
    lines = gpu_report.gpu_section(tmp_path, tmp_path)
    assert lines[0].startswith("No GPU results")
