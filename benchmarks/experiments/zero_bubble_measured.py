#!/usr/bin/env python3
"""Measured on this machine: does splitting EPP's backwards into B and W (zero bubble) make its
training steps faster?

    torchrun --nproc_per_node=2 benchmarks/experiments/zero_bubble_measured.py \
        --cost-model benchmarks/results/cost_cpu.json --output benchmarks/results/zero_bubble_measured.json

The tiny LLaMA on pipeline ranks (Gloo, CPU, one thread each), the same batches (Wikipedia
lengths, synthetic tokens) and memory budget as measured_comparison.py, three EPP trainers
stepped in turn on each batch (so a noisy machine's slow phases hit all alike): zero bubble off,
forced (`PlanConfig(zero_bubble="h1")`: every stage but the first runs its backwards as B and
W; `"h2"`: the same on ZB-H2's longer warm-up) and tried (`"try"`: the planner keeps ZB-H1 or
ZB-H2 on a step where its simulator finds it faster);
beside them, in the same turns, torch.distributed.pipelining's zero-bubble schedules (ZBV,
interleaved ZB) and its 1F1B on the packed peer (benchmarks/lib/torch_packed.py), each with rows
of TORCH_ROW_LENGTH tokens and without checkpointing where that fits the budget (torch_peer).
Each step starts with another runner. A step's time is the whole training step's wall time;
EPP's bubble is each rank's wait over its actions' time (the executor's own timings: `wait_s /
actions_s`), averaged over ranks (the torch peers report no such timings). The first step of
each is a warm-up, left out. Rank 0 writes the JSON; benchmarks/report.py renders it into
docs/benchmarks.md ("Zero bubble, measured").
"""

from __future__ import annotations

import argparse
import datetime
import gc
import json
import statistics
import sys
import time
from functools import partial
from pathlib import Path

import torch
import torch.distributed as dist

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/, for lib
from lib import training  # noqa: E402
from lib.markdown import machine  # noqa: E402
from lib.ranks import gathered, leave  # noqa: E402
from lib.results import MIB, model_state_bytes  # noqa: E402
from lib.torch_packed import TorchPacked  # noqa: E402

import infinipipe
from infinipipe.models.llama import LlamaConfig

MODES = ("off", "h1", "h2", "try")
# The packed torch peers' rows: 1024 tokens, the fastest row length of every schedule that fit at
# 192 MiB on 2 ranks in measured_comparison.py's search (benchmarks/results/measured.json,
# "packed_config"). Checkpointing is chosen here (torch_peer), since the stages' memory depends
# on the ranks.
TORCH_ROW_LENGTH = 1024
TORCH_SCHEDULES = ("1f1b", "zbv", "interleaved_zb")


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--cost-model", required=True, help="calibrated cost JSON (infinipipe profile)")
    p.add_argument("--steps", type=int, default=7, help="the first is a warm-up")
    p.add_argument("--batch", type=int, default=16)
    p.add_argument("--context", type=int, default=8192)
    p.add_argument("--budget-mib", type=float, default=192, help="memory per stage")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--output", help="JSON to write (rank 0)")
    p.add_argument(
        "--torch",
        default=",".join(TORCH_SCHEDULES),
        help="packed torch.distributed.pipelining schedules to step beside EPP ('' for none)",
    )
    return p.parse_args()


def torch_peer(config, schedule, largest, budget) -> tuple[TorchPacked, dict]:
    """The packed peer without checkpointing where its measured peak (activations and model state,
    the largest rank's) on the batch with the most tokens fits the budget, else with every layer
    checkpointed: the faster setting that fits, as a user would tune it."""
    for checkpoint in (0, config.layers):
        peer = TorchPacked(
            config,
            dist.group.WORLD,
            schedule=schedule,
            row_length=TORCH_ROW_LENGTH,
            checkpoint_layers=checkpoint,
        )
        out = peer.step(largest, measure_memory=True)
        peak = max(gathered(out["peak_activation_bytes"] + model_state_bytes(peer.parameters())))
        if peak <= budget or checkpoint:
            setting = dict(row_length=TORCH_ROW_LENGTH, checkpoint_layers=checkpoint)
            return peer, dict(setting, peak_mib=peak / MIB, fits=peak <= budget)
        peer = None
        gc.collect()
    raise AssertionError("unreachable: the last setting is returned")


def epp_row(trainer, batch) -> dict:
    """One EPP step: its wall time (the slowest rank's) and the executor's own timings."""
    begin = time.perf_counter()
    result = trainer.step(batch)
    seconds = time.perf_counter() - begin
    s = result.stats
    waits = gathered(s["wait_s"] / s["actions_s"] if s["actions_s"] > 0 else 0.0)
    return dict(
        seconds=max(gathered(seconds)),
        loss=result.loss,
        bubble=statistics.mean(waits),
        weight_s=sum(gathered(s["weight_s"])),
        split="zero-bubble=" in result.plan["setting"],
        predicted_s=result.plan["predicted_step_s"],
    )


def peer_row(peer, batch) -> dict:
    """One packed peer step: its wall time and the tokens its rows cut off their earlier context
    (it does less attention work than EPP, which keeps every document whole)."""
    begin = time.perf_counter()
    out = peer.step(batch)
    seconds = max(gathered(time.perf_counter() - begin))
    return dict(seconds=seconds, loss=out["loss"], cut_tokens=out["cut_tokens"])


def main() -> int:
    args = parse_args()
    torch.set_num_threads(1)
    config = LlamaConfig.tiny()
    budget = args.budget_mib * MIB
    sampled = [
        training.sampled_batch(
            "wikipedia", args.batch, args.context, args.seed + i, config.vocab, args.seed + i
        )
        for i in range(args.steps)
    ]
    runners = {
        mode: partial(
            epp_row,
            training.trainer(
                config,
                infinipipe.PlanConfig(
                    method="epp",
                    cost_model=args.cost_model,
                    memory_budget_bytes=int(budget),
                    zero_bubble=mode,
                ),
            ),
        )
        for mode in MODES
    }
    largest = max((batch for _, batch in sampled), key=lambda b: sum(t.numel() for t in b))
    torch_settings = {}
    for schedule in filter(None, args.torch.split(",")):
        peer, torch_settings["torch " + schedule] = torch_peer(config, schedule, largest, budget)
        runners["torch " + schedule] = partial(peer_row, peer)
    rows = {name: [] for name in runners}
    names = list(runners)
    started = time.monotonic()
    for i, (lengths, batch) in enumerate(sampled):
        # Each step starts with another runner, so no runner always follows the same one.
        for name in names[i % len(names) :] + names[: i % len(names)]:
            dist.barrier()
            rows[name].append(dict(runners[name](batch), step=i, tokens=sum(lengths)))
    if dist.get_rank() == 0:
        summary = {}
        for name, steps in rows.items():
            timed = steps[1:]
            total = sum(r["seconds"] for r in timed)
            summary[name] = dict(
                tokens_per_s=sum(r["tokens"] for r in timed) / total, total_s=total
            )
            if name not in MODES:
                summary[name]["cut_share"] = sum(r["cut_tokens"] for r in timed) / sum(
                    r["tokens"] for r in timed
                )
            else:
                summary[name].update(
                    bubble=statistics.mean(r["bubble"] for r in timed),
                    split_steps=sum(r["split"] for r in timed),
                    predicted_s=sum(r["predicted_s"] for r in timed),
                )
        for name in rows:
            summary[name]["speedup_over_off"] = summary["off"]["total_s"] / summary[name]["total_s"]
        model, cores = machine()
        out = dict(
            case=dict(
                {k: getattr(args, k) for k in ("batch", "context", "steps", "seed", "budget_mib")},
                cost_model=args.cost_model,
                torch_settings=torch_settings,
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
