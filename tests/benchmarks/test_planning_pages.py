"""The planning pages (docs/planning.md, cluster_study.md, properties.md) are what
benchmarks/planning_report.py renders from the committed results through benchmarks/templates/:
no page edited by hand, no figure typed in."""

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
REPORT = ROOT / "benchmarks" / "planning_report.py"


def test_pages_are_rendered_from_the_committed_results():
    done = subprocess.run(
        [sys.executable, str(REPORT), "--check"], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr


def test_a_missing_value_fails_loudly():
    sys.path.insert(0, str(ROOT / "benchmarks"))
    try:
        from lib import page_template
    finally:
        sys.path.remove(str(ROOT / "benchmarks"))
    with pytest.raises(KeyError):
        page_template.render("planning.md", {})


@pytest.mark.skipif(
    not (ROOT / "build" / "infinipipe-properties").exists(),
    reason="build/infinipipe-properties is not built",
)
def test_properties_smoke_renders_the_page():
    """The property benchmark's smoke run, summarised with its commit and rendered."""
    script = ROOT / "benchmarks" / "experiments" / "properties.py"
    tool = ROOT / "build" / "infinipipe-properties"
    done = subprocess.run(
        [sys.executable, str(script), str(tool), "--smoke"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("properties smoke:"), done.stdout
