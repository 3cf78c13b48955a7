"""docs/planning.md's computed sections: EPP against the static and per-step-best baselines on
the headline case, per step, the recompute programs compared, and the targets, from the JSON that
benchmarks/experiments/planning_comparison.py writes; benchmarks/report.py renders them through
benchmarks/templates/planning.md."""

from lib.checkpoint_compare import checkpoint_section
from lib.markdown import table_head
from lib.plan_tool import BASELINES, LABELS, collect, mean, setting_text, times


def fmt_ratio(a, b):
    return "%.2fx" % (b / a) if a and b else "n/a"


def plan_means(by_step, steps):
    """The table cells of a method's mean bubble, recompute, chunks and waves over the steps."""
    return "%.1f%% | %.2f | %.0f | %.1f" % (
        100 * mean([by_step[i]["bubble_fraction"] for i in range(steps)]),
        mean([by_step[i]["recompute_s"] for i in range(steps)]),
        mean([by_step[i]["num_chunks"] for i in range(steps)]),
        mean([by_step[i]["num_waves"] for i in range(steps)]),
    )


def result_sections(result: dict) -> str:
    """The page's Result, Checkpointing and Against the targets sections, computed from the
    experiment's JSON (benchmarks/experiments/planning_comparison.py)."""
    case, rows, checkpoint_rows = result["case"], result["rows"], result["checkpoint_rows"]
    plan_ms_one_core, plan_ms_worst_run = result["plan_ms_one_core"], result["plan_ms_worst_run"]
    pinned, timing_runs = result["pinned"], result["timing_runs"]
    steps = case["steps"]
    epp, static, best = collect(rows, steps)
    epp_t = times(epp, steps)
    if epp_t is None:
        raise ValueError(
            "planning_comparison: EPP infeasible on some step: %s"
            % [epp[i].get("reason") for i in range(steps) if not epp[i]["feasible"]]
        )
    lines = []
    summary = {"epp_mean_s": mean(epp_t), "ratios": {}, "per_step_worse": {}}

    lines += table_head(
        "method",
        "setting",
        "mean step time (s)",
        "EPP speed-up",
        "bubble",
        "recompute (s)",
        "chunks",
        "waves",
    )
    lines.append(
        "| EPP | per step: %s | %.3f | 1.00x | %s |"
        % (
            "; ".join(setting_text(epp[i]) for i in range(steps)),
            mean(epp_t),
            plan_means(epp, steps),
        )
    )
    for m in BASELINES:
        for kind, table in (("static", static.get(m, {})), ("per-step best", best.get(m, {}))):
            t = times(table, steps)
            if t is None:
                reason = next(
                    table[i].get("reason", "") for i in range(steps) if not table[i]["feasible"]
                )
                lines.append(
                    "| %s (%s) | infeasible: %s | | | | | | |"
                    % (LABELS[m], kind, reason.replace("|", "/"))
                )
                summary["ratios"]["%s %s" % (m, kind)] = None
                continue
            ratio = mean(t) / mean(epp_t)
            summary["ratios"]["%s %s" % (m, kind)] = ratio
            settings = sorted({setting_text(table[i]) for i in range(steps)})
            setting = settings[0] if kind == "static" else "per step: " + "; ".join(settings)
            lines.append(
                "| %s (%s) | %s | %.3f | %.2fx | %s |"
                % (LABELS[m], kind, setting, mean(t), ratio, plan_means(table, steps))
            )
            if kind == "per-step best":
                summary["per_step_worse"][m] = [
                    i for i in range(steps) if epp_t[i] > t[i] * (1 + 1e-9)
                ]

    step_lines = table_head(
        "step",
        "tokens",
        "EPP (s)",
        *["%s static / best (speed-up)" % LABELS[m] for m in BASELINES],
    )
    for i in range(steps):
        cells = []
        for m in BASELINES:
            s, b = static.get(m, {}).get(i), best.get(m, {}).get(i)

            def cell(r):
                return (
                    "%.3f (%s)" % (r["step_time_s"], fmt_ratio(epp_t[i], r["step_time_s"]))
                    if r and r["feasible"]
                    else "infeasible"
                )

            cells.append("%s / %s" % (cell(s), cell(b)))
        step_lines.append(
            "| %d | %d | %.3f | %s |" % (i, epp[i]["tokens"], epp_t[i], " | ".join(cells))
        )

    summary["plan_ms_one_core"] = plan_ms_one_core
    summary["plan_ms_worst_run"] = plan_ms_worst_run
    text = []
    text.append(
        "Case: %s lengths, %s, %s, %d stages, %g GiB per stage (model state with mixed-precision "
        "Adam inside it), batch %d, context %d, %d steps (seeds %d..%d).\n"
        % (
            case["distribution"],
            case["model"],
            case["hardware"],
            case["stages"],
            case["memory_gib"],
            case["batch"],
            case["context"],
            steps,
            case["seed"],
            case["seed"] + steps - 1,
        )
    )
    text.append("\n")
    text.extend(line + "\n" for line in lines)
    text.append("\nSpeed-up = baseline mean step time / EPP mean step time.\n\nPer step:\n\n")
    text.extend(line + "\n" for line in step_lines)
    worse = {m: s for m, s in summary["per_step_worse"].items() if s}
    text.append(
        "\nEPP slower than a baseline's per-step best on: %s.\n"
        % (
            ", ".join("%s steps %s" % (LABELS[m], s) for m, s in worse.items())
            if worse
            else "no step"
        )
    )
    text.append(
        "\nEPP planning time (the whole search: chunkings, simulations, recompute, grouping, "
        "checkpoint choice) per step, %s, wall clock, the least of %d runs: mean %.0f ms, max %.0f ms "
        "(slowest single run: %.0f ms).\n"
        % (
            "one core (`taskset -c 0`)" if pinned else "not pinned (taskset missing)",
            timing_runs,
            mean(plan_ms_one_core),
            max(plan_ms_one_core),
            summary["plan_ms_worst_run"],
        )
    )
    text.extend(checkpoint_section(checkpoint_rows, case["seed"]))
    text.append("\n## Against the targets\n\n")
    targets = [
        ("static Seq1F1B", summary["ratios"].get("seq1f1b static"), 1.25),
        ("static batch-level", summary["ratios"].get("batch static"), 1.6),
    ]
    for name, ratio, goal in targets:
        text.append(
            "- EPP vs %s: %s (target >= %.2fx): %s\n"
            % (
                name,
                "n/a" if ratio is None else "%.2fx" % ratio,
                goal,
                "met" if ratio is not None and ratio >= goal else "not met",
            )
        )
    text.append(
        "- EPP never slower than any baseline's per-step best: %s\n"
        % (
            "met"
            if not worse
            else "not met (%s)"
            % ", ".join(
                "%s on %d of %d steps, by up to %.1f%%"
                % (
                    LABELS[m],
                    len(s),
                    steps,
                    100 * max(epp_t[i] / best[m][i]["step_time_s"] - 1 for i in s),
                )
                for m, s in worse.items()
            )
        )
    )
    text.append(
        "- EPP planning under 1 s per step on one core: %s (max %.0f ms)\n"
        % (
            "met" if plan_ms_one_core and max(plan_ms_one_core) < 1000 else "not met",
            max(plan_ms_one_core),
        )
    )
    multi = [i for i in range(steps) if epp[i]["num_waves"] > 1]
    text.append("\nObservations from the plans:\n\n")
    if multi:
        single = [i for i in range(steps) if i not in multi]
        text.append(
            "- EPP needed several waves (the whole step did not fit one pipeline without "
            "recompute) on steps %s: bubble %.1f%% there against %.1f%% on the other steps.\n"
            % (
                multi,
                100 * mean([epp[i]["bubble_fraction"] for i in multi]),
                100 * mean([epp[i]["bubble_fraction"] for i in single]) if single else float("nan"),
            )
        )
    margins = [
        (best[m][i]["step_time_s"] / epp_t[i] - 1, i, m)
        for m in BASELINES
        for i in range(steps)
        if best.get(m, {}).get(i) and best[m][i]["feasible"]
    ]
    if margins:
        closest = min(margins)
        text.append(
            "- Closest per-step comparison: step %d, %s's per-step best, %.2f%% %s than EPP.\n"
            % (
                closest[1],
                LABELS[closest[2]],
                100 * abs(closest[0]),
                "slower" if closest[0] >= 0 else "faster",
            )
        )
    knobs = [
        ("a chunk token cap", [i for i in range(steps) if epp[i]["setting"].get("token_cap")]),
        ("strict packing", [i for i in range(steps) if epp[i]["setting"].get("strict_packing")]),
        ("a drain taper", [i for i in range(steps) if epp[i]["setting"].get("drain_chunks")]),
        ("recompute", [i for i in range(steps) if epp[i]["recompute_s"] > 0]),
    ]
    text.append(
        "- EPP's search chose %s.\n"
        % "; ".join(
            "%s on %s" % (name, "steps %s" % chosen if chosen else "no step")
            for name, chosen in knobs
        )
    )
    for m in BASELINES:
        t = static.get(m, {})
        if (
            t
            and all(t[i]["feasible"] for i in range(steps))
            and t[0]["setting"]["uniform_recompute"] > 0
        ):
            text.append(
                "- Static %s recomputes %d layer(s) per stage on every step, %.2f s of recompute per "
                "step summed over stages, because its worst step needs it.\n"
                % (
                    LABELS[m],
                    t[0]["setting"]["uniform_recompute"],
                    mean([t[i]["recompute_s"] for i in range(steps)]),
                )
            )
    bound = [
        max(b - r for b, r in zip(epp[i]["busy_s"], epp[i]["recompute_s_per_stage"]))
        for i in range(steps)
    ]
    text.append(
        "- Compute of the busiest stage in EPP's plans, recompute left out (no plan of these chunks "
        "can be faster): mean %.3f s, so EPP is within %.1f%% of it, and no method could be more than "
        "%.2fx faster than static Seq1F1B here unless it ran less compute on that stage.\n"
        % (
            mean(bound),
            100 * (mean(epp_t) / mean(bound) - 1),
            (mean(times(static["seq1f1b"], steps)) / mean(bound))
            if times(static.get("seq1f1b", {}), steps)
            else float("nan"),
        )
    )
    text.append(
        "- Lowest bubble of any plan: %.1f%%. With even layer splits the last stage also "
        "runs the LM head, so the other stages wait for it whatever the chunking.\n"
        % (100 * min(r["bubble_fraction"] for r in rows if r["feasible"]))
    )
    return "".join(text)
