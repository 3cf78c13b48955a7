#!/usr/bin/env python3
"""Does EPP's margin over the static baselines hold when the layer costs are the ones measured on
a GPU rather than the analytic model's?

Plans 16 sampled Wikipedia steps (batch 512, context 96K, 8 stages, 80 GiB per stage) of
LLaMA-7B and LLaMA-13B with the built plan tool, once with the analytic model on the built-in
h100 hardware and once with the cost model profiled on the H200 (benchmarks/results/
cost_h200_llama7b.json, cost_h200_llama13b.json: docs/benchmarks.md, "On the GPU"), every method;
writes per case the mean step time of EPP (and its chunks per step) and of each baseline (static
and best per step) to
benchmarks/results/gpu_cost_plans.json, which benchmarks/report.py renders. The measured
profile's layer split is the even one the analytic model uses. `--smoke` plans 2 steps of
batch 64 into a temporary file.

Usage: python3 benchmarks/experiments/gpu_cost_plans.py [build/infinipipe-plan] [--smoke]
"""

import datetime
import sys
import tempfile
from pathlib import Path

# The benchmarks' shared code (benchmarks/lib) is one folder up.
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from lib import plan_tool, results
from lib.plan_tool import BASELINES, HEADLINE, collect, mean, run_tool, times, tool_args

CASE = dict(HEADLINE, hardware="h100", steps=16)
MODELS = {
    "LLaMA-7B": ("llama-7b", "cost_h200_llama7b.json"),
    "LLaMA-13B": ("llama-13b", "cost_h200_llama13b.json"),
}


def plan(tool: str, case: dict) -> dict:
    """Mean step time of EPP and of each baseline, static and best per step."""
    rows = run_tool([tool, *tool_args(case, "all")])
    epp, static, best = collect(rows, case["steps"])
    out = {
        "epp": mean(times(epp, case["steps"])),
        "epp_chunks": mean([epp[i]["num_chunks"] for i in range(case["steps"])]),
    }
    for m in BASELINES:
        for kind, table in (("static", static), ("best", best)):
            t = times(table.get(m, {}), case["steps"])
            out[f"{m} {kind}"] = mean(t) if t is not None else None
    return out


def main() -> int:
    p = plan_tool.parser(__doc__.split("\n")[0], "2 steps of batch 64, written to a temporary file")
    args = plan_tool.parse(p, "gpu_cost_plans")
    case = dict(CASE, batch=64, steps=2) if args.smoke else CASE
    cases = []
    for name, (builtin, measured) in MODELS.items():
        for costs, model in (
            ("analytic h100", builtin),
            ("measured H200", str(results.RESULTS / measured)),
        ):
            print(f"gpu_cost_plans: {name}, {costs}", flush=True)
            cases.append(
                dict(model=name, costs=costs, means=plan(args.tool, dict(case, model=model)))
            )
    data = dict(
        date=datetime.datetime.now(datetime.UTC).isoformat(),
        case={k: v for k, v in case.items() if k != "model"},
        cases=cases,
    )
    out = (
        Path(tempfile.mkdtemp()) / "gpu_cost_plans.json"
        if args.smoke
        else results.RESULTS / "gpu_cost_plans.json"
    )
    results.write(out, data)
    print(f"gpu_cost_plans: wrote {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
