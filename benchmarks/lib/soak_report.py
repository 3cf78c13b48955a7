"""The soak's verdict (benchmarks/soak.py's JSON): resident memory's growth after warm-up and
step-time drift per rank, as numbers and as the "Soak" section of docs/benchmarks.md (written by
benchmarks/report.py and by plot_soak.py --docs)."""

from __future__ import annotations

import statistics

MIB = 1 << 20
# The section's markers in docs/benchmarks.md, so plot_soak.py --docs can replace it in place.
BEGIN, END = "<!-- soak: benchmarks/lib/soak_report.py -->", "<!-- /soak -->"


def windows(n: int) -> tuple[range, range]:
    """(after warm-up, end): steps n/10 to n/5 and the last tenth, each at least one step."""
    tenth = max(1, n // 10)
    start = min(n - 1, n // 10)
    return range(start, max(start + 1, n // 5)), range(n - tenth, n)


def _median(values, steps):
    return statistics.median(values[i] for i in steps)


def _slope(values, steps):
    """Least-squares slope of values[i] over i in steps (per step); 0 for fewer than 2 steps."""
    xs = list(steps)
    if len(xs) < 2:
        return 0.0
    mx = statistics.fmean(xs)
    my = statistics.fmean(values[i] for i in xs)
    sxx = sum((x - mx) ** 2 for x in xs)
    return sum((x - mx) * (values[x] - my) for x in xs) / sxx


def verdict(data: dict) -> list[dict]:
    """Per rank: the growth and drift numbers the soak is judged by."""
    out = []
    tokens = data["tokens"]
    for r in data["ranks"]:
        n = len(r["step_seconds"])
        warm, end = windows(n)
        rss = [b / MIB for b in r["rss_bytes"]]
        row = dict(
            rank=r["rank"],
            steps=n,
            warm=[warm.start, warm.stop - 1],
            end=[end.start, end.stop - 1],
            rss_first_mib=rss[0],
            rss_warm_mib=_median(rss, warm),
            rss_end_mib=_median(rss, end),
            rss_max_mib=max(rss),
            rss_slope_mib_per_100_steps=100 * _slope(rss, range(warm.start, n)),
        )
        row["rss_growth_mib"] = row["rss_end_mib"] - row["rss_warm_mib"]
        row["rss_growth_pct"] = 100 * row["rss_growth_mib"] / row["rss_warm_mib"]
        held = r.get("malloc_in_use_bytes") or []
        if held and all(b is not None for b in held):
            held = [b / MIB for b in held]
            row["malloc_warm_mib"] = _median(held, warm)
            row["malloc_growth_mib"] = _median(held, end) - row["malloc_warm_mib"]
        seconds = r["step_seconds"]
        per_token = [s / t for s, t in zip(seconds, tokens)]
        row["step_warm_s"] = _median(seconds, warm)
        row["step_end_s"] = _median(seconds, end)
        row["step_drift"] = row["step_end_s"] / row["step_warm_s"]
        row["per_token_drift"] = _median(per_token, end) / _median(per_token, warm)
        cpu = r.get("step_cpu_seconds") or []
        if len(cpu) == n:
            row["cpu_warm_s"] = _median(cpu, warm)
            row["cpu_end_s"] = _median(cpu, end)
            row["cpu_drift"] = row["cpu_end_s"] / row["cpu_warm_s"]
        load = r.get("loadavg_1min") or []
        if len(load) == n:
            row["load_warm"], row["load_end"] = _median(load, warm), _median(load, end)
        gc_counts = [c for s, c in r.get("gc_objects", []) if s >= warm.start]
        if gc_counts:
            row["gc_objects_after_warm"] = gc_counts[0]
            row["gc_objects_last"] = gc_counts[-1]
        row["loss_first"], row["loss_last"] = r["loss"][0], r["loss"][-1]
        out.append(row)
    return out


def verdict_lines(data: dict) -> list[str]:
    lines = []
    for v in verdict(data):
        text = (
            f"rank {v['rank']}: RSS {v['rss_warm_mib']:.1f} MiB (steps {v['warm'][0]}-"
            f"{v['warm'][1]}) -> {v['rss_end_mib']:.1f} MiB (steps {v['end'][0]}-{v['end'][1]}): "
            f"{v['rss_growth_mib']:+.1f} MiB ({v['rss_growth_pct']:+.2f}%), slope "
            f"{v['rss_slope_mib_per_100_steps']:+.2f} MiB/100 steps, max {v['rss_max_mib']:.1f}"
        )
        if "malloc_growth_mib" in v:
            text += f"; malloc in use {v['malloc_growth_mib']:+.1f} MiB"
        text += (
            f"; step time {v['step_warm_s']:.3f} -> {v['step_end_s']:.3f} s "
            f"(x{v['step_drift']:.3f}, per token x{v['per_token_drift']:.3f})"
        )
        if "cpu_drift" in v:
            text += (
                f"; CPU time {v['cpu_warm_s']:.3f} -> {v['cpu_end_s']:.3f} s "
                f"(x{v['cpu_drift']:.3f}); load {v['load_warm']:.2f} -> {v['load_end']:.2f}"
            )
        if "gc_objects_last" in v:
            text += f"; gc objects {v['gc_objects_after_warm']} -> {v['gc_objects_last']}"
        lines.append(text)
    return lines


def section(data: dict, image: str, results_path: str) -> list[str]:
    """The "Soak" section of docs/benchmarks.md, in markdown lines."""
    s = data["settings"]
    rows = verdict(data)
    n = rows[0]["steps"]
    cpu = all("cpu_drift" in v for v in rows)
    lines = [
        "## Soak",
        "",
        f"{n} training steps on {s['world_size']} ranks (Gloo, CPU, one thread each), "
        f"{s['model']}, {s['method'].upper()} planned per step, AdamW; step i's batch is "
        f"{s['batch']} sequences of Wikipedia lengths truncated to {s['context']} tokens "
        f"(seed {s['seed']} + i, so every run sees the same batches; {statistics.mean(data['tokens']):.0f} "
        f"tokens a step on average). After every step each rank records its wall step time"
        + (", the CPU time it spent in it, the machine's load" if cpu else "")
        + ", its resident memory (VmRSS) and malloc's bytes in use "
        f"(`benchmarks/soak.py`; `{results_path}`, commit `{s['commit'][:12]}`"
        + (" with uncommitted changes in the work tree" if s["commit"].endswith("-dirty") else "")
        + ", "
        f"{s['started']}, {data['wall_seconds'] / 60:.0f} min; machine: {s['cpus']} CPUs, "
        f"{s['machine']}, torch {s['torch']}).",
        "",
        "```bash",
        ".venv/bin/torchrun --nproc_per_node=2 benchmarks/soak.py --steps "
        f"{s['steps']} --batch {s['batch']} --context {s['context']} --out {results_path}",
        f".venv/bin/python benchmarks/plot_soak.py {results_path} --output docs/{image} "
        "--docs docs/benchmarks.md",
        "```",
        "",
        f"![RSS, step time and loss over the soak]({image})",
        "",
        "| rank | RSS after warm-up (MiB) | RSS at the end (MiB) | growth | slope (MiB/100 steps) "
        "| malloc in use, growth (MiB) | wall step time after warm-up -> end (s) | drift "
        "| drift per token |" + (" CPU time per step, drift |" if cpu else ""),
        "|---|---|---|---|---|---|---|---|---|" + ("---|" if cpu else ""),
    ]
    for v in rows:
        lines.append(
            f"| {v['rank']} | {v['rss_warm_mib']:.1f} | {v['rss_end_mib']:.1f} | "
            f"{v['rss_growth_mib']:+.1f} MiB ({v['rss_growth_pct']:+.2f}%) | "
            f"{v['rss_slope_mib_per_100_steps']:+.2f} | "
            f"{v.get('malloc_growth_mib', float('nan')):+.2f} | {v['step_warm_s']:.3f} -> "
            f"{v['step_end_s']:.3f} | x{v['step_drift']:.3f} | x{v['per_token_drift']:.3f} |"
            + (
                f" {v['cpu_warm_s']:.3f} -> {v['cpu_end_s']:.3f} s, x{v['cpu_drift']:.3f} |"
                if cpu
                else ""
            )
        )
    v = rows[0]
    lines += [
        "",
        f"After warm-up is the median of steps {v['warm'][0]}-{v['warm'][1]}, the end the "
        f"median of steps {v['end'][0]}-{v['end'][1]}; the slope is a least-squares fit over "
        f"steps {v['warm'][0]}-{n - 1}. Drift is the end's median step time over the "
        "warm-up's; per token divides each step's time by its tokens first, since every step "
        f"has other lengths. Loss {v['loss_first']:.3f} at step 0, {v['loss_last']:.3f} at "
        f"step {n - 1}."
        + (
            f" The machine's 1-minute load averaged {statistics.mean(data['ranks'][0]['loadavg_1min']):.1f} "
            f"(median {v['load_warm']:.1f} after warm-up, {v['load_end']:.1f} at the end; the two "
            "ranks alone make 2)."
            if cpu
            else ""
        ),
        "",
    ]
    if data.get("note"):
        lines += [data["note"], ""]
    lines += [
        "Not measured yet: the same losses from a run resumed halfway. That needs checkpoint "
        "support (issue 14), which has not landed; the soak already draws step i's batch from "
        "i alone, so a resumed run can be compared step by step once it has.",
        "",
    ]
    return lines
