"""Planning ahead, measured: how much of the planner's time `trainer.prefetching` hides.

    torchrun --nproc_per_node=2 benchmarks/experiments/planning_ahead.py --out benchmarks/results/planning_ahead.json

Two pipeline ranks (Gloo, CPU, one thread each), a LLaMA of `--hidden`/`--layers` (default the
tiny one), EPP, AdamW. Every step's batch (`--batch` Wikipedia lengths truncated to
`--context`, synthetic tokens, seeded by the step) is trained three times in one round, in this
order, so the machine's drift hits the three alike:

1. `prefetch(batch)` is called, then the batch is stepped with a plan made before the round
   (`precomputed`: no planning in the step at all); the background planner works meanwhile;
2. the batch is stepped again, taking the plan planned ahead during step 1 (`ahead`: what a
   loop over `trainer.prefetching(batches)` gets, one step of overlap);
3. the batch is stepped with the plan made inside the step (`inline`: `trainer.step(batch)`).

Each step's wall time is taken around `trainer.step` on rank 0. The output gives per mode the
median step time, the median planning time, the share of planning hidden, and the ratios to
`precomputed`.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

import torch
import torch.distributed as dist

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/, for lib
from lib import results, training  # noqa: E402
from lib.ranks import leave  # noqa: E402

import infinipipe
from infinipipe.models.llama import LlamaConfig

MODES = ("precomputed", "ahead", "inline")


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--batch", type=int, default=16, help="sequences per step")
    p.add_argument("--context", type=int, default=1024, help="longest sequence")
    p.add_argument("--hidden", type=int, default=None, help="default: the tiny LLaMA's")
    p.add_argument("--layers", type=int, default=None, help="default: the tiny LLaMA's")
    p.add_argument("--memory-gib", type=float, default=None, help="budget per stage")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", default=None, help="results JSON (rank 0 writes it)")
    return p.parse_args()


def model_config(args) -> LlamaConfig:
    config = LlamaConfig.tiny()
    shape = {"hidden": args.hidden, "layers": args.layers}
    return config.replace(**{k: v for k, v in shape.items() if v is not None})


def timed_step(trainer, batch, plan=None):
    started = time.perf_counter()
    result = trainer.step(batch, plan=plan)
    return time.perf_counter() - started, result


def summary(rows: list[dict]) -> dict:
    base = statistics.median(r["step_s"] for r in rows if r["mode"] == "precomputed")
    out = {}
    for mode in MODES:
        mine = [r for r in rows if r["mode"] == mode]
        median = statistics.median(r["step_s"] for r in mine)
        planning = sum(r["planning_s"] for r in mine)
        hidden = sum(r["planning_hidden_s"] for r in mine)
        out[mode] = dict(
            median_step_s=median,
            ratio_to_precomputed=median / base,
            median_planning_s=statistics.median(r["planning_s"] for r in mine),
            hidden_share=hidden / planning if planning > 0 else 0.0,
        )
    return out


def main() -> None:
    args = parse_args()
    config = model_config(args)
    trainer = infinipipe.Trainer(
        config,
        lambda params: torch.optim.AdamW(params, lr=1e-3),
        plan=infinipipe.PlanConfig(memory_budget_gib=args.memory_gib),
        runtime=infinipipe.RuntimeConfig(seed=args.seed),
    )
    rows = []
    started = datetime.now(UTC)
    for step in range(args.steps):
        seed = args.seed + step
        _, batch = training.sampled_batch(
            "wikipedia", args.batch, args.context, seed, config.vocab, seed
        )
        plan = trainer.plan(batch)
        trainer.prefetch(batch)
        for mode, given in (("precomputed", plan), ("ahead", None), ("inline", None)):
            step_s, result = timed_step(trainer, batch, given)
            rows.append(
                dict(
                    step=step,
                    mode=mode,
                    step_s=step_s,
                    planning_s=result.planning_s,
                    planning_hidden_s=result.planning_hidden_s,
                    predicted_s=result.predicted_s,
                    tokens=result.tokens,
                )
            )
    if dist.get_rank() == 0:
        out = summary(rows)
        for mode, s in out.items():
            print(
                f"{mode:12s} median step {s['median_step_s']:.3f} s "
                f"(x{s['ratio_to_precomputed']:.3f} of precomputed), median planning "
                f"{s['median_planning_s'] * 1e3:.1f} ms, {s['hidden_share']:.0%} of it hidden"
            )
        if args.out:
            results.write(
                Path(args.out),
                dict(
                    settings=dict(vars(args), model=str(config)),
                    started=started.isoformat(timespec="seconds"),
                    summary=out,
                    rows=rows,
                ),
            )
    leave()


if __name__ == "__main__":
    main()
