"""The simulator validation's errors, predicted / measured - 1: what validate_simulator prints and
report.py renders from its results; and the heavy steps it measures every method on."""

import math
import statistics
import time

import numpy as np

# The heavy steps (issue 12, item 6): 16 sequences of a heavier-tailed mix than the built-in
# distributions give at 16 x 8192 (their steps hold 4K-33K tokens): lognormal lengths with a
# median of 1200 tokens and sigma 1.5, at least 64, cut at 8192. Its steps hold 20K-56K tokens
# for 91% of the seeds; validate_simulator's (0, 39, 40, 47) hold 26589, 31911, 20931 and 23783
# tokens, 31%, 51%, 39% and 34% of them in sequences cut at 8192 (40% together).
HEAVY_MEDIAN, HEAVY_SIGMA, HEAVY_MIN, HEAVY_CUT = 1200, 1.5, 64, 8192


def heavy_lengths(seed, batch=16):
    """A heavy step's lengths, drawn with numpy's default generator seeded with `seed`."""
    draws = np.random.default_rng(seed).lognormal(math.log(HEAVY_MEDIAN), HEAVY_SIGMA, batch)
    return [int(min(HEAVY_CUT, max(HEAVY_MIN, x))) for x in draws]


def errors(row):
    """A validation case's errors: of the step time (against the median measured step), and per
    stage of the activation peak and of the busy (compute) time."""
    return dict(
        step=row["predicted_step_s"] / statistics.median(row["measured_step_s"]) - 1,
        memory=[
            p / m - 1
            for p, m in zip(row["predicted_activation_bytes"], row["measured_activation_bytes"])
        ],
        busy=[p / m - 1 for p, m in zip(row["predicted_busy_s"], row["measured_busy_s"])],
        # per stage, against the thread CPU time of its forward and backward actions (runs
        # before it existed have none)
        busy_cpu=[
            p / m - 1 for p, m in zip(row["predicted_busy_s"], row.get("measured_busy_cpu_s", []))
        ],
        # the same, of the F actions and of the B actions (recompute included) apart
        **{
            f"{part}_cpu": [
                p / m - 1
                for p, m in zip(
                    row.get(f"predicted_{part}_s", []), row.get(f"measured_{part}_cpu_s", [])
                )
            ]
            for part in ("forward", "backward")
        },
    )


def predict_again(row, cost, reference):
    """(step, busy per stage) the simulator predicts for a validation case's measured plan with the
    cost model `cost`: the plan built again from its chunks, waves and recompute
    (_C.plan.build_plan), its waves overlapped or not as the run's plan (the one that predicts
    the run's time under `reference`, the cost model the run planned with)."""
    from infinipipe import _C

    chunks = [[tuple(s) for s in chunk] for chunk in row["plan_chunks"]]
    for overlap in (False, True):
        ref = _C.plan.build_plan(
            row["lengths"], chunks, row["plan_waves"], reference, row["plan_recompute"], overlap
        )
        if abs(ref.summary()["predicted_step_s"] / row["predicted_step_s"] - 1) < 1e-9:
            got = _C.plan.build_plan(
                row["lengths"], chunks, row["plan_waves"], cost, row["plan_recompute"], overlap
            ).summary()
            return got["predicted_step_s"], got["predicted_busy_s"]
    raise ValueError(f"case {row['case']}: its plan does not build again to the run's prediction")


def per_method(rows, step_key="predicted_step_s", busy_key="predicted_busy_s"):
    """Per method, over its cases: the median step error (signed), the median |error|, and
    the median error of the busy time against its thread CPU time (over stages and cases)."""
    by, cpu = {}, {}
    for r in rows:
        row = dict(r, predicted_step_s=r[step_key], predicted_busy_s=r[busy_key])
        if busy_key != "predicted_busy_s":  # the parts are the run's cost model's: leave them out
            for part in ("forward", "backward"):
                row.pop(f"predicted_{part}_s", None)
        e = errors(row)
        m = r["case"]["method"]
        by.setdefault(m, []).append(e["step"])
        for part in ("busy", "forward", "backward"):
            cpu.setdefault((m, part), []).extend(e[f"{part}_cpu"])

    def median(m, part):
        return statistics.median(cpu[m, part]) if cpu[m, part] else None

    return {
        m: dict(
            cases=len(e),
            median_step_error=statistics.median(e),
            median_abs_step_error=statistics.median(abs(x) for x in e),
            median_busy_cpu_error=median(m, "busy"),
            # the F and the B actions apart (with the run's own cost model only)
            median_forward_cpu_error=median(m, "forward"),
            median_backward_cpu_error=median(m, "backward"),
        )
        for m, e in by.items()
    }


def step_of(row):
    """A validation row's step: its case without the method."""
    c = row["case"]
    return c["distribution"], c["batch"], c["context"], c["budget_mib"], c["seed"]


def shared_rows(rows):
    """The rows of the steps that every method in the run ran (the same lengths and tokens)."""
    methods = {r["case"]["method"] for r in rows}
    by_step = {}
    for r in rows:
        by_step.setdefault(step_of(r), set()).add(r["case"]["method"])
    return [r for r in rows if by_step[step_of(r)] == methods]


def paired(rows, reference="epp"):
    """Per other method, over the steps it and `reference` both ran: the reference's step error
    minus the method's, per step (against the median measured step) and per step and round (the
    two measured in the same round, one soon after the other, so that a change in the machine's
    speed between rounds falls on both), with the medians of each."""
    by_step = {}
    for r in rows:
        by_step.setdefault(step_of(r), {})[r["case"]["method"]] = r
    out = {}
    for methods in by_step.values():
        ref = methods.get(reference)
        for m, r in methods.items():
            if ref is None or m == reference:
                continue
            o = out.setdefault(m, dict(steps=[], rounds=[]))
            o["steps"].append(errors(ref)["step"] - errors(r)["step"])
            o["rounds"] += [
                ref["predicted_step_s"] / a - r["predicted_step_s"] / b
                for a, b in zip(ref["measured_step_s"], r["measured_step_s"])
            ]
    for o in out.values():
        o["median_step_gap"] = statistics.median(o["steps"])
        o["median_round_gap"] = statistics.median(o["rounds"])
    return out


def step_with_action_times(trainer, batch, plan):
    """One step of `plan`: (its stats as a dict, and in order each action's thread CPU seconds on
    this rank as (action text, seconds)). The actions' ends are marked by the executor's
    after_action probe, the first action counting from the step's start; thread CPU time is
    what other work on the machine inflates far less than the wall clock."""
    marks = [("start", time.thread_time())]
    trainer.stage.executor.set_after_action(
        lambda action: marks.append((action, time.thread_time()))
    )
    try:
        stats = dict(trainer.step(batch, plan=plan).stats)
    finally:
        trainer.stage.executor.set_after_action(None)
    return stats, [(a, t - marks[i - 1][1]) for i, (a, t) in enumerate(marks) if i]
