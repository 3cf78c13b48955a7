"""docs/planning.md from the results of planning_comparison (the comparison with the baselines)
and planning_speed (the search's speed), through benchmarks/templates/planning.md."""

from lib import checkpoint_compare
from lib.markdown import table_head
from lib.page_template import case_values, lines, pct, render, steps_text
from lib.plan_tool import BASELINES, LABELS, mean

# The targets for the headline comparison: EPP's speed-up over a static baseline.
TARGETS = [("seq1f1b", "static Seq1F1B", 1.25), ("batch", "static batch-level", 1.6)]
PLANNING_LIMIT_MS = 1000  # EPP planning under 1 s per step on one core
KIND = {"epp": "", "static": " (static)", "best": " (per-step best)"}


def ratio(a, b):
    """b / a as a speed-up, or n/a."""
    return "%.2fx" % (b / a) if a and b else "n/a"


def method_table(methods):
    out = table_head(
        "method",
        "setting",
        "mean step time (s)",
        "EPP speed-up",
        "bubble",
        "recompute (s)",
        "chunks",
        "waves",
    )
    for r in methods:
        name = LABELS[r["method"]] + KIND[r["kind"]]
        if not r["feasible"]:
            out.append(
                "| %s | infeasible: %s | | | | | | |" % (name, r["reason"].replace("|", "/"))
            )
            continue
        if r["kind"] == "static":
            setting = r["settings"][0]
        else:
            setting = "per step: " + "; ".join(r["settings"])
        out.append(
            "| %s | %s | %.3f | %.2fx | %s | %.2f | %.0f | %.1f |"
            % (
                name,
                setting,
                r["mean_step_s"],
                r["speedup"],
                pct(r["bubble"]),
                r["recompute_s"],
                r["chunks"],
                r["waves"],
            )
        )
    return out


def step_table(steps):
    out = table_head(
        "step",
        "tokens",
        "EPP (s)",
        *["%s static / best (speed-up)" % LABELS[m] for m in BASELINES],
    )
    for s in steps:

        def cell(t):
            return "%.3f (%s)" % (t, ratio(s["epp_s"], t)) if t is not None else "infeasible"

        cells = ["%s / %s" % (cell(s["static"][m]), cell(s["best"][m])) for m in BASELINES]
        out.append(
            "| %d | %d | %.3f | %s |" % (s["step"], s["tokens"], s["epp_s"], " | ".join(cells))
        )
    return out


def targets(c):
    """The issue's targets, each met or not, from the comparison's numbers."""
    speedups = {(r["method"], r["kind"]): r.get("speedup") for r in c["methods"]}
    out = []
    for m, name, goal in TARGETS:
        r = speedups.get((m, "static"))
        out.append(
            "- EPP vs %s: %s (target >= %.2fx): %s"
            % (
                name,
                "n/a" if r is None else "%.2fx" % r,
                goal,
                "met" if r and r >= goal else "not met",
            )
        )
    worse = {m: s for m, s in c["per_step_worse"].items() if s}
    steps = c["case"]["steps"]
    out.append(
        "- EPP never slower than any baseline's per-step best: %s"
        % (
            "met"
            if not worse
            else "not met (%s)"
            % ", ".join(
                "%s on %d of %d steps, by up to %s"
                % (LABELS[m], len(s), steps, pct(max(w["excess"] for w in s)))
                for m, s in worse.items()
            )
        )
    )
    worst = max(c["planning_ms"]["per_step"])
    out.append(
        "- EPP planning under %g s per step on one core: %s (max %.0f ms)"
        % (PLANNING_LIMIT_MS / 1000, "met" if worst < PLANNING_LIMIT_MS else "not met", worst)
    )
    return out


def observation_values(c):
    o = c["observations"]
    epp = c["methods"][0]
    closest = o["closest"]
    return dict(
        multi_wave_steps=steps_text(o["multi_wave_steps"]),
        bubble_multi=pct(o["bubble_multi"]) if o["bubble_multi"] is not None else "-",
        bubble_single=pct(o["bubble_single"]) if o["bubble_single"] is not None else "-",
        closest="step %d, %s's per-step best, %.2f%% %s than EPP"
        % (
            closest["step"],
            LABELS[closest["method"]],
            100 * abs(closest["margin"]),
            "slower" if closest["margin"] >= 0 else "faster",
        )
        if closest
        else "none feasible",
        knob_token_cap=steps_text(o["knobs"]["token_cap"]),
        knob_strict=steps_text(o["knobs"]["strict_packing"]),
        knob_drain=steps_text(o["knobs"]["drain_taper"]),
        knob_recompute=steps_text(o["knobs"]["recompute"]),
        static_recompute=lines(
            "- Static %s recomputes %d layer(s) per stage on every step, %.2f s of recompute per "
            "step summed over stages, because its worst step needs it."
            % (LABELS[s["method"]], s["layers"], s["recompute_s"])
            for s in o["static_recompute"]
        ),
        busiest_s="%.3f" % o["busiest_compute_s"],
        epp_over_busiest=pct(epp["mean_step_s"] / o["busiest_compute_s"] - 1),
        seq1f1b_over_busiest="%.2fx" % (o["seq1f1b_static_s"] / o["busiest_compute_s"])
        if o["seq1f1b_static_s"]
        else "n/a",
        lowest_bubble=pct(o["lowest_bubble"]),
    )


def comparison_values(c):
    case, ms = c["case"], c["planning_ms"]
    worse = {m: s for m, s in c["per_step_worse"].items() if s}
    values = dict(
        case_values(case),
        context=case["context"],
        method_table=lines(method_table(c["methods"])),
        step_table=lines(step_table(c["steps"])),
        slower_steps=", ".join(
            "%s steps %s" % (LABELS[m], [w["step"] for w in s]) for m, s in worse.items()
        )
        or "no step",
        pinned="one core (`taskset -c 0`)" if ms["pinned"] else "not pinned (taskset missing)",
        timing_runs=ms["runs"],
        plan_ms_mean="%.0f" % mean(ms["per_step"]),
        plan_ms_max="%.0f" % max(ms["per_step"]),
        plan_ms_worst_run="%.0f" % ms["worst_run"],
        checkpoint_steps=c["checkpoint"]["steps"],
        checkpoint_first_seed=c["checkpoint"]["first_seed"],
        checkpoint_last_seed=c["checkpoint"]["first_seed"] + c["checkpoint"]["steps"] - 1,
        checkpoint_table=lines(checkpoint_compare.table(c["checkpoint"])),
        checkpoint_verdict=checkpoint_compare.verdict(c["checkpoint"]),
        targets=lines(targets(c)),
        command=c["command"],
        machine=c["machine"],
        date=c["date"],
    )
    values.update(observation_values(c))
    return values


# Issue 12's targets for the search's speed (the planner's CPU time per step on one core), by the
# name planning_speed gives each case: the most milliseconds on any step, and the most resident
# memory of the plan tool's process in MB where there is one.
SPEED_TARGETS = [
    ("wikipedia, batch 512, 8 stages", 300, None),
    ("uniform, batch 512, 8 stages", 300, None),
    ("lognormal, batch 512, 8 stages", 300, None),
    ("extreme, batch 512, 8 stages", 300, None),
    ("heavy mix", 1000, None),
    ("wikipedia, batch 2048, 32 stages", 2000, 200),
]


def cpu_text(steps):
    ms = [s["cpu_ms"] for s in steps if s["cpu_ms"] is not None]
    return "%s (%s)" % (f"{max(ms):,.0f}", f"{sum(ms) / len(ms):,.0f}") if ms else "-"


def speed_values(speed):
    out = table_head(
        "case", "steps", "CPU per step, max (mean) ms", "peak RSS MiB", "work limit reached"
    )
    for c in speed["cases"]:
        steps = c["new"]["steps"]
        exhausted = sum(bool(s["budget_exhausted"]) for s in steps)
        out.append(
            "| %s | %d | %s | %s | %d of %d |"
            % (
                c["name"],
                len(steps),
                cpu_text(steps),
                f"{c['new']['peak_rss_mib']:,.0f}",
                exhausted,
                len(steps),
            )
        )
    verdicts = table_head("case", "target", "worst step", "met")
    for prefix, limit_ms, limit_mb in SPEED_TARGETS:
        case = next(c for c in speed["cases"] if c["name"].startswith(prefix))
        worst = max(s["cpu_ms"] for s in case["new"]["steps"])
        met = worst <= limit_ms
        target = "at most %g s" % (limit_ms / 1000)
        got = "%.2f s" % (worst / 1000)
        if limit_mb:
            rss_mb = case["new"]["peak_rss_mib"] * 2**20 / 1e6
            met = met and rss_mb <= limit_mb
            target += " and %d MB" % limit_mb
            got += ", %.0f MB" % rss_mb
        verdicts.append(
            "| %s | %s | %s | %s |" % (case["name"], target, got, "yes" if met else "**no**")
        )
    return dict(
        speed_table=lines(out),
        speed_targets=lines(verdicts),
        speed_date=speed["date"][:10],
        speed_build=speed["build"],
    )


def render_page(comparison, speed):
    """docs/planning.md's text."""
    values = comparison_values(comparison)
    values.update(speed_values(speed))
    return render("planning.md", values)
