"""The benchmark scripts' smoke paths: cluster_study --smoke, cluster_sp_study --smoke,
flexsp_study --smoke and plot_timeline on a small trace."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
TOOL = ROOT / "build" / "infinipipe-plan"
BENCHMARKS = ROOT / "benchmarks"
STAGES = 4

pytestmark = pytest.mark.skipif(
    not TOOL.exists(), reason="%s is not built (ninja -C build infinipipe-plan)" % TOOL
)


def test_cluster_study_smoke():
    done = subprocess.run(
        [sys.executable, str(BENCHMARKS / "cluster_study.py"), str(TOOL), "--smoke"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("cluster_study smoke:"), done.stdout
    assert len(done.stdout.strip().splitlines()) == 1


def test_cluster_sp_study_smoke():
    done = subprocess.run(
        [sys.executable, str(BENCHMARKS / "cluster_sp_study.py"), str(TOOL), "--smoke"],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=BENCHMARKS,
    )
    assert done.returncode == 0, done.stderr
    written = Path(done.stdout.strip().splitlines()[-1].split()[1])
    page = written.read_text()
    assert "<!-- sp-study: start -->" in page and "<!-- sp-study: end -->" in page
    assert "| LLaMA-7B, 48K, d_s=8 x d_p=4 |" in page


def test_flexsp_study_smoke():
    pytest.importorskip("pulp")
    done = subprocess.run(
        [sys.executable, str(BENCHMARKS / "flexsp_study.py"), str(TOOL), "--smoke"],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=BENCHMARKS,
        env=dict(os.environ, PYTHONPATH=str(ROOT / "python")),
    )
    assert done.returncode == 0, done.stderr
    written = Path(done.stdout.strip().splitlines()[-1].split()[1])
    page = written.read_text()
    assert "<!-- flexsp-study: start -->" in page and "<!-- flexsp-study: end -->" in page
    assert "| LLaMA-7B, 48K |" in page


@pytest.fixture(scope="module")
def small_trace(tmp_path_factory):
    path = tmp_path_factory.mktemp("trace") / "trace.json"
    subprocess.run(
        [
            str(TOOL),
            "--distribution",
            "wikipedia",
            "--batch",
            "32",
            "--context",
            "8192",
            "--seed",
            "0",
            "--model",
            "llama-7b",
            "--hardware",
            "a800",
            "--stages",
            str(STAGES),
            "--memory-gib",
            "80",
            "--method",
            "epp",
            "--trace",
            str(path),
        ],
        check=True,
        capture_output=True,
        timeout=60,
    )
    return path


def test_parsed_events_cover_every_stage(small_trace):
    sys.path.insert(0, str(BENCHMARKS))
    try:
        from lib import timeline_plot
    finally:
        sys.path.remove(str(BENCHMARKS))
    trace = json.loads(small_trace.read_text())
    events = timeline_plot.parse_events(trace)
    assert {e["stage"] for e in events} == set(range(STAGES))
    assert {"forward", "backward"} <= {e["cat"] for e in events}
    # A measured trace has no memory counters and no thread names: tid is the stage.
    bare = [e for e in trace["traceEvents"] if e.get("ph") == "X" and e["tid"] < STAGES]
    assert {e["stage"] for e in timeline_plot.parse_events({"traceEvents": bare})} == set(
        range(STAGES)
    )


def test_plot_timeline_cli_writes_png(small_trace, tmp_path):
    out = tmp_path / "timeline.png"
    subprocess.run(
        [
            sys.executable,
            str(BENCHMARKS / "plot_timeline.py"),
            str(small_trace),
            str(small_trace),
            "--labels",
            "A",
            "B",
            "--output",
            str(out),
        ],
        check=True,
        capture_output=True,
        timeout=120,
    )
    assert out.exists() and out.stat().st_size > 0
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
