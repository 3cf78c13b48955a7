"""How typical the measured CPU case is: its setup simulated over more steps and other budgets.

    python benchmarks/cpu_horizon.py --cost-model benchmarks/results/cost_cpu.json

benchmarks/measured_comparison.py measures 6 steps at one budget (every method takes minutes per
step there). The planner and simulator, with the same calibrated cost model, run in seconds: this
plans the same setup (2 stages, Wikipedia lengths, batch 16, context 8192) over the measured
steps and over 30 steps (seeds 0..29), at the measured budget and at others, and records EPP's
predicted speed-up over each static baseline (chosen over all the steps simulated, as in the
measured run). Writes benchmarks/results/cpu_horizon.json for docs/benchmarks.md.
"""
import argparse
import json
import os

from cluster_study import run_case

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--cost-model", required=True)
    p.add_argument("--tool", default=os.path.join(ROOT, "build", "infinipipe-plan"))
    p.add_argument("--measured-steps", type=int, default=6)
    p.add_argument("--steps", type=int, default=30)
    p.add_argument("--budgets-mib", default="128,192,256,384", help="comma separated")
    p.add_argument("--measured-budget-mib", type=float, default=192)
    p.add_argument("--output", default=os.path.join(ROOT, "benchmarks", "results", "cpu_horizon.json"))
    args = p.parse_args()
    base = dict(distribution="wikipedia", batch=16, context=8192, seed=0, model=args.cost_model,
                hardware="cpu", stages=2)
    grid = [(args.measured_steps, args.measured_budget_mib)]
    grid += [(args.steps, float(b)) for b in args.budgets_mib.split(",")]
    cases = []
    for steps, budget in grid:
        case = dict(base, steps=steps, memory_gib=budget / 1024)
        result = run_case(args.tool, case)
        methods = result.get("methods", {})
        cases.append(dict(steps=steps, budget_mib=budget, error=result.get("error"),
                          epp_step_s=methods.get("epp", {}).get("mean_step_s"),
                          speedup={k: v.get("speedup") for k, v in methods.items() if k.endswith("static")}))
        print("cpu_horizon: %d steps, %g MiB: %s" % (steps, budget, cases[-1]["speedup"]))
    with open(args.output, "w") as f:
        json.dump(dict(case=base, command="python benchmarks/cpu_horizon.py --cost-model " + args.cost_model,
                       cases=cases), f, indent=1)
    print("wrote %s" % args.output)


if __name__ == "__main__":
    main()
