"""docs/properties.md from benchmarks/results/properties.json (random plans) and
properties_sweep.json (single sequences timed), through benchmarks/templates/properties.md."""

from lib.markdown import table_head
from lib.page_template import lines, render

SLOW_S = 10  # "takes seconds": a sweep case at or past this is called out


def violation_kinds(row):
    return {v[0] for v in row.get("violations", [])}


def seconds_text(row, timeout_s):
    if "timed out" in violation_kinds(row):
        return f"> {timeout_s:g} (timed out)"
    return f"{row['seconds']:.2f}"


def volume_values(data):
    v = data["volume"]
    slow = v["slowest"]
    shapes = v["feasible_plans_with"]
    modes = table_head("how planned", "plans", "feasible")
    modes += [
        f"| {mode} | {m['plans']:,} | {m['feasible']:,} |"
        for mode, m in sorted(v["by_mode"].items())
    ]
    return dict(
        v_commit=data["commit"],
        v_seed=v["seed"],
        v_plans=v["plans"],
        v_plans_text=f"{v['plans']:,}",
        v_workers=v["workers"],
        v_violating=v["violating_plans"],
        v_minutes=f"{v['wall_seconds'] / 60:.1f}",
        v_rate=f"{v['plans_per_second']:.0f}",
        v_feasible=f"{v['feasible']:,}",
        v_infeasible=f"{v['infeasible']:,}",
        v_violations=lines(
            table_head("violation", "plans")
            + [f"| {kind} | {count} |" for kind, count in v["violations"].items()]
        ),
        v_modes=lines(modes),
        v_exercised=", ".join(f"{shapes[k]:,} with {k}" for k in sorted(shapes)),
        v_slowest=f"{slow['seconds']:.2f} s ({slow['mode']}, {slow['model']}, {slow['stages']} "
        f"stages, lengths {slow['lengths']}; `{slow['reproduce']}`)",
    )


def sweep_values(data):
    s = data["sweep"]
    rows, timeout_s = s["rows"], s["timeout_s"]
    groups = {}
    for row in rows:
        if not row["reported_in_issue"]:
            groups.setdefault((row["model"], row["stages"], row["budget_gib"]), []).append(row)
    limits = table_head(
        "model",
        "stages",
        "budget GiB",
        "longest fitting",
        "swept to",
        "slowest length",
        "seconds",
        f"cases >= {SLOW_S} s",
        "timed out",
    )
    for (model, stages, budget), group in groups.items():
        slowest = max(group, key=lambda r: r["seconds"])
        limits.append(
            f"| {model} | {stages} | {budget:g} | {group[0]['longest_fitting']:,} "
            f"| {max(r['length'] for r in group):,} | {slowest['length']:,} "
            f"| {seconds_text(slowest, timeout_s)} | {sum(r['seconds'] >= SLOW_S for r in group)} "
            f"| {sum('timed out' in violation_kinds(r) for r in group)} |"
        )
    slow = table_head("model", "stages", "budget GiB", "length", "seconds", "outcome")
    slowest = sorted(rows, key=lambda r: -r["seconds"])[:12]
    reported = [r for r in rows if r["reported_in_issue"] and r not in slowest]
    for row in slowest + reported:
        if violation_kinds(row):
            outcome = ", ".join(sorted(violation_kinds(row)))
        elif row.get("feasible"):
            outcome = f"feasible ({row['setting']})"
        else:
            outcome = "infeasible"
        note = " (issue 15)" if row["reported_in_issue"] else ""
        slow.append(
            f"| {row['model']} | {row['stages']} | {row['budget_gib']:g} | {row['length']:,}{note} "
            f"| {seconds_text(row, timeout_s)} | {outcome} |"
        )
    found = [f"{k} {n}" for k, n in s["violations"].items() if n]
    return dict(
        s_commit=data["commit"],
        s_cases=s["cases"],
        s_timeout=f"{timeout_s:g}",
        s_violating=s["violating_cases"],
        s_violations=": " + ", ".join(found) if found else "",
        s_slow=SLOW_S,
        s_limits=lines(limits),
        s_slowest=lines(slow),
    )


def render_page(volume, sweep):
    """docs/properties.md's text from the two results files' JSON."""
    return render("properties.md", dict(volume_values(volume), **sweep_values(sweep)))
