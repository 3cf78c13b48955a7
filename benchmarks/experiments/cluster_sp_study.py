#!/usr/bin/env python3
"""How much faster than the baselines is EPP with Ulysses sequence parallelism at the paper's
layout, as the simulator predicts it?

32 A800s as d_s = 8 SP ranks inside a node x d_p = 4 stages across nodes, and as d_s = 4 x
d_p = 8; LLaMA-7B/13B/30B at 48K/96K/192K, Wikipedia lengths, batch 512, 80 GiB per GPU. Runs
the built `infinipipe-plan --sp D_S --stages D_P` per case and writes
benchmarks/results/cluster_sp_study.json; benchmarks/planning_report.py renders docs/
cluster_study.md ("With sequence parallelism") from it. Lengths: the Wikipedia corpus's own
lengths (../shared/data/wikipedia_lengths.txt beside the checkout) when present, else the
built-in wikipedia sampler. `--smoke` runs one small case and renders the page into a temporary
directory.

Usage: python3 benchmarks/experiments/cluster_sp_study.py [build/infinipipe-plan] [--smoke]
"""

import datetime
import subprocess
import sys
import time
from pathlib import Path

# The benchmarks' shared code (benchmarks/lib) is one folder up.
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from lib import cluster_page, corpus, plan_tool
from lib.markdown import machine
from lib.plan_tool import run_tool
from lib.sp_study_tables import sp_name

MODELS = ["llama-7b", "llama-13b", "llama-30b"]
CONTEXTS = [49152, 98304, 196608]
LAYOUTS = [(8, 4), (4, 8)]  # (d_s, d_p): 32 GPUs on 8-GPU nodes
METHODS = ["seq1f1b", "batch", "chunkflow"]
# 16 steps, as the other studies: all 18 cases take about four minutes on the 2-core dev machine.
STEPS = 16
BASE = dict(batch=512, hardware="a800", memory_gib=80, seed=0, steps=STEPS, gpus_per_node=8)
SMOKE = dict(BASE, batch=32, steps=2)


def lengths_args():
    if corpus.CORPUS.exists():
        return [
            "--lengths",
            str(corpus.CORPUS),
        ], "the Wikipedia corpus's lengths (%s)" % corpus.SHOWN
    return ["--distribution", "wikipedia"], "the built-in wikipedia sampler"


def run_case(tool, model, context, d_s, d_p, base):
    """One case's rows summarised per method; or the tool's error when the layout cannot run."""
    command = [tool] + lengths_args()[0]
    for key in ("batch", "seed", "hardware", "memory_gib", "steps", "gpus_per_node"):
        command += ["--" + key.replace("_", "-"), str(base[key])]
    command += ["--model", model, "--context", str(context), "--stages", str(d_p)]
    command += ["--sp", str(d_s), "--method", "all", "--json"]
    done = subprocess.run(command, capture_output=True, text=True)
    case = dict(model=model, context=context, sp=d_s, stages=d_p, command=" ".join(command[1:]))
    if done.returncode == 2:
        case["error"] = done.stderr.strip().removeprefix("infinipipe-plan: error: ")
        return case
    rows = run_tool(command)
    steps = base["steps"]
    case["methods"] = {}
    picks = [("epp", lambda r: r["method"] == "epp")]
    for m in METHODS:
        picks.append(("static " + m, lambda r, m=m: r["method"] == m and r["static"]))
        picks.append(("best " + m, lambda r, m=m: r["method"] == m and not r["static"]))
    for name, pick in picks:
        chosen = [r for r in rows if pick(r)]
        if steps == 1 and name.startswith("best "):  # one step: static is the per-step best
            chosen = [r for r in rows if r["method"] == name.split()[1]]
        case["methods"][name] = summarise(chosen, steps)
    return case


def summarise(rows, steps):
    if len(rows) != steps or not all(r["feasible"] for r in rows):
        bad = [r for r in rows if not r["feasible"]]
        return {"feasible": False, "reason": bad[0]["reason"] if bad else "missing rows"}
    mean = plan_tool.mean
    return {
        "feasible": True,
        "step_time_s": mean([r["step_time_s"] for r in rows]),
        "bubble": mean([r["bubble_fraction"] for r in rows]),
        "recompute_s": mean([r["recompute_s"] for r in rows]),
        # one rank's all-to-all seconds per step on its busiest stage
        "alltoall_s": mean([max(r["alltoall_s_per_stage"]) for r in rows]),
        # one rank's gradient sync at the end of the step, on the stage that ends it last
        "gradient_sync_s": mean([max(r["gradient_sync_s_per_stage"]) for r in rows]),
        "peak_gib": max(max(r["peak_memory_gib_per_rank"]) for r in rows),
        "model_state_gib": max(max(r["model_state_gib_per_rank"]) for r in rows),
        "settings": sorted({r["setting_text"] for r in rows}),
    }


def corpus_counts():
    """How many of the corpus's lengths exceed 96K: why the 96K and 192K cases plan alike."""
    population = corpus.lengths()
    if population is None:
        return None
    return dict(lengths=len(population), over_96k=sum(1 for n in population if n > 98304))


def main():
    p = plan_tool.parser(__doc__.splitlines()[0], "one small case, rendered to a temporary dir")
    args = plan_tool.parse(p, "cluster_sp_study")
    base = SMOKE if args.smoke else BASE
    grid = (
        [("llama-7b", 49152, 8, 4)]
        if args.smoke
        else [(m, c, s, d) for (s, d) in LAYOUTS for m in MODELS for c in CONTEXTS]
    )
    started = time.time()
    cases = []
    for model, context, d_s, d_p in grid:
        t = time.time()
        cases.append(run_case(args.tool, model, context, d_s, d_p, base))
        print("%-40s %.1f s" % (sp_name(cases[-1]), time.time() - t), flush=True)
    where = corpus.SHOWN if corpus.CORPUS.exists() else "wikipedia"
    meta = {
        "case": base,
        "lengths": lengths_args()[1],
        "corpus": corpus_counts(),
        "machine": "%s, %d cores" % machine(),
        "date": datetime.date.today().isoformat(),
        "seconds": time.time() - started,
        "command": "infinipipe-plan %s %s --batch %d --seed 0 --hardware a800 --memory-gib 80 "
        "--steps %d --gpus-per-node 8 --model MODEL --context CONTEXT --stages D_P --sp D_S "
        "--method all --json" % (lengths_args()[0][0], where, base["batch"], base["steps"]),
    }
    data = {"meta": meta, "cases": cases}
    print("wrote", cluster_page.finish("cluster_sp_study", data, args.smoke))


if __name__ == "__main__":
    main()
