"""Python's garbage collector paused while the pipeline runs (Trainer(pause_gc=True)) against
left on (the default), on the same steps, side by side.

    torchrun --nproc_per_node=2 benchmarks/gc_pause.py \
        --cost-model benchmarks/results/cost_cpu.json --output benchmarks/results/gc_pause.json

Two ranks, the tiny LLaMA's Python stage, one thread per rank. The cases: the simulator
validation's wikipedia step (24 x 8192, 192 MiB) and its two heavy steps (192 MiB), each planned
by EPP and by Seq1F1B's setting (validate_simulator.plan_config). Every round steps each case
twice, collector paused and left on, the cases and the two settings in a shuffled order. Per
step: the executor's time (the slower rank's; the pipelined part, what the simulator predicts),
and the whole step's wall time (the slower rank's; the optimizer step and what the collector does
after the run included; the plan is given, so no planning). Rank 0 prints per case the medians
over the rounds and paused over on, and writes them (--output)."""

from __future__ import annotations

import argparse
import random
import statistics
import time
from pathlib import Path

import torch
from lib import results, validation_cases
from lib.ranks import gathered, leave

from infinipipe.models.llama import LlamaConfig

STEPS = [
    ("wikipedia", 24, 8192, 192, 100),
    ("heavy", 16, 8192, 192, 0),
    ("heavy", 16, 8192, 192, 39),
]
SMOKE_STEPS = [("extreme", 4, 1024, 48, 100)]


def timed(c: dict, pause: bool) -> None:
    """One step of the case with the collector paused or not: its times, gathered."""
    c["trainer"].pause_gc = pause
    started = time.perf_counter()
    stats = c["trainer"].step(c["batch"], plan=c["plan"]).stats
    wall = time.perf_counter() - started
    ranks = gathered((stats["total_s"], wall))
    c["runs"][pause].append([max(r[i] for r in ranks) for i in range(2)])


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--cost-model", help="cost JSON (python -m infinipipe profile)")
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--output", type=Path, help="JSON of every case (rank 0 writes it)")
    p.add_argument("--smoke", action="store_true", help="one small step, one round (CI)")
    args = p.parse_args()
    torch.set_num_threads(1)
    config = LlamaConfig.tiny()
    steps = SMOKE_STEPS if args.smoke else STEPS
    rounds = 1 if args.smoke else args.rounds
    cases = []
    for distribution, batch, context, budget, seed in steps:
        for method in ("epp", "seq1f1b"):
            case = (distribution, batch, context, method, budget, seed)
            c = validation_cases.prepare(
                case,
                argparse.Namespace(cost_model=args.cost_model, stage="python", pause_gc=False),
                config,
            )
            c["runs"] = {True: [], False: []}
            cases.append(c)
    timed(cases[0], True)  # warm-up: the process's first step pays for its set-up
    cases[0]["runs"][True].clear()
    order = random.Random(args.seed)
    for _ in range(rounds):
        runs = [(c, pause) for c in cases for pause in (True, False)]
        order.shuffle(runs)
        for c, pause in runs:
            timed(c, pause)
    rows = []
    for c in cases:
        row = dict(
            case=validation_cases.case_fields(c["case"]), setting=c["plan"].summary()["setting"]
        )
        for pause, name in ((True, "paused"), (False, "on")):
            for i, key in enumerate(("executor_s", "step_s")):
                row[f"{name}_{key}"] = [run[i] for run in c["runs"][pause]]
        for key in ("executor_s", "step_s"):
            row[f"{key}_paused_over_on"] = statistics.median(
                row[f"paused_{key}"]
            ) / statistics.median(row[f"on_{key}"])
        rows.append(row)
    if torch.distributed.get_rank() == 0:
        for row in rows:
            c = row["case"]
            print(
                f"{c['distribution']} seed {c['seed']}, {c['method']}: executor "
                f"{statistics.median(row['paused_executor_s']):.3f} s paused, "
                f"{statistics.median(row['on_executor_s']):.3f} s on "
                f"({row['executor_s_paused_over_on']:.3f}x); step "
                f"{statistics.median(row['paused_step_s']):.3f} s against "
                f"{statistics.median(row['on_step_s']):.3f} s ({row['step_s_paused_over_on']:.3f}x)",
                flush=True,
            )
        if args.output:
            results.write(args.output, dict(cost_model=args.cost_model, rounds=rounds, cases=rows))
    leave()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
