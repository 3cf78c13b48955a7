"""Measured steps replayed: each plan's own schedule run again on paper with the measured time of
every action, to split the simulator validation's step error into what the simulator's structure
misses and what its action times miss (docs/benchmarks.md, "Simulator validation").

    .venv/bin/torchrun --nproc_per_node=2 benchmarks/step_replay.py \
        --cost-model benchmarks/results/cost_cpu_xeon.json --output F
    .venv/bin/python benchmarks/step_replay.py --report F     # the tables again

The validation's cases (validate_simulator.py: its steps, methods, budgets and plans), timed in
the same interleaved rounds, each rank recording the thread CPU time of every action of its
step. Per case and round, lib/validation.py's replay runs the plan's schedule with those times
(the simulator's dependencies, transfers free). Printed per method, medians over cases and
rounds:
- measured over replayed - 1: the part of the step the schedule's structure does not explain
  (the executor's work between actions, sends, the wall clock against the CPU time);
- predicted over replayed - 1: the cost model's action times carried through the schedule.
Then every F and every B action's CPU time against the simulator's, fitted with a scale per round
(the machine's speed drifts) and without and with a constant per action, and per method what the
fit leaves over."""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

import numpy as np
import torch
import torch.distributed as dist

sys.path.insert(0, str(Path(__file__).resolve().parent))
from lib import results, training, validation_cases  # noqa: E402
from lib.ranks import gathered, leave  # noqa: E402
from lib.validation import predicted_action_seconds, replay, step_with_action_times  # noqa: E402

from infinipipe.models.llama import LlamaConfig  # noqa: E402


def timed_actions(c: dict) -> dict:
    """One step of case c: the executor's total and, in order, each action's thread CPU time."""
    stats, actions = step_with_action_times(c["trainer"], c["batch"], c["plan"])
    return dict(total_s=stats["total_s"], actions=actions)


def case_row(c: dict) -> dict:
    """A case's plan, predictions and rounds (rank 0's view: the rounds gathered from every rank)."""
    plan, cost = c["plan"], c["trainer"].cost
    predicted = predicted_action_seconds(plan, cost)
    schedule = plan.schedule
    rounds = []
    for ranks in c["measured"]:
        measured = [dict(r["actions"]) for r in ranks]
        rounds.append(
            dict(
                measured_step_s=max(r["total_s"] for r in ranks),
                replayed_step_s=replay(schedule, lambda s, t: measured[s][t]),
                # (stage, action, measured CPU s, predicted s) of every F and B
                actions=[
                    (s, a, measured[s][a], predicted[(s, a)])
                    for s in range(len(schedule))
                    for a in schedule[s]
                    if a[0] in "FB"
                ],
            )
        )
    return dict(
        case=validation_cases.case_fields(c["case"]),
        chunks=plan.summary()["chunks"],
        predicted_step_s=plan.summary()["predicted_step_s"],
        rounds=rounds,
    )


def action_fit(rows: list, kind: str, constant: bool) -> dict:
    """Every `kind` (F or B) action's measured CPU time against the simulator's: least squares with
    a scale per round and, if `constant`, seconds added per action; what it leaves per method
    (measured over fitted - 1, summed over the method's actions)."""
    n_rounds = len(rows[0]["rounds"])
    x, y, method = [], [], []
    for row in rows:
        for k, r in enumerate(row["rounds"]):
            for _, action, measured, predicted in r["actions"]:
                if action[0] != kind:
                    continue
                x.append([predicted if j == k else 0.0 for j in range(n_rounds)] + [1.0] * constant)
                y.append(measured)
                method.append(row["case"]["method"])
    x, y = np.array(x), np.array(y)
    coef = np.linalg.lstsq(x, y, rcond=None)[0]
    fitted = x @ coef
    left = {}
    for m in dict.fromkeys(method):
        pick = np.array([mm == m for mm in method])
        left[m] = float(y[pick].sum() / fitted[pick].sum() - 1)
    return dict(
        round_scales=[float(s) for s in coef[:n_rounds]],
        per_action_s=float(coef[n_rounds]) if constant else 0.0,
        left_by_method=left,
        actions=len(y),
    )


def summary(rows: list) -> dict:
    by = {}
    for row in rows:
        m = row["case"]["method"]
        for r in row["rounds"]:
            by.setdefault(m, {"structure": [], "cost": []})
            by[m]["structure"].append(r["measured_step_s"] / r["replayed_step_s"] - 1)
            by[m]["cost"].append(row["predicted_step_s"] / r["replayed_step_s"] - 1)
    return dict(
        per_method={
            m: dict(
                measured_over_replayed=statistics.median(e["structure"]),
                predicted_over_replayed=statistics.median(e["cost"]),
                rounds=len(e["structure"]),
            )
            for m, e in by.items()
        },
        action_fits={
            f"{kind} {'with' if constant else 'without'} a constant": action_fit(
                rows, kind, constant
            )
            for kind in "FB"
            for constant in (False, True)
        },
    )


def print_report(result: dict) -> None:
    print("per method, medians over cases and rounds:")
    for m, e in result["per_method"].items():
        print(
            f"  {m:10s} measured / replayed - 1 {e['measured_over_replayed']:+.1%}, "
            f"predicted / replayed - 1 {e['predicted_over_replayed']:+.1%} ({e['rounds']} runs)"
        )
    print("actions' CPU time against the simulator's (a scale per round):")
    for name, fit in result["action_fits"].items():
        left = ", ".join(f"{m} {v:+.1%}" for m, v in fit["left_by_method"].items())
        print(
            f"  {name}: {fit['per_action_s'] * 1e3:.2f} ms per action, scales "
            f"{', '.join(f'{s:.3f}' for s in fit['round_scales'])}; left per method: {left}"
        )


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--cost-model", help="cost JSON (python -m infinipipe profile)")
    training.add_trainer_arguments(p)
    p.add_argument("--repeats", type=int, default=3, help="rounds")
    p.add_argument("--seed", type=int, default=100)
    p.add_argument("--output", type=Path, help="JSON with every case and round (rank 0 writes it)")
    p.add_argument("--smoke", action="store_true", help="the validation's smoke cases, one round")
    p.add_argument("--report", type=Path, help="print a written --output again, run nothing")
    args = p.parse_args()
    if args.report:
        print_report(results.load(args.report))
        return 0
    torch.set_num_threads(1)
    config = LlamaConfig.tiny()
    if args.smoke:
        args.repeats = 1
    prepared = [
        validation_cases.prepare(case, args, config) for case in validation_cases.all_cases(args)
    ]
    prepared[0]["trainer"].step(prepared[0]["batch"], plan=prepared[0]["plan"])  # warm-up
    for r in range(args.repeats):
        for c in validation_cases.round_order(prepared, r, args.seed):
            c["measured"].append(gathered(timed_actions(c)))
        if dist.get_rank() == 0:
            print(f"round {r + 1} of {args.repeats} done", flush=True)
    if dist.get_rank() == 0:
        rows = [case_row(c) for c in prepared]
        result = dict(
            cost_model=args.cost_model,
            stage=args.stage,
            pause_gc=args.pause_gc,
            cases=rows,
            **summary(rows),
        )
        print_report(result)
        if args.output:
            results.write(args.output, result)
    leave()
    return 0


if __name__ == "__main__":
    sys.exit(main())
