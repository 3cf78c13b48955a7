#!/usr/bin/env python3
"""How does EPP with SP compare with FlexSP and with homogeneous Ulysses SP at 32 x A800, all on
the same cost model (simulated)?

FlexSP (Wang et al., ASPLOS 2025, arXiv 2412.01523) and homogeneous Ulysses SP run on the
planning core's cost model through benchmarks/lib/flexsp.py (no pipeline, ZeRO-3 over the 32
GPUs); EPP with SP runs through the plan tool as benchmarks/experiments/cluster_sp_study.py runs it
(d_s = 8 x d_p = 4, or d_s = 4 x d_p = 8 where 8 does not divide the heads). The same sampled
batches for all three (the plan tool's corpus sampler, reproduced in Python and checked against
the tool's token counts). Writes benchmarks/results/flexsp_study.json; benchmarks/
planning_report.py renders docs/cluster_study.md ("Against FlexSP (simulated)") from it.
`--smoke` runs one tiny case and renders the page into a temporary directory.

Usage: PYTHONPATH=python python3 benchmarks/experiments/flexsp_study.py [build/infinipipe-plan]
           [--smoke]
"""

import datetime
import json
import sys
import time
from pathlib import Path

# The benchmarks' shared code (benchmarks/lib) is one folder up.
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from lib import cluster_page, corpus, flexsp, plan_tool
from lib.markdown import machine
from lib.plan_tool import run_tool
from lib.sp_study_tables import sp_name

from infinipipe import _C

N_GPUS = 32
GPUS_PER_NODE = 8
BUDGET_GIB = 80
CASES = [  # (lengths, model, context, EPP's d_s, d_p)
    ("wikipedia", "llama-7b", 49152, 8, 4),
    ("wikipedia", "llama-7b", 98304, 8, 4),
    ("wikipedia", "llama-13b", 49152, 8, 4),
    ("wikipedia", "llama-13b", 98304, 8, 4),
    ("wikipedia", "llama-30b", 49152, 4, 8),
    ("wikipedia", "llama-30b", 98304, 4, 8),
    # The code lengths (benchmarks/tools/code_lengths.py, the plan tool's built-in "code"
    # distribution) at 96K: 3.5 times Wikipedia's tokens per batch, so these two alone.
    ("code", "llama-13b", 98304, 8, 4),
    ("code", "llama-30b", 98304, 4, 8),
]
BASE = dict(batch=512, steps=16, seed=0)
SMOKE = dict(batch=32, steps=1, seed=0)
SMOKE_CASES = [("wikipedia", "llama-7b", 49152, 8, 4), ("code", "llama-7b", 49152, 8, 4)]
MILP_TIME_LIMIT_S = 1.0  # per micro-batch; CBC starts from the best homogeneous assignment
BUCKETS = 16


def steps_of(context, base, distribution="wikipedia"):
    """The sampled batches, as the plan tool draws them (step i with seed + i)."""
    population = corpus.lengths() if distribution == "wikipedia" else None
    if distribution == "code":
        draw = lambda seed: list(  # noqa: E731
            _C.plan.sample_lengths("code", base["batch"], context, seed)
        )
        where = ["--distribution", "code"], "the built-in code distribution"
    elif population:
        draw = lambda seed: corpus.corpus_sample(population, base["batch"], context, seed)  # noqa: E731
        where = ["--lengths", str(corpus.CORPUS)], "the Wikipedia corpus's lengths"
    else:
        draw = lambda seed: list(  # noqa: E731
            _C.plan.sample_lengths("wikipedia", base["batch"], context, seed)
        )
        where = ["--distribution", "wikipedia"], "the built-in wikipedia sampler"
    return [draw(base["seed"] + i) for i in range(base["steps"])], where


def zero3_traffic_s(model, micro_batches):
    """ZeRO-3's collectives per step in full, as if none overlapped the compute (the step times
    charge only what compute does not hide, CostModel::layer_gather_time): per micro-batch an
    all-gather of the bf16 weights for the forward, one for the backward and a reduce-scatter of
    the gradients, each moving (N-1)/N of 2 Psi bytes into every node over its GPUs' NICs
    together (gpus_per_node x the cost model's inter-node link)."""
    hw = json.loads(_C.plan.hardware_json("a800"))
    per_pass = (N_GPUS - 1) / N_GPUS * 2 * flexsp.parameters(model)
    return 3 * micro_batches * per_pass / (GPUS_PER_NODE * hw["inter_node_bandwidth"])


def summarise(per_step, model):
    ok = [s for s in per_step if s is not None]
    if len(ok) != len(per_step):
        return {"feasible": False, "infeasible_steps": len(per_step) - len(ok)}
    mb = [s["micro_batches"] for s in ok]
    sizes = {}
    for s in ok:
        for shape in s["groups"]:
            for d in shape:
                sizes[d] = sizes.get(d, 0) + 1
    return {
        "feasible": True,
        "step_time_s": plan_tool.mean([s["step_time_s"] for s in ok]),
        "step_times_s": [s["step_time_s"] for s in ok],
        "micro_batches": plan_tool.mean(mb),
        "recomputed_micro_batches": sum(s["recomputed_micro_batches"] for s in ok),
        "peak_gib": max(s["peak_bytes"] for s in ok) / flexsp.GIB,
        "group_sizes": {str(d): sizes[d] for d in sorted(sizes)},
        "zero3_traffic_s": plan_tool.mean([zero3_traffic_s(model, m) for m in mb]),
    }


def run_case(tool, distribution, model, context, d_s, d_p, base, cache):
    steps, (where_args, _) = steps_of(context, base, distribution)
    budget = BUDGET_GIB * flexsp.GIB
    sizes = flexsp.group_sizes(model, N_GPUS)
    costs = {}

    def make_costs(recompute):
        if recompute not in costs:
            costs[recompute] = {
                d: flexsp.GroupCost(model, d, N_GPUS, budget, recompute, GPUS_PER_NODE)
                for d in sizes
            }
        return costs[recompute]

    def flex(lengths, always=False):
        return flexsp.flexsp_step(
            lengths, make_costs(always), N_GPUS, BUCKETS, MILP_TIME_LIMIT_S, make_costs(True)
        )

    def homogeneous(d):
        return lambda lengths, always=False: flexsp.ulysses_step(
            lengths, make_costs(always)[d], N_GPUS, make_costs(True)[d]
        )

    case = dict(
        distribution=distribution,
        model=model,
        context=context,
        sp=d_s,
        stages=d_p,
        sizes=sizes,
        methods={},
    )
    methods = [("FlexSP", flex)] + [
        ("Ulysses d=%d x %d" % (d, N_GPUS // d), homogeneous(d)) for d in (8, 4) if d in sizes
    ]
    for name, solve in methods:
        per_step = []
        for lengths in steps:
            key = (model, name, tuple(lengths))  # 48K and 96K share most batches
            if key not in cache:
                cache[key] = solve(lengths)
                # Or every micro-batch recomputed: more tokens per micro-batch, fewer of them.
                everywhere = solve(lengths, True)
                if everywhere and (
                    cache[key] is None or everywhere["step_time_s"] < cache[key]["step_time_s"]
                ):
                    cache[key] = everywhere
            per_step.append(cache[key])
        case["methods"][name] = summarise(per_step, model)
    # EPP with SP through the plan tool, as cluster_sp_study.py runs it.
    command = [tool] + where_args
    command += ["--batch", str(base["batch"]), "--seed", str(base["seed"]), "--hardware", "a800"]
    command += ["--memory-gib", str(BUDGET_GIB), "--steps", str(base["steps"])]
    command += ["--gpus-per-node", str(GPUS_PER_NODE), "--model", model]
    command += ["--context", str(context), "--stages", str(d_p), "--sp", str(d_s)]
    command += ["--method", "epp", "--json"]
    rows = sorted((r for r in run_tool(command) if r["method"] == "epp"), key=lambda r: r["step"])
    for r, lengths in zip(rows, steps):
        if r["tokens"] != sum(lengths):
            sys.exit("flexsp_study: step %d's batch differs from the plan tool's" % r["step"])
    case["command"] = " ".join(["infinipipe-plan"] + command[1:])
    if len(rows) == base["steps"] and all(r["feasible"] for r in rows):
        case["methods"]["EPP"] = {
            "feasible": True,
            "step_time_s": plan_tool.mean([r["step_time_s"] for r in rows]),
            "step_times_s": [r["step_time_s"] for r in rows],
            "bubble": plan_tool.mean([r["bubble_fraction"] for r in rows]),
            "recompute_s": plan_tool.mean([r["recompute_s"] for r in rows]),
            "alltoall_s": plan_tool.mean([max(r["alltoall_s_per_stage"]) for r in rows]),
            "peak_gib": max(max(r["peak_memory_gib_per_rank"]) for r in rows),
            "busiest_stage_s": plan_tool.mean([max(r["busy_s"]) for r in rows]),
            "mean_stage_s": plan_tool.mean([sum(r["busy_s"]) / len(r["busy_s"]) for r in rows]),
        }
    else:
        bad = [r for r in rows if not r["feasible"]]
        case["methods"]["EPP"] = {"feasible": False, "infeasible_steps": len(bad)}
    # The bound for any method on this cluster in this model: every sequence's compute at d = 1
    # (no all-to-all), packed per GPU, spread perfectly over the N GPUs.
    c1 = make_costs(False)[1]
    case["ideal_s"] = plan_tool.mean(
        [(sum(c1.work(n) for n in lengths) + c1.fixed_s * N_GPUS) / N_GPUS for lengths in steps]
    )
    return case


def main():
    p = plan_tool.parser(__doc__.splitlines()[0], "one tiny case, rendered to a temporary dir")
    args = plan_tool.parse(p, "flexsp_study")
    base = SMOKE if args.smoke else BASE
    grid = SMOKE_CASES if args.smoke else CASES
    started = time.time()
    cache, cases = {}, []
    for distribution, model, context, d_s, d_p in grid:
        t = time.time()
        cases.append(run_case(args.tool, distribution, model, context, d_s, d_p, base, cache))
        ms = cases[-1]["methods"]
        times = "  ".join(
            "%s %s" % (n, "%.2f s" % m["step_time_s"] if m["feasible"] else "infeasible")
            for n, m in ms.items()
        )
        print("%-32s %s  %.1f s" % (sp_name(cases[-1]), times, time.time() - t), flush=True)
    _, (_, where) = steps_of(grid[0][2], dict(base, steps=0))
    meta = {
        "case": dict(base, n_gpus=N_GPUS, gpus_per_node=GPUS_PER_NODE, memory_gib=BUDGET_GIB),
        "milp_time_limit_s": MILP_TIME_LIMIT_S,
        "buckets": BUCKETS,
        "lengths": where,
        "machine": "%s, %d cores" % machine(),
        "date": datetime.date.today().isoformat(),
        "seconds": time.time() - started,
        "epp_command": cases[0]["command"]
        .replace(str(corpus.CORPUS), corpus.SHOWN)
        .replace("--model %s" % grid[0][1], "--model MODEL")
        .replace("--context %d" % grid[0][2], "--context CONTEXT")
        .replace("--stages %d --sp %d" % (grid[0][4], grid[0][3]), "--stages D_P --sp D_S"),
    }
    data = {"meta": meta, "cases": cases}
    print("wrote", cluster_page.finish("flexsp_study", data, args.smoke))


if __name__ == "__main__":
    main()
