"""Every file in benchmarks/results/ is accounted for: named by the benchmark code that writes it
(an experiment's default output, or benchmarks/run_all.sh's command), or the cost model a kept
result records it planned with. A result no code writes and nothing uses is history: a dated
note in docs/notes/ says what it showed and which commit holds it."""

from __future__ import annotations

import json
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "benchmarks" / "results"


def benchmark_code() -> str:
    files = [*(ROOT / "benchmarks").rglob("*.py"), ROOT / "benchmarks" / "run_all.sh"]
    return "\n".join(f.read_text() for f in files if "results" not in f.parts)


def recorded_inputs() -> set[str]:
    """The cost models the kept results say they planned with (and their sidecars)."""
    names = set()
    for path in RESULTS.glob("*.json"):
        data = json.loads(path.read_text())
        model = data.get("cost_model") if isinstance(data, dict) else None
        if isinstance(model, str) and model.endswith(".json"):
            name = Path(model).name
            names |= {name, name.removesuffix(".json") + ".meta.json"}
    return names


def test_every_result_file_is_named_by_the_code_that_writes_it_or_used_by_a_result():
    code, inputs = benchmark_code(), recorded_inputs()
    orphans = [
        p.name for p in sorted(RESULTS.iterdir()) if p.name not in code and p.name not in inputs
    ]
    assert not orphans, (
        f"{orphans}: no benchmark code names these result files and no kept result used them; "
        "name each where it is written (benchmarks/run_all.sh) or retire it with a note"
    )
