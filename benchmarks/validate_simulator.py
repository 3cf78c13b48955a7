"""Simulator validation: real pipelined steps against what the simulator predicted for them.

    torchrun --nproc_per_node=2 benchmarks/validate_simulator.py \
        --cost-model benchmarks/results/cost_cpu.json --output benchmarks/results/validation.json

Every rank runs the same steps (2 stages, Gloo, CPU, one thread per rank, the tiny LLaMA). Each
case is a length mix (a built-in distribution, batch size, context), a method and a memory
budget; the trainer plans it with the given (calibrated) cost model, and the plan carries the
simulator's predicted step time, per-stage busy time and activation peak. The case then runs
`--repeats` times with timing only, and once more with the memory meter on (its saved-tensor
hooks cost time, so that run is not timed). Measured step time: the slowest rank's executor
time (planning and the optimizer step are outside the simulated part). Rank 0 writes one JSON
with every case and prints the median errors.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

import torch
import torch.distributed as dist
from lib import results, training
from lib.ranks import gathered, leave
from lib.results import MIB
from lib.validation import errors

import infinipipe
from infinipipe.models.llama import LlamaConfig

# (distribution, batch, context, method, budget MiB or None for no memory pressure). Varied on
# purpose: short-only and long-dominated mixes, packed, split and hybrid chunks, every method,
# budgets that force checkpointing and several waves.
CASES = [
    ("wikipedia", 16, 2048, "epp", None),
    ("wikipedia", 32, 4096, "epp", None),
    ("wikipedia", 32, 8192, "epp", 192),
    ("wikipedia", 64, 4096, "epp", 128),
    ("wikipedia", 24, 8192, "seq1f1b", 192),
    ("wikipedia", 24, 8192, "batch", 192),
    ("wikipedia", 24, 8192, "chunkflow", 192),
    ("lognormal", 16, 8192, "epp", None),
    ("lognormal", 32, 4096, "epp", 96),
    ("extreme", 8, 8192, "epp", 160),
    ("uniform", 16, 2048, "epp", None),
    ("extreme", 12, 4096, "seq1f1b", None),
]
SMOKE_CASES = [("wikipedia", 6, 512, "epp", None), ("extreme", 4, 1024, "seq1f1b", 48)]


def plan_config(
    method: str, budget_mib: float | None, cost_model: str | None
) -> infinipipe.PlanConfig:
    return infinipipe.PlanConfig(
        method=method,
        memory_budget_bytes=None if budget_mib is None else int(budget_mib * MIB),
        k=4,
        chunk_tokens=1024,
        cost_model=cost_model,
        max_k=32,
    )


def run_case(case, index: int, args, config: LlamaConfig) -> dict:
    distribution, batch_size, context, method, budget_mib = case
    trainer = training.trainer(config, plan_config(method, budget_mib, args.cost_model))
    lengths, batch = training.sampled_batch(
        distribution, batch_size, context, args.seed + index, config.vocab, index
    )
    plan = trainer.plan(batch)
    summary = plan.summary()
    if index == 0:  # warm-up: the process's first step pays for allocator and kernel set-up
        trainer.step(batch, plan=plan)
    measured = []
    for _ in range(args.repeats):
        result = trainer.step(batch, plan=plan)
        measured.append(gathered(result.stats))
    memory = gathered(trainer.step(batch, plan=plan, measure_memory=True).stats)
    step_s = [max(s["total_s"] for s in ranks) for ranks in measured]
    # Per stage, the fastest repeat's compute (other work on the machine only adds to it).
    busy = [
        min(ranks[p]["forward_s"] + ranks[p]["backward_s"] for ranks in measured)
        for p in range(len(measured[0]))
    ]
    return dict(
        case=dict(
            distribution=distribution,
            batch=batch_size,
            context=context,
            method=method,
            budget_mib=budget_mib,
            seed=args.seed + index,
        ),
        lengths=list(lengths),
        setting=summary["setting"],
        chunks=summary["chunks"],
        chunk_kinds=summary["chunk_kinds"],
        waves=summary["waves"],
        recomputed_layer_chunks=summary["recomputed_layer_chunks"],
        predicted_step_s=summary["predicted_step_s"],
        measured_step_s=step_s,
        predicted_busy_s=summary["predicted_busy_s"],
        measured_busy_s=busy,
        predicted_activation_bytes=[s["predicted_activation_bytes"] for s in memory],
        measured_activation_bytes=[s["measured_activation_bytes"] for s in memory],
    )


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument(
        "--cost-model",
        help="cost JSON (python -m infinipipe profile); default: the analytic 'cpu' model",
    )
    p.add_argument("--repeats", type=int, default=2, help="timed runs per case")
    p.add_argument("--seed", type=int, default=100)
    p.add_argument("--output", type=Path, help="JSON with every case (rank 0 writes it)")
    p.add_argument("--smoke", action="store_true", help="two tiny cases, one repeat (CI)")
    args = p.parse_args()
    torch.set_num_threads(1)
    config = LlamaConfig.tiny()
    cases = SMOKE_CASES if args.smoke else CASES
    if args.smoke:
        args.repeats = 1
    rows = []
    for i, case in enumerate(cases):
        rows.append(run_case(case, i, args, config))
        e = errors(rows[-1])
        if dist.get_rank() == 0:
            print(
                f"{i:2d} {case}: step predicted {rows[-1]['predicted_step_s']:.3f} s, measured "
                f"{statistics.median(rows[-1]['measured_step_s']):.3f} s ({e['step']:+.1%}); "
                f"activation memory {', '.join(f'{m:+.1%}' for m in e['memory'])}; busy "
                f"{', '.join(f'{b:+.1%}' for b in e['busy'])}",
                flush=True,
            )
    if dist.get_rank() == 0:
        step_err = [abs(errors(r)["step"]) for r in rows]
        mem_err = [abs(m) for r in rows for m in errors(r)["memory"]]
        result = dict(
            cost_model=args.cost_model,
            cases=rows,
            median_abs_step_error=statistics.median(step_err),
            max_abs_step_error=max(step_err),
            median_abs_memory_error=statistics.median(mem_err),
            max_abs_memory_error=max(mem_err),
        )
        print(
            f"step time: median |error| {result['median_abs_step_error']:.1%}, max "
            f"{result['max_abs_step_error']:.1%} over {len(rows)} cases; activation memory: "
            f"median |error| {result['median_abs_memory_error']:.1%}, max "
            f"{result['max_abs_memory_error']:.1%} over {len(mem_err)} stage peaks"
        )
        if args.output:
            results.write(args.output, result)
    leave()


if __name__ == "__main__":
    sys.exit(main())
