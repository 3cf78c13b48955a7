"""One case planned by the plan tool, summarised per method (EPP, each baseline static and per-step
best), and its first step drawn as a timeline: what cluster_study and cpu_simulated share."""

import os
import tempfile
import time

from lib.plan_tool import BASELINES, LABELS, collect, mean, run_tool, setting_text, times, tool_args
from lib.timeline_plot import plot_timelines, read_trace


def kinds():
    """(key, method, table) for every reported method: EPP, then each baseline static and best."""
    out = [("epp", "epp", "epp")]
    for m in BASELINES:
        out += [(m + " static", m, "static"), (m + " best", m, "best")]
    return out


def summarise(by_step, steps, method, kind):
    t = times(by_step, steps)
    if t is None:
        failed = [i for i in range(steps) if not by_step[i]["feasible"]]
        return {
            "feasible": False,
            "infeasible_steps": failed,
            "reason": by_step[failed[0]].get("reason", ""),
        }
    rows = [by_step[i] for i in range(steps)]
    settings = sorted({setting_text(r) for r in rows})
    return {
        "feasible": True,
        "mean_step_s": mean(t),
        "step_s": t,
        "bubble_fraction": mean([r["bubble_fraction"] for r in rows]),
        "recompute_s": mean([r["recompute_s"] for r in rows]),
        "peak_memory_gib": max(max(r["peak_memory_gib"]) for r in rows),
        # Steps whose plan splits backwards into B and W (`--zero-bubble`).
        "zero_bubble_steps": sum(r.get("zero_bubble", "off") != "off" for r in rows),
        "setting": settings[0] if kind == "static" else "per step (%d distinct)" % len(settings),
    }


def compute_bound(epp_rows):
    """The busiest stage's compute with recompute left out: no plan of these chunks beats it."""
    work = [[b - rc for b, rc in zip(r["busy_s"], r["recompute_s_per_stage"])] for r in epp_rows]
    per_stage = [mean(w) for w in zip(*work)]
    return {
        "bound_s": mean([max(w) for w in work]),
        "stage_compute_s": per_stage,
        "busiest_stage": per_stage.index(max(per_stage)),
        # The physical limit: the same compute spread evenly over the stages.
        "physical_limit_s": mean([sum(w) / len(w) for w in work]),
    }


def run_case(tool, case, extra=()):
    """The case planned with every method (`extra`: more plan tool arguments), summarised."""
    steps = case["steps"]
    started = time.monotonic()
    try:
        rows = run_tool([tool] + tool_args(case, "all") + list(extra))
    except SystemExit as failure:  # the tool refused the whole case: report it, go on
        return {"error": str(failure.code), "seconds": time.monotonic() - started}
    epp, static, best = collect(rows, steps)
    tables = {"epp": epp, "static": static, "best": best}
    result = {
        "seconds": time.monotonic() - started,
        "tokens": [epp[i]["tokens"] for i in range(steps)],
        "methods": {},
    }
    if "layers_per_stage" in rows[0]:  # plan tools before stage_balance did not say
        result["layers_per_stage"] = rows[0]["layers_per_stage"]
        result["layer_split"] = rows[0]["layer_split"]
        result["layer_split_candidates"] = rows[0].get("layer_split_candidates")
    for key, method, kind in kinds():
        by_step = tables[kind] if kind == "epp" else tables[kind].get(method, {})
        result["methods"][key] = summarise(by_step, steps, method, kind)
    e = result["methods"]["epp"]
    for s in result["methods"].values():
        if s["feasible"] and e["feasible"]:
            s["speedup"] = s["mean_step_s"] / e["mean_step_s"]
    if e["feasible"]:
        result["compute_bound"] = compute_bound([epp[i] for i in range(steps)])
    return result


TIMELINE_METHODS = ["epp", "seq1f1b"]


def traces_text(traces, step_format):
    """A timeline's plans in words (`traces` as timeline() returns them, the step time printed
    with `step_format`): "EPP (...): 1.234 s, bubble 5.0%, recompute 0.12 s; ..."."""
    return "; ".join(
        ("%s: " + step_format + " s, bubble %.1f%%, recompute %.2f s")
        % (x["label"], x["step_time_s"], 100 * x["bubble_fraction"], x["recompute_s"])
        for x in traces
    )


def timeline(tool, case, path):
    """EPP and static Seq1F1B on the case's first step, simulated, stacked in one picture.

    The tool traces the first step; for a baseline with the static setting it chose over all the
    case's steps, so with planning.md's case this is the setting planning.md reports.
    """

    traces, shown = [], []
    with tempfile.TemporaryDirectory() as tmp:
        for m in TIMELINE_METHODS:
            trace = os.path.join(tmp, m + ".json")
            row = next(
                r
                for r in run_tool([tool] + tool_args(case, m) + ["--trace", trace])
                if r["step"] == 0 and (m == "epp" or r["static"])
            )
            setting = setting_text(row)
            label = "%s (%s)" % (LABELS[m] if m == "epp" else "static " + LABELS[m], setting)
            traces.append((label, read_trace(trace)))
            shown.append(
                {
                    "label": label,
                    "step_time_s": row["step_time_s"],
                    "bubble_fraction": row["bubble_fraction"],
                    "recompute_s": row["recompute_s"],
                }
            )
        plot_timelines(traces, path)
    commands = [
        "infinipipe-plan " + " ".join(tool_args(case, m) + ["--trace", m + ".json"])
        for m in TIMELINE_METHODS
    ]
    commands.append(
        "python benchmarks/tools/plot_timeline.py %s --labels %s --output docs/img/%s"
        % (
            " ".join(m + ".json" for m in TIMELINE_METHODS),
            " ".join("'%s'" % t["label"] for t in shown),
            os.path.basename(path),
        )
    )
    return {"case": case, "traces": shown, "commands": commands}
