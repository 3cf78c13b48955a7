"""Simulator validation: real pipelined steps against what the simulator predicted for them.

    torchrun --nproc_per_node=2 benchmarks/experiments/validate_simulator.py \
        --cost-model benchmarks/results/cost_cpu.json --output benchmarks/results/validation.json

Every rank runs the same steps (2 stages, Gloo, CPU, one thread per rank, the tiny LLaMA). Each
case is a step (a length mix drawn from a built-in distribution, or a heavy step from
lib/validation.py, heavy_lengths: 16 sequences, 20K-56K tokens, cut at 8192, the four steps hold
40% of their tokens in cut sequences) and a memory budget, run by one method; every method runs
the shared steps, on the same lengths and tokens, and EPP also runs steps of its own plan shapes
(several waves under a tight budget). The trainer plans each case with the given (calibrated) cost
model, and the plan carries the simulator's predicted step time, per-stage busy time and
activation peak. Every case runs `--repeats` times with timing only, in rounds: one timed step of
every case, the steps in a shuffled order and a step's methods one after the other, so that the
machine's load (other work shares its cores) falls on a step's methods alike; then once more each
with the memory meter on (its saved-tensor hooks cost time, so that run is not timed). Measured
step time: the slowest rank's executor time (planning and the optimizer step are outside the
simulated part), the median of the rounds; busy: per stage, the executor's forward and backward
wall time and the rank's thread CPU time in those actions, the fastest round. Rank 0 writes one
JSON with every case and prints the median errors: overall, per method, per method over the
shared steps, and EPP's minus each baseline's on the same steps. --compare-cost OTHER.json also
predicts every measured plan with another cost model (an earlier fit) and gives its errors per
method beside."""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

import torch
import torch.distributed as dist

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/, for lib
from lib import results, training  # noqa: E402
from lib.ranks import gathered, leave  # noqa: E402
from lib.validation import (  # noqa: E402
    errors,
    paired,
    per_method,
    predict_again,
    shared_rows,
    step_with_action_times,
)
from lib.validation_cases import HEAVY_SEEDS, all_cases, case_fields, prepare, round_order  # noqa: E402

from infinipipe import _C
from infinipipe.models.llama import LlamaConfig


def timed_step(c: dict) -> None:
    """One timed step; besides the executor's wall-clock stats, this rank's thread CPU time in
    its forward and backward actions (lib/validation.py, step_with_action_times)."""
    stats, actions = step_with_action_times(c["trainer"], c["batch"], c["plan"])
    for kind, key in (("F", "forward_cpu_s"), ("B", "backward_cpu_s")):
        stats[key] = sum(seconds for a, seconds in actions if a[0] == kind)
    stats["compute_cpu_s"] = stats["forward_cpu_s"] + stats["backward_cpu_s"]
    c["measured"].append(gathered(stats))


def predicted_parts(c: dict) -> dict:
    """Per stage, the simulator's forward (F actions), backward (B actions, recompute included)
    and recompute seconds of the case's plan, from its timed actions (Plan.predicted_actions)."""
    plan = c["plan"]
    stages = len(plan.summary()["predicted_busy_s"])
    parts = {k: [0.0] * stages for k in ("forward", "backward", "recompute")}
    for stage, _, category, seconds in plan.predicted_actions(c["trainer"].cost):
        if category in ("recompute", "backward"):  # a B action holds its recompute
            parts["backward"][stage] += seconds
        if category in ("forward", "recompute"):
            parts[category][stage] += seconds
    return {f"predicted_{k}_s": v for k, v in parts.items()}


def result_row(c: dict) -> dict:
    summary = c["plan"].summary()
    measured = c["measured"]
    memory = gathered(c["trainer"].step(c["batch"], plan=c["plan"], measure_memory=True).stats)
    step_s = [max(s["total_s"] for s in ranks) for ranks in measured]
    # Per stage, the fastest repeat's compute (other work on the machine only adds to it).
    busy = [
        min(ranks[p]["forward_s"] + ranks[p]["backward_s"] for ranks in measured)
        for p in range(len(measured[0]))
    ]

    def fastest(key):
        return [min(ranks[p][key] for ranks in measured) for p in range(len(busy))]

    busy_cpu = fastest("compute_cpu_s")
    return dict(
        case=case_fields(c["case"]),
        lengths=list(c["lengths"]),
        setting=summary["setting"],
        # the plan's structure, to predict the same plan again with another cost model
        # (lib/validation.py, predict_again)
        plan_hash=c["plan"].hash(),
        plan_chunks=[list(map(list, chunk)) for chunk in c["plan"].chunks],
        plan_waves=[list(w) for w in c["plan"].waves],
        plan_recompute=[list(r) for r in c["plan"].recompute],
        chunks=summary["chunks"],
        chunk_kinds=summary["chunk_kinds"],
        waves=summary["waves"],
        recomputed_layer_chunks=summary["recomputed_layer_chunks"],
        predicted_step_s=summary["predicted_step_s"],
        measured_step_s=step_s,
        predicted_busy_s=summary["predicted_busy_s"],
        measured_busy_s=busy,
        # per stage, the fastest repeat's thread CPU time in forward and backward actions
        measured_busy_cpu_s=busy_cpu,
        # the same split into the F and the B actions (recompute in B), beside the simulator's
        measured_forward_cpu_s=fastest("forward_cpu_s"),
        measured_backward_cpu_s=fastest("backward_cpu_s"),
        **predicted_parts(c),
        # per repeat and rank: its executor's wall time waiting on peers, until its last action
        # and sends were done (StepStats::actions_s), and in its forward and backward actions
        measured_wait_s=[[s["wait_s"] for s in ranks] for ranks in measured],
        measured_actions_s=[[s["actions_s"] for s in ranks] for ranks in measured],
        measured_rank_busy_s=[
            [s["forward_s"] + s["backward_s"] for s in ranks] for ranks in measured
        ],
        predicted_activation_bytes=[s["predicted_activation_bytes"] for s in memory],
        measured_activation_bytes=[s["measured_activation_bytes"] for s in memory],
    )


def compared(rows: list, cost_model: str | None, compare_cost: str | None, label: str) -> dict:
    """With --compare-cost: every row's plan predicted with that cost model too, and the errors
    per method under it."""
    if not compare_cost or not cost_model:
        return {}
    reference = _C.plan.CostModel.load(cost_model)
    other = _C.plan.CostModel.load(compare_cost)
    for r in rows:
        r["predicted_step_s_compare"], r["predicted_busy_s_compare"] = predict_again(
            r, other, reference
        )
    return dict(
        compare_cost=compare_cost,
        compare_label=label,
        per_method_compare=per_method(rows, "predicted_step_s_compare", "predicted_busy_s_compare"),
    )


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument(
        "--cost-model",
        help="cost JSON (python -m infinipipe profile); default: the analytic 'cpu' model",
    )
    training.add_trainer_arguments(p)
    p.add_argument("--repeats", type=int, default=3, help="timed runs per case")
    p.add_argument("--seed", type=int, default=100)
    p.add_argument("--output", type=Path, help="JSON with every case (rank 0 writes it)")
    p.add_argument("--smoke", action="store_true", help="tiny steps, one repeat (CI)")
    p.add_argument(
        "--compare-cost",
        help="another cost JSON (an earlier fit): every measured plan is also predicted with it "
        "(predicted_*_compare) and its errors per method are given beside",
    )
    p.add_argument(
        "--compare-label",
        default="the other cost model",
        help="what --compare-cost is, for the report (e.g. 'fit without a3')",
    )
    args = p.parse_args()
    torch.set_num_threads(1)
    config = LlamaConfig.tiny()
    cases = all_cases(args)
    if args.smoke:
        args.repeats = 1
    prepared = [prepare(case, args, config) for case in cases]
    # warm-up: the process's first step pays for allocator and kernel set-up
    prepared[0]["trainer"].step(prepared[0]["batch"], plan=prepared[0]["plan"])
    for r in range(args.repeats):
        for c in round_order(prepared, r, args.seed):
            timed_step(c)
        if dist.get_rank() == 0:
            print(f"round {r + 1} of {args.repeats} done", flush=True)
    rows = []
    for i, c in enumerate(prepared):
        rows.append(result_row(c))
        e = errors(rows[-1])
        if dist.get_rank() == 0:
            print(
                f"{i:2d} {c['case']}: step predicted {rows[-1]['predicted_step_s']:.3f} s, "
                f"measured {statistics.median(rows[-1]['measured_step_s']):.3f} s "
                f"({e['step']:+.1%}); activation memory "
                f"{', '.join(f'{m:+.1%}' for m in e['memory'])}; busy "
                f"{', '.join(f'{b:+.1%}' for b in e['busy'])}; busy (CPU time) "
                f"{', '.join(f'{b:+.1%}' for b in e['busy_cpu'])} (forward "
                f"{', '.join(f'{b:+.1%}' for b in e['forward_cpu'])}, backward "
                f"{', '.join(f'{b:+.1%}' for b in e['backward_cpu'])})",
                flush=True,
            )
    if dist.get_rank() == 0:
        step_err = [abs(errors(r)["step"]) for r in rows]
        mem_err = [abs(m) for r in rows for m in errors(r)["memory"]]
        result = dict(
            cost_model=args.cost_model,
            stage=args.stage,
            pause_gc=args.pause_gc,
            cases=rows,
            median_abs_step_error=statistics.median(step_err),
            max_abs_step_error=max(step_err),
            median_abs_memory_error=statistics.median(mem_err),
            max_abs_memory_error=max(mem_err),
            per_method=per_method(rows),
            # the same, over the steps every method ran: issue 12's comparison of the methods
            per_method_shared=per_method(shared_rows(rows)),
            # per baseline, EPP's step error minus its own on the same steps
            paired=paired(rows),
            **compared(rows, args.cost_model, args.compare_cost, args.compare_label),
            heavy_seeds=[] if args.smoke else HEAVY_SEEDS,
            rounds="interleaved: every case's timed step in turn, --repeats rounds; each round "
            "the steps in a shuffled order, a step's methods one after the other, shuffled",
        )
        print(
            f"step time: median |error| {result['median_abs_step_error']:.1%}, max "
            f"{result['max_abs_step_error']:.1%} over {len(rows)} cases; activation memory: "
            f"median |error| {result['median_abs_memory_error']:.1%}, max "
            f"{result['max_abs_memory_error']:.1%} over {len(mem_err)} stage peaks"
        )
        for m, e in result["per_method"].items():
            print(
                f"{m}: median step error {e['median_step_error']:+.1%}, median |error| "
                f"{e['median_abs_step_error']:.1%} over {e['cases']} cases; busy CPU time "
                f"{e['median_busy_cpu_error']:+.1%} (forward {e['median_forward_cpu_error']:+.1%}, "
                f"backward {e['median_backward_cpu_error']:+.1%})"
            )
        for m, e in result["per_method_shared"].items():
            print(
                f"{m}, on the steps every method ran: median step error "
                f"{e['median_step_error']:+.1%} over {e['cases']} cases; busy CPU time "
                f"{e['median_busy_cpu_error']:+.1%}"
            )
        for m, e in result["paired"].items():
            print(
                f"EPP's step error minus {m}'s on the same steps: median {e['median_step_gap']:+.1%}"
                f" per step, {e['median_round_gap']:+.1%} per step and round"
            )
        if args.output:
            results.write(args.output, result)
    leave()


if __name__ == "__main__":
    sys.exit(main())
