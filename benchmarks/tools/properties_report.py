"""Prints the results sections of docs/properties.md from the property benchmark's JSON
summaries, measuring nothing:

    build/infinipipe-properties --seed 0 --plans 1000000 > benchmarks/results/properties.json
    build/infinipipe-properties --sweep > benchmarks/results/properties_sweep.json
    python3 benchmarks/tools/properties_report.py --commit REV --sweep-commit REV

The commits are the ones the binaries were built at: the planner changes under the results.
"""

import argparse
import json
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SLOW_S = 10  # "takes seconds": a sweep case at or past this is called out


def seconds_text(row):
    if violation_kinds(row) & {"timed out"}:
        return f"> {row['timeout_s']:g} (timed out)"
    return f"{row['seconds']:.2f}"


def violation_kinds(row):
    return {v[0] for v in row.get("violations", [])}


def volume_section(summary, commit):
    v = summary["volume"]
    kinds = v["violations"]
    lines = [
        "## Random plans",
        "",
        f"Run at commit `{commit}`:",
        "",
        "```bash",
        f"build/infinipipe-properties --seed {v['seed']} --plans {v['plans']} "
        f"--threads {v['workers']}",
        "```",
        "",
        f"**{v['plans']:,} plans, {v['violating_plans']} with a violation**, in "
        f"{v['wall_seconds'] / 60:.1f} min on {v['workers']} worker processes "
        f"({v['plans_per_second']:.0f} plans/s, the machine shared with other work). "
        f"{v['feasible']:,} plans were feasible and checked in full; "
        f"{v['infeasible']:,} were reported infeasible by the planner (allowed: the budgets "
        "go below what the step needs on purpose).",
        "",
        "| violation | plans |",
        "|---|---|",
    ]
    lines += [f"| {kind} | {count} |" for kind, count in kinds.items()]
    lines += ["", "| how planned | plans | feasible |", "|---|---|---|"]
    for mode, m in sorted(v["by_mode"].items()):
        lines.append(f"| {mode} | {m['plans']:,} | {m['feasible']:,} |")
    shapes = v["feasible_plans_with"]
    slow = v["slowest"]
    lines += [
        "",
        "What the feasible plans exercised: "
        + ", ".join(f"{shapes[k]:,} with {k}" for k in sorted(shapes))
        + ".",
        "",
        f"The slowest plan took {slow['seconds']:.2f} s ({slow['mode']}, {slow['model']}, "
        f"{slow['stages']} stages, lengths {slow['lengths']}; `{slow['reproduce']}`).",
        "",
    ]
    return lines


def sweep_section(summary, commit):
    s = summary["sweep"]
    rows = s["rows"]
    for row in rows:
        row["timeout_s"] = s["timeout_s"]
    lines = [
        "## Planning time of single sequences",
        "",
        f"Run at commit `{commit}`:",
        "",
        "```bash",
        "build/infinipipe-properties --sweep",
        "```",
        "",
        f"{s['cases']} cases, each with a limit of {s['timeout_s']:g} s (a worker process "
        f"planning past it is killed and the case counted as timed out). "
        f"{s['violating_cases']} cases with a violation"
        + "".join(
            f"{': ' if i == 0 else ', '}{k} {n}"
            for i, (k, n) in enumerate((k, n) for k, n in s["violations"].items() if n)
        )
        + ".",
        "",
        "Per model, stages and budget: the longest sequence whose K/V buffers fit (the planner "
        "refuses longer ones at once), how far the sweep went, and its slowest case.",
        "",
        "| model | stages | budget GiB | longest fitting | swept to | slowest length | seconds "
        f"| cases >= {SLOW_S} s | timed out |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    groups = {}
    for row in rows:
        if not row["reported_in_issue"]:
            key = (row["model"], row["stages"], row["budget_gib"])
            groups.setdefault(key, []).append(row)
    for (model, stages, budget), group in groups.items():
        slowest = max(group, key=lambda r: r["seconds"])
        slow = sum(1 for r in group if r["seconds"] >= SLOW_S)
        timed_out = sum(1 for r in group if "timed out" in violation_kinds(r))
        lines.append(
            f"| {model} | {stages} | {budget:g} | {group[0]['longest_fitting']:,} "
            f"| {max(r['length'] for r in group):,} | {slowest['length']:,} "
            f"| {seconds_text(slowest)} | {slow} | {timed_out} |"
        )
    lines += [
        "",
        "The slowest cases, and those issue 15 reported:",
        "",
        "| model | stages | budget GiB | length | seconds | outcome |",
        "|---|---|---|---|---|---|",
    ]
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
        lines.append(
            f"| {row['model']} | {row['stages']} | {row['budget_gib']:g} | {row['length']:,}{note} "
            f"| {seconds_text(row)} | {outcome} |"
        )
    lines.append("")
    return lines


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    results = ROOT / "benchmarks" / "results"
    parser.add_argument("--volume", default=results / "properties.json", type=Path)
    parser.add_argument("--sweep", default=results / "properties_sweep.json", type=Path)
    parser.add_argument("--commit", required=True, help="commit the random plans ran at")
    parser.add_argument("--sweep-commit", required=True, help="commit the sweep ran at")
    args = parser.parse_args()
    lines = volume_section(json.loads(args.volume.read_text()), args.commit)
    lines += sweep_section(json.loads(args.sweep.read_text()), args.sweep_commit)
    print("\n".join(lines))


if __name__ == "__main__":
    main()
