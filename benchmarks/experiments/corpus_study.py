#!/usr/bin/env python3
"""Does EPP's speed-up hold on code-like lengths as on Wikipedia's?

The paper evaluates on GitHub code and CommonCrawl as well as Wikipedia. This runs the cluster
studies' grid (LLaMA-7B/13B/30B at 48K/96K/192K; 4 and 8 stages without SP, Ulysses SP 8 x 4 and
4 x 8 on 8-GPU nodes; batch 512, size-aware A800, 80 GiB, 16 steps, seed 0) on the plan tool's
built-in "wikipedia" and "code" distributions (the latter fitted to benchmarks/tools/
code_lengths.py's corpus, docs/notes/2026-11-29-code-lengths.md), two cases at a time, and
writes benchmarks/results/corpus_study.json; benchmarks/planning_report.py renders
docs/cluster_study.md ("Code lengths") from it. `--smoke` runs two small cases and renders the
page into a temporary directory.

Usage: python3 benchmarks/experiments/corpus_study.py [build/infinipipe-plan] [--smoke]
"""

import datetime
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

# The benchmarks' shared code (benchmarks/lib) is one folder up.
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from lib import cluster_page, plan_tool
from lib.markdown import machine
from lib.plan_tool import tool_args
from lib.simulated_case import run_case

DISTRIBUTIONS = ["wikipedia", "code"]
MODELS = ["llama-7b", "llama-13b", "llama-30b"]
CONTEXTS = [49152, 98304, 196608]
LAYOUTS = [(1, 4), (1, 8), (8, 4), (4, 8)]  # (d_s, d_p): without SP, then 32 GPUs with it
GPUS_PER_NODE = 8
BASE = dict(batch=512, hardware="a800", memory_gib=80, seed=0, steps=16)
SMOKE = dict(BASE, batch=32, steps=2)


def layout_args(sp):
    return ["--sp", str(sp), "--gpus-per-node", str(GPUS_PER_NODE)] if sp > 1 else []


def one(tool, case):
    return dict(case, result=run_case(tool, case, layout_args(case["sp"])))


def main():
    p = plan_tool.parser(__doc__.splitlines()[0], "two small cases, rendered to a temporary dir")
    args = plan_tool.parse(p, "corpus_study")
    base = SMOKE if args.smoke else BASE
    grid = [
        dict(base, distribution=d, model=m, context=c, sp=s, stages=st)
        for (s, st) in ([(8, 4)] if args.smoke else LAYOUTS)
        for m in (["llama-7b"] if args.smoke else MODELS)
        for c in ([49152] if args.smoke else CONTEXTS)
        for d in DISTRIBUTIONS
    ]
    started = time.monotonic()
    # Two cases at a time: each plan tool run is one process (the dev machine has 2 cores).
    with ThreadPoolExecutor(2) as pool:
        cases = list(pool.map(lambda case: one(args.tool, case), grid))
    for c in cases:
        epp = c["result"].get("methods", {}).get("epp", {})
        print(
            "corpus_study: %s %s %dK sp %d x %d: %s"
            % (
                c["distribution"],
                c["model"],
                c["context"] // 1024,
                c["sp"],
                c["stages"],
                "EPP %.3f s" % epp["mean_step_s"] if epp.get("feasible") else "EPP infeasible",
            ),
            file=sys.stderr,
        )
    meta = {
        "case": base,
        "machine": "%s, %d cores" % machine(),
        "date": datetime.date.today().isoformat(),
        "seconds": time.monotonic() - started,
        "command": "infinipipe-plan "
        + " ".join(
            tool_args(
                dict(
                    base,
                    distribution="DISTRIBUTION",
                    model="MODEL",
                    context="CONTEXT",
                    stages="D_P",
                ),
                "all",
            )
        )
        + " [--sp D_S --gpus-per-node %d]" % GPUS_PER_NODE,
    }
    print("wrote", cluster_page.finish("corpus_study", {"meta": meta, "cases": cases}, args.smoke))


if __name__ == "__main__":
    main()
