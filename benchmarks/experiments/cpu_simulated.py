"""The measured CPU case, simulated: one step as a timeline, and the setup over more steps and budgets.

    python benchmarks/experiments/cpu_simulated.py --cost-model benchmarks/results/cost_cpu.json

Both plan benchmarks/experiments/measured_comparison.py's setup (2 stages, the calibrated tiny LLaMA,
Wikipedia lengths, batch 16, context 8192) with infinipipe-plan and the calibrated cost model.

- Timeline: the first step, EPP and Seq1F1B at the static setting chosen over the case's steps
  (as in the measured run): a picture and a JSON with the plans' predictions and commands.
- Horizon: the measured run times 6 steps at one budget (each takes minutes there); the planner
  and simulator take seconds, so the same setup over 30 steps (seeds 0..29) and other budgets
  shows whether the measured steps are typical and how EPP's margin depends on the budget. Each
  static baseline is chosen over all the steps simulated.
"""

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/, for lib
from lib import results  # noqa: E402
from lib.results import DOCS, RESULTS, TOOL  # noqa: E402
from lib.simulated_case import run_case, timeline  # noqa: E402


def horizon(tool, base, grid):
    """EPP's predicted step and speed-up over each static baseline per (steps, budget MiB)."""
    cases = []
    for steps, budget in grid:
        result = run_case(tool, dict(base, steps=steps, memory_gib=budget / 1024))
        methods = result.get("methods", {})
        cases.append(
            dict(
                steps=steps,
                budget_mib=budget,
                error=result.get("error"),
                epp_step_s=methods.get("epp", {}).get("mean_step_s"),
                speedup={k: v.get("speedup") for k, v in methods.items() if k.endswith("static")},
            )
        )
        print("cpu_simulated: %d steps, %g MiB: %s" % (steps, budget, cases[-1]["speedup"]))
    return cases


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--cost-model", required=True)
    p.add_argument("--tool", default=str(TOOL))
    p.add_argument("--batch", type=int, default=16)
    p.add_argument("--context", type=int, default=8192)
    p.add_argument("--steps", type=int, default=6, help="the measured case's steps")
    p.add_argument("--budget-mib", type=float, default=192, help="the measured case's budget")
    p.add_argument("--horizon-steps", type=int, default=30)
    p.add_argument("--horizon-budgets-mib", default="128,192,256,384", help="comma separated")
    p.add_argument("--output", default=str(DOCS / "img" / "timeline_sim_cpu.png"))
    p.add_argument("--json", default=str(RESULTS / "timeline_cpu.json"))
    p.add_argument("--horizon-json", default=str(RESULTS / "cpu_horizon.json"))
    args = p.parse_args()
    base = dict(
        distribution="wikipedia",
        batch=args.batch,
        context=args.context,
        seed=0,
        model=args.cost_model,
        hardware="cpu",
        stages=2,
    )
    result = timeline(
        args.tool, dict(base, memory_gib=args.budget_mib / 1024, steps=args.steps), args.output
    )
    results.write(args.json, result)
    grid = [(args.steps, args.budget_mib)] + [
        (args.horizon_steps, float(b)) for b in args.horizon_budgets_mib.split(",")
    ]
    results.write(args.horizon_json, dict(case=base, cases=horizon(args.tool, base, grid)))
    print("wrote %s, %s and %s" % (args.output, args.json, args.horizon_json))


if __name__ == "__main__":
    main()
