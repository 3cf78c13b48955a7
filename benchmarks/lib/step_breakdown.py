"""Where an EPP step's time goes, from the simulator's timeline: each sampled step planned alone
with `--trace` (the plan tool writes the first step's simulated timeline as a Chrome trace), and
per stage its compute (forwards, backwards, heads), recompute, the idle time before its first
action (the pipeline's fill), after its last (the drain) and between (stalls: waiting for a
neighbour's chunk, including a slower stage's). Averaged over the stages the parts add up to the
step, and the compute is the physical limit (the compute spread evenly over the stages)."""

import json
import os
import tempfile
from statistics import mean

from lib.plan_tool import run_tool, tool_args

PARTS = ("compute_s", "recompute_s", "fill_s", "drain_s", "stalls_s")


def stage_parts(events, stage, step_s):
    """One stage's parts of a step from its trace events (times in microseconds)."""
    spans = [e for e in events if e.get("ph") == "X" and e["tid"] == stage]
    spans.sort(key=lambda e: e["ts"])
    compute = sum(e["dur"] for e in spans if e["cat"] != "recompute") / 1e6
    recompute = sum(e["dur"] for e in spans if e["cat"] == "recompute") / 1e6
    fill = spans[0]["ts"] / 1e6
    drain = step_s - max(e["ts"] + e["dur"] for e in spans) / 1e6
    stalls = step_s - compute - recompute - fill - drain
    return dict(
        compute_s=compute, recompute_s=recompute, fill_s=fill, drain_s=drain, stalls_s=stalls
    )


def run(tool, case, extra=()):
    """The case's EPP plans: the parts averaged over the stages, and the step time, each the mean
    over the case's steps."""
    per_step = []
    with tempfile.TemporaryDirectory() as tmp:
        trace = os.path.join(tmp, "trace.json")
        for i in range(case["steps"]):
            one = dict(case, seed=case["seed"] + i, steps=1)
            row = run_tool([tool] + tool_args(one, "epp") + ["--trace", trace] + list(extra))[0]
            with open(trace) as f:
                events = json.load(f)["traceEvents"]
            stages = [stage_parts(events, s, row["step_time_s"]) for s in range(case["stages"])]
            step = {k: mean(p[k] for p in stages) for k in PARTS}
            per_step.append(dict(step, step_s=row["step_time_s"]))
    return {k: mean(s[k] for s in per_step) for k in PARTS + ("step_s",)}
