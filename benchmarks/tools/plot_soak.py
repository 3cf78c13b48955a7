"""The soak's verdict numbers and its plot, from the JSON benchmarks/experiments/soak.py wrote.

    python benchmarks/tools/plot_soak.py benchmarks/results/soak.json --output docs/img/soak.png \
        [--resumed benchmarks/results/soak_resumed.json] [--docs docs/benchmarks.md]

Prints, per rank, the resident memory's growth after warm-up (median RSS of the last tenth of
the steps minus that of steps n/10 to n/5: steps 900-999 against 100-199 of 1,000), the same for
the bytes malloc holds in use, the RSS slope over the steps after warm-up (least squares), and
the step-time drift (median step time of the last tenth over that of steps n/10 to n/5, also
per token, since every step has other lengths). Plots RSS per rank, step time with a rolling
median, and the loss against the step. With --resumed (the JSON of `soak.py --resume` from the
checkpoint this soak saved), compares that run's losses with this one's on every step it ran
(equal bitwise or not, the largest difference), plots them too, and keeps the comparison in the
soak's JSON (so benchmarks/report.py renders it as well). With --docs, writes the section "Soak"
into that page (between its markers, before "Reproducing"); nothing is measured here.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/, for lib
from lib.soak_report import (  # noqa: E402
    BEGIN,
    END,
    MIB,
    compare,
    comparison_lines,
    section,
    verdict_lines,
    windows,
)

ROLLING = 50  # steps in the plot's rolling median


def _rolling_median(values, width):
    half = width // 2
    return [statistics.median(values[max(0, i - half) : i + half + 1]) for i in range(len(values))]


def plot(data: dict, output: Path, resumed: dict | None = None) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ranks = data["ranks"]
    n = len(ranks[0]["step_seconds"])
    first = data.get("first_step", 0)
    warm, end = (range(first + w.start, first + w.stop) for w in windows(n))
    steps = list(range(first, first + n))
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
    if resumed is not None:
        start = resumed["first_step"]
        again = resumed["ranks"][0]["loss"]
        loss_ax.plot(
            range(start, start + len(again)),
            _rolling_median(again, ROLLING),
            color="tab:orange",
            linestyle="--",
            label=f"resumed at step {start}, rolling median",
        )
    saved_at = (data.get("checkpoint") or {}).get("saved_at_step")
    for ax in axes:
        for window in (warm, end):
            ax.axvspan(window.start, window.stop - 1, color="tab:green", alpha=0.08)
        if saved_at is not None:
            ax.axvline(saved_at - 0.5, color="tab:red", linestyle=":", linewidth=1)
    s = data["settings"]
    rss_ax.set_title(
        f"Soak: {n} steps, {s['world_size']} ranks, tiny LLaMA, {s['method']}, batch {s['batch']} "
        f"Wikipedia lengths <= {s['context']}"
    )
    rss_ax.set_ylabel("MiB")
    time_ax.set_ylabel("step time (s)")
    loss_ax.set_ylabel("loss")
    loss_ax.set_yscale("log")
    loss_ax.set_xlabel(
        "step (shaded: the windows compared"
        + (f"; dotted: checkpoint saved after step {saved_at - 1}" if saved_at else "")
        + ")"
    )
    for ax in axes:
        ax.grid(alpha=0.3)
        ax.legend(loc="upper right", fontsize=8)
    fig.tight_layout()
    output.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(output, dpi=110)
    plt.close(fig)


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


def _shown(path: Path) -> str:
    """`path` relative to the checkout when it is inside it."""
    path = path.resolve()
    root = Path(__file__).resolve().parents[1]
    return str(path.relative_to(root) if path.is_relative_to(root) else path)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument(
        "results", type=Path, help="the soak's JSON (benchmarks/experiments/soak.py --out)"
    )
    p.add_argument("--output", type=Path, default=None, help="the PNG to write")
    p.add_argument("--docs", type=Path, default=None, help="page to write the section into")
    p.add_argument("--note", default=None, help="what was found, kept in the results JSON")
    p.add_argument(
        "--resumed", type=Path, default=None, help="the JSON of a run resumed from its checkpoint"
    )
    args = p.parse_args()
    data = json.loads(args.results.read_text())
    resumed = json.loads(args.resumed.read_text()) if args.resumed else None
    if args.note is not None or resumed is not None:
        if args.note is not None:
            data["note"] = args.note
        if resumed is not None:
            data["resumed"] = dict(compare(data, resumed), path=_shown(args.resumed))
        args.results.write_text(json.dumps(data, indent=1))
    if not data.get("complete", True):
        print(f"note: {args.results} is partial ({data['steps_done']} steps)")
    print("\n".join(verdict_lines(data)))
    if resumed is not None:
        print("\n".join(comparison_lines(data["resumed"])))
    if args.output:
        plot(data, args.output, resumed)
        print(f"wrote {args.output}")
    if args.docs:
        image = Path("img") / args.output.name if args.output else Path("img/soak.png")
        write_section(args.docs, section(data, image.as_posix(), _shown(args.results)))
        print(f"wrote the Soak section of {args.docs}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
