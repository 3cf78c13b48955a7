#!/usr/bin/env python3
"""How much faster than the baselines is EPP at the paper's cluster scale (pipeline parallelism
alone), as the planning core's simulator predicts it?

Runs the built `infinipipe-plan` (analytic A800 coefficients, Wikipedia lengths, batch 512,
80 GiB per stage, 16 steps) over LLaMA-7B/13B/30B, contexts 48K/96K/192K and 4/8 stages, and
writes benchmarks/results/cluster_study.json (per case and method: mean step, speed-up, bubble,
recompute, peak memory, the busiest stage's compute) and, from one step of the headline case
planned with `--trace`, docs/img/timeline_sim_13b.png. The plan tool's rows are summarised per
case by lib/simulated_case.py; benchmarks/planning_report.py renders docs/cluster_study.md and
docs/img/cluster_speedup.png from the results. `--smoke` runs one small case and renders the page
into a temporary directory.

Usage: python3 benchmarks/experiments/cluster_study.py [build/infinipipe-plan] [--smoke]
"""

import datetime
import os
import sys
import tempfile
import time
from pathlib import Path

# The benchmarks' shared code (benchmarks/lib) is one folder up.
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from lib import cluster_page, plan_tool, results
from lib.cluster_tables import case_name, cell
from lib.markdown import machine
from lib.plan_tool import BASELINES, HEADLINE, LABELS, tool_args
from lib.simulated_case import run_case, timeline

MODELS = ["llama-7b", "llama-13b", "llama-30b"]
CONTEXTS = [49152, 98304, 196608]
STAGES = [4, 8]
# One case of 10 steps took 8-40 s on the 2-core dev machine under `nice` and the time grows
# faster than the step count (the baselines' static choice weighs every setting on every step);
# 16 steps of all 18 cases took 459 s, well inside a 40-minute budget with room for load.
STEPS = 16
BASE = dict(
    distribution="wikipedia", batch=512, hardware="a800", memory_gib=80, seed=0, steps=STEPS
)
SMOKE = dict(BASE, model="llama-7b", stages=4, context=49152, batch=64, steps=2)


def smoke_line(case, seconds):
    """The smoke run's one line: the case, EPP's mean step and its speed-ups."""
    c = case["result"]
    ratios = (
        ", ".join(
            "%s %s"
            % (LABELS[m], cell(c["methods"][m + " static"], "speedup", "%.2fx") or "infeasible")
            for m in BASELINES
        )
        if "methods" in c
        else c["error"]
    )
    return "cluster_study smoke: %s, EPP %s; speed-up over static %s; %.1f s" % (
        case_name(case),
        cell(c.get("methods", {}).get("epp", {}), "mean_step_s", "%.3f s") or "infeasible",
        ratios,
        seconds,
    )


def main():
    parser = plan_tool.parser(
        __doc__.splitlines()[0], "one small case for CI, written to a temp dir"
    )
    args = plan_tool.parse(parser, "cluster_study")
    grid = (
        [SMOKE]
        if args.smoke
        else [
            dict(BASE, model=m, stages=s, context=c)
            for s in STAGES
            for m in MODELS
            for c in CONTEXTS
        ]
    )
    started = time.monotonic()
    cases = []
    for case in grid:
        result = run_case(args.tool, case)
        cases.append(dict(case, result=result))
        epp = result.get("methods", {}).get("epp", {})
        print(
            "cluster_study: %s: %.1f s, EPP %s"
            % (
                case_name(case),
                result["seconds"],
                "%.3f s" % epp["mean_step_s"] if epp.get("feasible") else "infeasible",
            ),
            file=sys.stderr,
        )
    model, cores = machine()
    meta = {
        "case": grid[0],
        "seconds": time.monotonic() - started,
        "machine": model,
        "cores": cores,
        "date": datetime.date.today().isoformat(),
        "timeline_case": SMOKE if args.smoke else HEADLINE,
        "tool_command": " ".join(
            ["infinipipe-plan"]
            + tool_args(dict(grid[0], model="MODEL", stages="STAGES", context="CONTEXT"), "all")
        ),
    }
    if args.smoke:
        with tempfile.TemporaryDirectory() as tmp:
            meta["timeline"] = timeline(args.tool, meta["timeline_case"], Path(tmp) / "t.png")
            cluster_page.render_with(Path(tmp), cluster_study={"meta": meta, "cases": cases})
        print(smoke_line(cases[0], meta["seconds"]))
        return
    picture = results.DOCS / "img" / "timeline_sim_13b.png"
    meta["timeline"] = timeline(args.tool, meta["timeline_case"], picture)
    path = results.RESULTS / "cluster_study.json"
    results.write(path, {"meta": meta, "cases": cases})
    print(
        "cluster_study: %d cases in %.0f s; wrote %s and %s"
        % (
            len(cases),
            meta["seconds"],
            os.path.relpath(path, results.ROOT),
            os.path.relpath(picture, results.ROOT),
        )
    )


if __name__ == "__main__":
    main()
