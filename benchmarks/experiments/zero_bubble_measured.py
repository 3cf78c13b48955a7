#!/usr/bin/env python3
"""Measured on this machine: does splitting EPP's backwards into B and W (zero bubble) make its
training steps faster?

    torchrun --nproc_per_node=2 benchmarks/experiments/zero_bubble_measured.py \
        --cost-model benchmarks/results/cost_cpu.json --output benchmarks/results/zero_bubble_measured.json

The tiny LLaMA on pipeline ranks (Gloo, CPU, one thread each), the same batches (Wikipedia
lengths, synthetic tokens) and memory budget as measured_comparison.py, three EPP trainers
stepped in turn on each batch (so a noisy machine's slow phases hit all alike): zero bubble off,
forced (`PlanConfig(zero_bubble="h1")`: every stage but the first runs its backwards as B and
W) and tried (`"try"`: the planner keeps it on a step where its simulator finds it faster). A
step's time is the whole training step's wall time; its bubble is each rank's wait over its
actions' time (the executor's own timings: `wait_s / actions_s`), averaged over ranks. The first
step of each is a warm-up, left out. Rank 0 writes the JSON; docs/design.md ("Zero bubble")
quotes it.
"""

from __future__ import annotations

import argparse
import datetime
import json
import statistics
import sys
import time
from pathlib import Path

import torch
import torch.distributed as dist

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/, for lib
from lib import training  # noqa: E402
from lib.markdown import machine  # noqa: E402
from lib.ranks import gathered, leave  # noqa: E402
from lib.results import MIB  # noqa: E402

import infinipipe
from infinipipe.models.llama import LlamaConfig

MODES = ("off", "h1", "try")


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--cost-model", required=True, help="calibrated cost JSON (infinipipe profile)")
    p.add_argument("--steps", type=int, default=7, help="the first is a warm-up")
    p.add_argument("--batch", type=int, default=16)
    p.add_argument("--context", type=int, default=8192)
    p.add_argument("--budget-mib", type=float, default=192, help="memory per stage")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--output", help="JSON to write (rank 0)")
    return p.parse_args()


def main() -> int:
    args = parse_args()
    torch.set_num_threads(1)
    config = LlamaConfig.tiny()
    trainers = {
        mode: training.trainer(
            config,
            infinipipe.PlanConfig(
                method="epp",
                cost_model=args.cost_model,
                memory_budget_bytes=int(args.budget_mib * MIB),
                zero_bubble=mode,
            ),
        )
        for mode in MODES
    }
    rows = {mode: [] for mode in MODES}
    started = time.monotonic()
    for i in range(args.steps):
        lengths, batch = training.sampled_batch(
            "wikipedia", args.batch, args.context, args.seed + i, config.vocab, args.seed + i
        )
        for mode, trainer in trainers.items():
            dist.barrier()
            begin = time.perf_counter()
            result = trainer.step(batch)
            seconds = time.perf_counter() - begin
            s = result.stats
            waits = gathered(s["wait_s"] / s["actions_s"] if s["actions_s"] > 0 else 0.0)
            rows[mode].append(
                dict(
                    step=i,
                    seconds=max(gathered(seconds)),
                    loss=result.loss,
                    bubble=statistics.mean(waits),
                    weight_s=sum(gathered(s["weight_s"])),
                    split=result.plan["setting"].endswith("zero-bubble=h1"),
                    predicted_s=result.plan["predicted_step_s"],
                    tokens=sum(lengths),
                )
            )
    if dist.get_rank() == 0:
        summary = {}
        for mode, steps in rows.items():
            timed = steps[1:]
            total = sum(r["seconds"] for r in timed)
            summary[mode] = dict(
                tokens_per_s=sum(r["tokens"] for r in timed) / total,
                total_s=total,
                bubble=statistics.mean(r["bubble"] for r in timed),
                split_steps=sum(r["split"] for r in timed),
                predicted_s=sum(r["predicted_s"] for r in timed),
            )
        for mode in MODES:
            summary[mode]["speedup_over_off"] = summary["off"]["total_s"] / summary[mode]["total_s"]
        model, cores = machine()
        out = dict(
            case=dict(
                {k: getattr(args, k) for k in ("batch", "context", "steps", "seed", "budget_mib")},
                cost_model=args.cost_model,
                ranks=dist.get_world_size(),
            ),
            rows=rows,
            summary=summary,
            seconds=time.monotonic() - started,
            machine=model,
            cores=cores,
            date=datetime.date.today().isoformat(),
        )
        text = json.dumps(out, indent=1)
        if args.output:
            Path(args.output).write_text(text + "\n")
        print(json.dumps(summary, indent=1))
    leave()
    return 0


if __name__ == "__main__":
    sys.exit(main())
