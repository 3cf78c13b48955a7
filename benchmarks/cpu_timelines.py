"""Simulated timelines of one step of the measured CPU case: EPP and static Seq1F1B.

    python benchmarks/cpu_timelines.py --cost-model benchmarks/results/cost_cpu.json

The first step of benchmarks/measured_comparison.py's case (2 stages, the calibrated tiny LLaMA,
Wikipedia lengths, its budget), planned and simulated by infinipipe-plan with the calibrated cost
model; Seq1F1B at the static setting chosen over the case's steps, as in the measured run. Writes
the picture and a JSON with the plans' predictions and the commands (for docs/benchmarks.md).
"""
import argparse
import json
import os

from cluster_study import timeline

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--cost-model", required=True)
    p.add_argument("--tool", default=os.path.join(ROOT, "build", "infinipipe-plan"))
    p.add_argument("--batch", type=int, default=16)
    p.add_argument("--context", type=int, default=8192)
    p.add_argument("--steps", type=int, default=6)
    p.add_argument("--budget-mib", type=float, default=192)
    p.add_argument("--output", default=os.path.join(ROOT, "docs", "img", "timeline_sim_cpu.png"))
    p.add_argument("--json", default=os.path.join(ROOT, "benchmarks", "results", "timeline_cpu.json"))
    args = p.parse_args()
    case = dict(distribution="wikipedia", batch=args.batch, context=args.context, seed=0,
                model=args.cost_model, hardware="cpu", stages=2,
                memory_gib=args.budget_mib / 1024, steps=args.steps)
    result = timeline(args.tool, case, args.output)
    with open(args.json, "w") as f:
        json.dump(result, f, indent=1)
    print("wrote %s and %s" % (args.output, args.json))


if __name__ == "__main__":
    main()
