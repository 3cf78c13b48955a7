"""The soak's verdict numbers and its plot, from the JSON benchmarks/soak.py wrote.

    python benchmarks/plot_soak.py benchmarks/results/soak.json --output docs/img/soak.png \
        [--docs docs/benchmarks.md]

Prints, per rank, the resident memory's growth after warm-up (median RSS of the last tenth of
the steps minus that of steps n/10 to n/5: steps 900-999 against 100-199 of 1,000), the same for
the bytes malloc holds in use, the RSS slope over the steps after warm-up (least squares), and
the step-time drift (median step time of the last tenth over that of steps n/10 to n/5, also
per token, since every step has other lengths). Plots RSS per rank, step time with a rolling
median, and the loss against the step. With --docs, writes the section "Soak" into that page
(between its markers, before "Reproducing"); nothing is measured here.
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path

MIB = 1 << 20
ROLLING = 50  # steps in the plot's rolling median
BEGIN, END = "<!-- soak: written by benchmarks/plot_soak.py -->", "<!-- /soak -->"


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


def _rolling_median(values, width):
    half = width // 2
    return [statistics.median(values[max(0, i - half) : i + half + 1]) for i in range(len(values))]


def plot(data: dict, output: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ranks = data["ranks"]
    n = len(ranks[0]["step_seconds"])
    warm, end = windows(n)
    steps = list(range(n))
    fig, axes = plt.subplots(3, 1, figsize=(9, 9), sharex=True)
    rss_ax, time_ax, loss_ax = axes
    for r in ranks:
        label = f"rank {r['rank']}"
        (line,) = rss_ax.plot(steps, [b / MIB for b in r["rss_bytes"]], label=f"{label} RSS")
        held = r.get("malloc_in_use_bytes") or []
        if held and all(b is not None for b in held):
            rss_ax.plot(
                steps,
                [b / MIB for b in held],
                color=line.get_color(),
                linestyle="--",
                label=f"{label} malloc in use",
            )
        seconds = r["step_seconds"]
        time_ax.plot(steps, seconds, ".", markersize=2, alpha=0.3, color=line.get_color())
        time_ax.plot(
            steps,
            _rolling_median(seconds, ROLLING),
            color=line.get_color(),
            label=f"{label} wall, rolling median of {ROLLING}",
        )
        cpu = r.get("step_cpu_seconds") or []
        if len(cpu) == n:
            time_ax.plot(
                steps,
                _rolling_median(cpu, ROLLING),
                color=line.get_color(),
                linestyle="--",
                label=f"{label} CPU time, rolling median",
            )
    load = ranks[0].get("loadavg_1min") or []
    if len(load) == n:
        load_ax = time_ax.twinx()
        load_ax.plot(steps, load, color="tab:gray", alpha=0.5, linewidth=0.8)
        load_ax.set_ylabel("machine load, 1 min (gray)")
        load_ax.set_ylim(bottom=0)
    loss = ranks[0]["loss"]
    loss_ax.plot(steps, loss, ".", markersize=2, alpha=0.3, color="tab:gray")
    loss_ax.plot(steps, _rolling_median(loss, ROLLING), color="black", label="loss, rolling median")
    for ax in axes:
        for window in (warm, end):
            ax.axvspan(window.start, window.stop - 1, color="tab:green", alpha=0.08)
    s = data["settings"]
    rss_ax.set_title(
        f"Soak: {n} steps, {s['world_size']} ranks, tiny LLaMA, {s['method']}, batch {s['batch']} "
        f"Wikipedia lengths <= {s['context']}"
    )
    rss_ax.set_ylabel("MiB")
    time_ax.set_ylabel("step time (s)")
    loss_ax.set_ylabel("loss")
    loss_ax.set_yscale("log")
    loss_ax.set_xlabel("step (shaded: the windows compared)")
    for ax in axes:
        ax.grid(alpha=0.3)
        ax.legend(loc="upper right", fontsize=8)
    fig.tight_layout()
    output.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(output, dpi=110)
    plt.close(fig)


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
        "(benchmarks/report.py does not write this section: after it, run plot_soak.py with "
        "--docs again.)",
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


def write_section(page: Path, lines: list[str]) -> None:
    """Puts the section between its markers in `page`, or before "## Reproducing" (else last)."""
    text = page.read_text()
    block = "\n".join([BEGIN, *lines, END]) + "\n"
    if BEGIN in text and END in text:
        head, rest = text.split(BEGIN, 1)
        text = head + block + rest.split(END, 1)[1].lstrip("\n")
    elif "\n## Reproducing" in text:
        head, tail = text.split("\n## Reproducing", 1)
        text = head + "\n" + block + "\n## Reproducing" + tail
    else:
        text = text.rstrip("\n") + "\n\n" + block
    page.write_text(text)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("results", type=Path, help="the soak's JSON (benchmarks/soak.py --out)")
    p.add_argument("--output", type=Path, default=None, help="the PNG to write")
    p.add_argument("--docs", type=Path, default=None, help="page to write the section into")
    p.add_argument("--note", default=None, help="what was found, kept in the results JSON")
    args = p.parse_args()
    data = json.loads(args.results.read_text())
    if args.note is not None:
        data["note"] = args.note
        args.results.write_text(json.dumps(data, indent=1))
    if not data.get("complete", True):
        print(f"note: {args.results} is partial ({data['steps_done']} steps)")
    print("\n".join(verdict_lines(data)))
    if args.output:
        plot(data, args.output)
        print(f"wrote {args.output}")
    if args.docs:
        image = Path("img") / args.output.name if args.output else Path("img/soak.png")
        results_path = args.results.resolve()
        root = Path(__file__).resolve().parents[1]
        if results_path.is_relative_to(root):
            results_path = results_path.relative_to(root)
        write_section(args.docs, section(data, image.as_posix(), str(results_path)))
        print(f"wrote the Soak section of {args.docs}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
