#!/usr/bin/env python3
"""How much faster than the baselines, static and per-step best, is EPP on the headline case,
predicted by the planning core's simulator; and how long does it plan?

Runs the built `infinipipe-plan` tool on the issue's headline case (Wikipedia lengths, LLaMA-13B,
A800, 8 stages, 80 GiB per stage, batch 512, context 96K, 5 sampled steps) for every method,
EPP alone pinned to one core (`taskset -c 0`) a few times for its planning time, and EPP over
more steps with the recompute programs compared; writes every row to
benchmarks/results/planning_comparison.json, from which benchmarks/report.py renders
docs/planning.md. `--smoke` runs a small case for CI and writes only to --output.

Usage: python3 benchmarks/experiments/planning_comparison.py [build/infinipipe-plan] [--smoke] [--output F]
"""

import datetime
import shutil
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/, for lib
from lib import plan_tool, results  # noqa: E402
from lib.markdown import machine  # noqa: E402
from lib.plan_tool import HEADLINE, run_tool, tool_args  # noqa: E402
from lib.planning_page import result_sections  # noqa: E402

SMOKE = dict(HEADLINE, batch=64, steps=2)
TIMING_RUNS = 3
CHECKPOINT_STEPS = 10


def main():
    parser = plan_tool.parser(__doc__.splitlines()[0], "small case for CI (batch 64, 2 steps)")
    parser.add_argument(
        "--output",
        help="the result JSON (default benchmarks/results/planning_comparison.json; with --smoke "
        "none)",
    )
    args = plan_tool.parse(parser, "planning_comparison")
    case = SMOKE if args.smoke else HEADLINE
    command = [args.tool] + tool_args(case, "all")
    rows = run_tool(command)

    # Other work on the machine only ever adds to a wall-clock time, so each step's planning time
    # is the least over a few runs.
    pin = ["taskset", "-c", "0"] if shutil.which("taskset") else []
    runs = []
    for _ in range(TIMING_RUNS):
        epp_rows = run_tool(pin + [args.tool] + tool_args(case, "epp"))
        runs.append([r["plan_ms"] for r in epp_rows if r["method"] == "epp" and r["feasible"]])

    # Tied against untied recompute, over more steps than the comparison.
    wide = dict(case, steps=max(case["steps"], CHECKPOINT_STEPS))
    checkpoint_rows = [r for r in run_tool([args.tool] + tool_args(wide, "epp")) if r["feasible"]]
    model, cores = machine()
    result = dict(
        case=case,
        command=" ".join(["infinipipe-plan"] + command[1:]),
        rows=rows,
        plan_ms_one_core=[min(times_of_step) for times_of_step in zip(*runs)],
        plan_ms_worst_run=max(max(run) for run in runs),
        pinned=bool(pin),
        timing_runs=TIMING_RUNS,
        checkpoint_rows=checkpoint_rows,
        machine=f"{model}, {cores} cores",
        date=datetime.date.today().isoformat(),
    )
    result_sections(result)  # the page can be rendered from it (EPP feasible on every step)
    output = args.output or (None if args.smoke else results.RESULTS / "planning_comparison.json")
    if output:
        results.write(output, result)
        print(f"wrote {output}")


if __name__ == "__main__":
    main()
