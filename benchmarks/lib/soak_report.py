"""The soak's verdict (benchmarks/experiments/soak.py's JSON): resident memory's growth after warm-up and
step-time drift per rank, and the losses of a run resumed from the soak's checkpoint against the
soak's own, as numbers and as the "Soak" section of docs/benchmarks.md (written by
benchmarks/report.py and by plot_soak.py --docs)."""

from __future__ import annotations

import statistics
import struct

MIB = 1 << 20
# The section's markers in docs/benchmarks.md, so plot_soak.py --docs can replace it in place.
BEGIN, END = "<!-- soak: benchmarks/lib/soak_report.py -->", "<!-- /soak -->"
# The settings step i's batch and plan depend on (besides i): a run resumed with other ones
# would see other batches (soak.py keeps them in its checkpoint and refuses a resume without).
BATCH_SETTINGS = ("distribution", "batch", "context", "seed", "method", "memory_gib")


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
    first = data.get("first_step", 0)  # the step a resumed run started at
    for r in data["ranks"]:
        n = len(r["step_seconds"])
        warm, end = windows(n)
        rss = [b / MIB for b in r["rss_bytes"]]
        row = dict(
            rank=r["rank"],
            steps=n,
            warm=[first + warm.start, first + warm.stop - 1],
            end=[first + end.start, first + end.stop - 1],
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
        gc_counts = [c for s, c in r.get("gc_objects", []) if s >= first + warm.start]
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


def _bits(x: float) -> bytes:
    return struct.pack("<d", x)


def compare(full: dict, resumed: dict) -> dict:
    """The resumed run's steps against the same steps of the uninterrupted run that saved the
    checkpoint: per rank, how many losses are equal (bitwise, as doubles), the first step that
    differs and the largest absolute difference; how many steps ran the same plan (by hash) on
    the same number of tokens."""
    start, offset = resumed["first_step"], full.get("first_step", 0)
    count = min(len(resumed["tokens"]), len(full["tokens"]) - (start - offset))
    steps = range(start, start + max(0, count))
    end = range(steps.stop - max(1, len(steps) // 10), steps.stop)  # the last tenth
    ranks = []
    for a, b in zip(full["ranks"], resumed["ranks"]):
        pairs = [(s, a["loss"][s - offset], b["loss"][s - start]) for s in steps]
        different = [(s, abs(x - y)) for s, x, y in pairs if _bits(x) != _bits(y)]
        ranks.append(
            dict(
                rank=a["rank"],
                equal=len(pairs) - len(different),
                first_different=different[0][0] if different else None,
                max_abs_difference=max((d for _, d in different), default=0.0),
                rss_end_mib=_median(b["rss_bytes"], (s - start for s in end)) / MIB,
                full_rss_end_mib=_median(a["rss_bytes"], (s - offset for s in end)) / MIB,
            )
        )

    def same(key: str) -> int | None:
        if key not in full or key not in resumed:
            return None
        return sum(full[key][s - offset] == resumed[key][s - start] for s in steps)

    other = [
        k
        for k in (*BATCH_SETTINGS, "world_size")
        if full["settings"].get(k) != resumed["settings"].get(k)
    ]
    return dict(
        resumed_from_step=start,
        steps=len(steps),
        last_step=steps[-1] if steps else None,
        end=[end.start, end.stop - 1],
        ranks=ranks,
        same_plan=same("plan_hashes"),
        same_tokens=same("tokens"),
        other_settings=other,
        checkpoint=resumed.get("checkpoint"),
        saved=full.get("checkpoint"),
        command=resumed["settings"]["command"],
        commit=resumed["settings"]["commit"],
        started=resumed["settings"]["started"],
        wall_seconds=resumed["wall_seconds"],
    )


def comparison_lines(c: dict) -> list[str]:
    """One line per rank, and one for the plans and tokens."""
    lines = []
    for r in c["ranks"]:
        text = (
            f"rank {r['rank']}: resumed at step {c['resumed_from_step']}, losses equal (bitwise) on "
            f"{r['equal']} of {c['steps']} steps, max abs difference {r['max_abs_difference']:.3g}"
        )
        if r["first_different"] is not None:
            text += f", first different at step {r['first_different']}"
        lines.append(text)
    lines.append(
        f"same plan (hash) on {c['same_plan']} and same tokens on {c['same_tokens']} of "
        f"{c['steps']} steps"
        + (
            f"; settings that differ: {', '.join(c['other_settings'])}"
            if c["other_settings"]
            else ""
        )
    )
    return lines


def _resumed_lines(c: dict | None, resumed_path: str | None) -> list[str]:
    """The section's paragraph on the resumed run."""
    if c is None:
        return [
            "Not measured here: the same losses from a run resumed halfway (`soak.py "
            "--checkpoint-dir DIR --save-at N`, then `--resume` and `plot_soak.py --resumed`).",
            "",
        ]
    n, start = c["steps"], c["resumed_from_step"]
    saved, loaded = c.get("saved") or {}, c.get("checkpoint") or {}
    equal = [r["equal"] for r in c["ranks"]]
    if all(e == n for e in equal):
        verdict = (
            f"equal to the uninterrupted run's, bitwise, on all {n} steps on every rank (max "
            "abs difference 0)"
        )
    else:
        verdict = "not all equal to the uninterrupted run's: " + "; ".join(
            f"rank {r['rank']} equal on {r['equal']} of {n} steps, first different at "
            f"step {r['first_different']}, max abs difference {r['max_abs_difference']:.3g}"
            for r in c["ranks"]
        )
    text = (
        f"Resumed halfway. The run above saved its whole training state after its first "
        f"{start} steps (steps 0-{start - 1}; `Trainer.save_checkpoint`: weights, AdamW state, "
        "step and RNG states, "
        f"{saved.get('save_seconds', float('nan')):.2f} s, into `{saved.get('dir')}`); a new "
        f"pair of processes loaded it ({loaded.get('load_seconds', float('nan')):.2f} s) and "
        f"ran steps {start}-{c['last_step']} (`{resumed_path}`, {c['started']}, "
        f"{c['wall_seconds'] / 60:.0f} min). Its losses are {verdict}. Both runs planned the "
        f"same plan (by hash) on {c['same_plan']} and counted the same tokens on "
        f"{c['same_tokens']} of those {n} steps. Resident memory of the resumed ranks over steps "
        f"{c['end'][0]}-{c['end'][1]} (median): "
        + ", ".join(f"{r['rss_end_mib']:.1f} MiB" for r in c["ranks"])
        + " (the uninterrupted run's: "
        + ", ".join(f"{r['full_rss_end_mib']:.1f} MiB" for r in c["ranks"])
        + ")."
    )
    if c["other_settings"]:
        text += f" Settings that differ between the runs: {', '.join(c['other_settings'])}."
    return [text, ""]


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
        f"(`benchmarks/experiments/soak.py`; `{results_path}`, commit `{s['commit'][:12]}`"
        + (" with uncommitted changes in the work tree" if s["commit"].endswith("-dirty") else "")
        + ", "
        f"{s['started']}, {data['wall_seconds'] / 60:.0f} min; machine: {s['cpus']} CPUs, "
        f"{s['machine']}, torch {s['torch']}).",
        "",
        "```bash",
        *_commands(data, image, results_path),
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
        f"steps {v['warm'][0]}-{v['end'][1]}. Drift is the end's median step time over the "
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
    resumed = data.get("resumed")
    return lines + _resumed_lines(resumed, resumed and resumed.get("path"))


def _commands(data: dict, image: str, results_path: str) -> list[str]:
    """The soak's command (with its checkpoint, if it saved one), the resumed run's and the
    report's."""
    s, saved = data["settings"], data.get("checkpoint") or {}
    run = (
        ".venv/bin/torchrun --nproc_per_node=2 benchmarks/experiments/soak.py --steps "
        f"{s['steps']} --batch {s['batch']} --context {s['context']}"
    )
    resumed = data.get("resumed")
    lines = [
        run
        + (
            f" --checkpoint-dir {saved['dir']} --save-at {saved['saved_at_step']}"
            if "saved_at_step" in saved
            else ""
        )
        + f" --out {results_path}"
    ]
    if resumed:
        lines.append(
            f"{run} --resume --checkpoint-dir {resumed['checkpoint']['dir']} --out "
            f"{resumed['path']}"
        )
    lines.append(
        f".venv/bin/python benchmarks/tools/plot_soak.py {results_path} --output docs/{image} "
        + (f"--resumed {resumed['path']} " if resumed else "")
        + "--docs docs/benchmarks.md"
    )
    return lines
