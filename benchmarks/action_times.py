"""Each forward and backward of each method's plan on a heavy step, timed on its rank, against the
cost model, with the profiler's grid timed in the same processes between the methods' steps (the
evidence for docs/benchmarks.md, "Simulator validation": where the validation's difference
between methods comes from).

    .venv/bin/torchrun --nproc_per_node=2 benchmarks/action_times.py \
        --cost-model benchmarks/results/cost_cpu_xeon.json --output F
    .venv/bin/python benchmarks/action_times.py --report F     # the tables again

Two ranks, the tiny LLaMA, the validation's heavy step (seed 0) and its plan settings. Methods:
EPP, ChunkFlow and Seq1F1B at the validation's 192 MiB, and EPP and ChunkFlow without a budget
(nothing recomputed). ChunkFlow's chunks do not depend on the budget, so its two plans run the same
chunks, recorded and with every layer checkpointed. Each round runs every method's step once
(shuffled), each rank recording the thread CPU time of its F and B actions, then the profiler's
grid on every rank at once. Per action the fastest round counts; per grid point the median.

Printed: forward and backward together, predicted over measured - 1, per method and per how many
of a chunk's layers are checkpointed, by the given cost model and by a fit of the same-time grid
(profile.fit); and on ChunkFlow's chunks, what checkpointing a layer costs net in the
executor (the two plans' difference over the recorded forward), by context, beside the profiler's
(T_ng + T_rec - T_fwd - T_bwd) / T_fwd at 1024 tokens.
"""

from __future__ import annotations

import argparse
import collections
import random
import statistics
import sys
from pathlib import Path

import numpy as np
import torch
import torch.distributed as dist

sys.path.insert(0, str(Path(__file__).resolve().parent))
from lib import results, training, validation_cases  # noqa: E402
from lib.ranks import gathered, leave  # noqa: E402
from lib.validation import heavy_lengths, step_with_action_times  # noqa: E402

from infinipipe import profile  # noqa: E402
from infinipipe.data import synthetic_batch  # noqa: E402
from infinipipe.models.llama import LlamaConfig  # noqa: E402

METHODS = [("epp", 192), ("epp", None), ("chunkflow", None), ("chunkflow", 192), ("seq1f1b", 192)]
CONTEXTS = (0, 1024, 4096, 8192)
GRID = [(s, c) for s in (256, 512, 1024, 2048, 4096) for c in CONTEXTS]
# --smoke (tests/run_all.sh): every part once, on a small step and grid.
SMOKE_GRID = [(s, c) for s in (256, 1024) for c in (0, 1024)]
TIMES = ("forward_s", "backward_s", "checkpointed_forward_s", "recomputed_s")


def name(method) -> str:
    return f"{method[0]}@{method[1] or 'none'}"


def action_times(trainer, batch, plan) -> dict:
    """This rank's thread CPU seconds of each F and B action of one step."""
    _, actions = step_with_action_times(trainer, batch, plan)
    return {a: seconds for a, seconds in actions if a[0] in "FB"}


def measure(cost_model: str, rounds: int, smoke: bool) -> dict:
    config = LlamaConfig.tiny()
    module = profile.profiled_module(config, "python")
    lengths = heavy_lengths(0, 4 if smoke else 16)
    points = SMOKE_GRID if smoke else GRID
    batch = synthetic_batch(lengths, config.vocab, torch.Generator().manual_seed(0))
    runs = {}
    for method in METHODS:
        trainer = training.trainer(
            config, validation_cases.plan_config(method[0], method[1], cost_model)
        )
        plan = trainer.plan(batch)
        trainer.step(batch, plan=plan)  # warm-up
        runs[method] = (trainer, plan, [])
    grid = []
    order = list(METHODS)
    for r in range(rounds):
        random.Random(r).shuffle(order)
        for method in order:
            trainer, plan, times = runs[method]
            times.append(action_times(trainer, batch, plan))
        grid.append(profile.time_runs(module, config, points, 2, cpu_time=True, progress=False))
        if dist.get_rank() == 0:
            print(f"round {r + 1} of {rounds}", flush=True)
    out = dict(cost_model=cost_model, lengths=lengths, rounds=rounds, grid=gathered(grid))
    out["methods"] = {}
    for method, (trainer, plan, times) in runs.items():
        fastest = {a: min(t[a] for t in times) for a in times[0]}
        out["methods"][name(method)] = dict(
            chunks=[[list(s) for s in c] for c in plan.chunks],
            recompute=[list(r) for r in plan.recompute],
            predicted=[list(p) for p in plan.predicted_actions(trainer.cost)],
            measured=gathered(fastest),
        )
    return out


def merged(rounds: list) -> dict:
    """The rounds' profiler runs as one (each point's repeats put together), as profile.fit
    takes them."""
    out = {}
    for part, key in (
        ("layer", ("tokens", "context")),
        ("embedding", ("tokens",)),
        ("head", ("tokens",)),
    ):
        points = {}
        for runs in rounds:
            for p in runs[part]:
                point = points.setdefault(tuple(p[k] for k in key), {k: p[k] for k in key})
                for name, values in p.items():
                    if name not in key:
                        point.setdefault(name, []).extend(values)
        out[part] = list(points.values())
    return out


def grid_medians(rounds: list) -> dict:
    """(tokens, context) -> the median of each of TIMES over the rounds' repeats."""
    return {
        (p["tokens"], p["context"]): [statistics.median(p[t]) for t in TIMES]
        for p in merged(rounds)["layer"]
    }


def same_time_fit(rounds: list):
    return profile.fit(merged(rounds), holdout=0)


def rows(data: dict) -> list:
    """Per method, stage and chunk: (method, checkpointed layers, context, committed prediction,
    same-time fit's prediction, measured), forward and backward together."""
    out = []
    layers = 4
    for stage, rounds in enumerate(data["grid"]):
        fit = same_time_fit(rounds)
        head = stage == len(data["grid"]) - 1
        extra = fit.head_s_per_token * (1 + fit.backward_ratio) if head else 0.0
        for method, m in data["methods"].items():
            committed = collections.defaultdict(float)
            for p, action, _, seconds in m["predicted"]:
                if p == stage:
                    committed[action.removeprefix("recompute ")] += seconds
            for i, chunk in enumerate(m["chunks"]):
                k = m["recompute"][stage][i] if m["recompute"] else 0
                forward = sum(fit.forward_s(e - s, s) - fit.b for _, s, e in chunk) + fit.b
                backward = sum(fit.backward_s(e - s, s) - fit.backward_b for _, s, e in chunk)
                backward += fit.backward_b
                tokens = sum(e - s for _, s, e in chunk)
                fitted = (
                    layers * (forward + backward) + k * fit.checkpointed_forward_ratio * forward
                )
                measured = m["measured"][stage][f"F{i}"] + m["measured"][stage][f"B{i}"]
                predicted = committed[f"F{i}"] + committed[f"B{i}"]
                context = max(s for _, s, _ in chunk)
                out.append((method, k, context, predicted, fitted + extra * tokens, measured))
    return out


def report(data: dict) -> None:
    table = collections.defaultdict(lambda: [0.0, 0.0, 0.0, 0])
    for method, k, _, predicted, fitted, measured in rows(data):
        kind = "none" if k == 0 else ("all" if k == 4 else "some")
        for key in ((method, "every chunk"), (method, f"{kind} checkpointed")):
            t = table[key]
            t[0], t[1], t[2], t[3] = t[0] + predicted, t[1] + fitted, t[2] + measured, t[3] + 1
    print("F + B, predicted over measured - 1: given cost model | same-time fit")
    for (method, group), (p, f, m, n) in sorted(table.items()):
        print(f"  {method:15} {group:18} {p / m - 1:+.3f} | {f / m - 1:+.3f}  ({n} chunk-stages)")
    recorded, checkpointed = data["methods"]["chunkflow@none"], data["methods"]["chunkflow@192"]
    print("Net cost of checkpointing a layer, over its recorded forward (ChunkFlow's chunks):")
    for stage, rounds in enumerate(data["grid"]):
        by_context = collections.defaultdict(lambda: [0.0, 0.0])
        for i, chunk in enumerate(checkpointed["chunks"]):
            if checkpointed["recompute"][stage][i] != 4 or len(chunk) != 1:
                continue
            rec_f, rec_b, ck_f, ck_b = (
                m["measured"][stage][f"{a}{i}"] for m in (recorded, checkpointed) for a in "FB"
            )
            c = min(x for x in CONTEXTS if chunk[0][1] <= x)
            by_context[c][0] += ck_f + ck_b - rec_f - rec_b
            by_context[c][1] += rec_f
        medians = grid_medians(rounds)

        def net(c, medians=medians):
            fwd, bwd, ng, rec = medians[(1024, c)]
            return (ng + rec - fwd - bwd) / fwd

        executor = ", ".join(f"{c}: {d / f:.2f}" for c, (d, f) in sorted(by_context.items()))
        profiler = ", ".join(f"{c}: {net(c):.2f}" for c in CONTEXTS if (1024, c) in medians)
        print(
            f"  stage {stage}: executor by context {executor}; profiler at 1024 tokens {profiler}"
        )


def slice_overhead(data: dict) -> None:
    """What a slice beyond a chunk's first costs, which the grid (one slice per chunk) leaves in
    b: a least-squares fit over every method's chunks and stages of measured F + B = factor x
    predicted + per extra slice (forward per layer run, the recomputed ones included; backward
    per layer), and each method's error with and without that term."""
    layers = 4
    records = []  # (method, extra slices, recomputed layers, predicted, measured)
    for method, m in data["methods"].items():
        committed = collections.defaultdict(float)
        for stage, action, _, seconds in m["predicted"]:
            committed[(stage, action.removeprefix("recompute "))] += seconds
        for stage in range(len(m["measured"])):
            for i, chunk in enumerate(m["chunks"]):
                k = m["recompute"][stage][i] if m["recompute"] else 0
                predicted = committed[(stage, f"F{i}")] + committed[(stage, f"B{i}")]
                measured = m["measured"][stage][f"F{i}"] + m["measured"][stage][f"B{i}"]
                records.append((method, len(chunk) - 1, k, predicted, measured))
    x = np.array([[p, n * (layers + k), n * layers] for _, n, k, p, _ in records])
    y = np.array([r[-1] for r in records])
    factor, forward, backward = np.linalg.lstsq(x, y, rcond=None)[0]
    print(
        f"A slice beyond a chunk's first: forward {forward * 1e3:.3f} ms, backward "
        f"{backward * 1e3:.3f} ms per layer (measured = {factor:.3f} x predicted + these);"
        " F + B predicted over measured - 1, without and with them:"
    )
    table = collections.defaultdict(lambda: [0.0, 0.0, 0.0])
    for method, n, k, p, m in records:
        t = table[method]
        t[0], t[1], t[2] = (
            t[0] + p,
            t[1] + p + n * (forward * (layers + k) + backward * layers),
            t[2] + m,
        )
    for method, (p, q, m) in table.items():
        print(f"  {method:15} {p / m - 1:+.3f} -> {q / m - 1:+.3f}")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--cost-model")
    p.add_argument("--rounds", type=int, default=4)
    p.add_argument("--output")
    p.add_argument("--report", help="print the tables of a saved run (no torchrun)")
    p.add_argument("--smoke", action="store_true", help="one round of a small step and grid")
    args = p.parse_args()
    if args.report:
        data = results.load(args.report)
        report(data)
        slice_overhead(data)
        return
    if not (args.cost_model and args.output):
        p.error("give --cost-model and --output (or --report FILE)")
    torch.set_num_threads(1)
    torch.set_flush_denormal(True)
    data = measure(args.cost_model, 1 if args.smoke else args.rounds, args.smoke)
    if dist.get_rank() == 0:
        results.write(args.output, data)
        report(data)
        slice_overhead(data)
    leave()


if __name__ == "__main__":
    main()
