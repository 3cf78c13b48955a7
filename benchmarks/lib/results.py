"""Where the benchmarks' results and pages live, and reading and writing results JSON."""

import json
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
TOOL = ROOT / "build" / "infinipipe-plan"
RESULTS = ROOT / "benchmarks" / "results"
DOCS = ROOT / "docs"
MIB = 1 << 20  # results give budgets and peaks in MiB


def load(path):
    """A results file's JSON, or None when the file is not there (that result was not run)."""
    path = Path(path)
    return json.loads(path.read_text()) if path.exists() else None


def write(path, data):
    """`data` as indented JSON at `path`, its folder made if missing."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=1))


def model_state_bytes(parameters) -> int:
    """Weights, gradients and AdamW's two moments: four copies of every parameter."""
    return 4 * sum(p.numel() * p.element_size() for p in parameters)
