"""The cost model's layer time at query lengths between the grid's powers of two, where EPP's
cost-balanced slices and ChunkFlow's slices fall, against the profiler's own times for them: one
a1 for every length against one per query regime of the CPU attention (docs/design.md, "Cost
model"; profile.ATTENTION_QUERY_CUTS).

    PYTHONPATH=python .venv/bin/python benchmarks/query_lengths.py

One process, one thread, the tiny LLaMA's Python stage, thread CPU time. The profiler's grid and
the other lengths are timed in one shuffled run, so that both fits and the points they are
checked on see the machine at the same time. Both fits use the grid points only; the other lengths
are held out. Prints fit over measured - 1 (forward and backward together) per length and
context, and the median per query regime at contexts of 4096 and more.
"""

from __future__ import annotations

import argparse
import statistics
import sys

import torch

from infinipipe import profile
from infinipipe.models import llama

LENGTHS = [300, 336, 400, 448, 600, 700, 800, 900, 1200]
CONTEXTS = [0, 4096, 7680]


def fits(runs: dict, grid: set) -> dict:
    """The one-a1 fit and the fit by query regime, on the grid's points of `runs` only."""
    fitted = dict(runs, layer=[r for r in runs["layer"] if (r["tokens"], r["context"]) in grid])
    return {
        "one a1": profile.fit(fitted, holdout=0, attention_query_cuts=[]),
        "by query regime": profile.fit(fitted, holdout=0),
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--repeats", type=int, default=7)
    p.add_argument("--smoke", action="store_true", help="a small grid, one repeat (CI)")
    args = p.parse_args()
    torch.set_num_threads(1)
    torch.set_flush_denormal(True)
    config = llama.LlamaConfig.tiny()
    grid, repeats = profile.grid_points("quick" if args.smoke else "full")
    lengths, contexts = ([300, 800], [0, 4096]) if args.smoke else (LENGTHS, CONTEXTS)
    others = [(s, c) for s in lengths for c in contexts]
    module = profile.profiled_module(config, "python")
    runs = profile.time_runs(
        module,
        config,
        grid + others,
        1 if args.smoke else args.repeats,
        cpu_time=True,
        progress=sys.stderr.isatty() and not args.smoke,
    )
    by_point = {(r["tokens"], r["context"]): r for r in runs["layer"]}
    fitted = fits(runs, set(grid))
    print("fit over measured - 1, forward + backward, at lengths the grid does not hold:")
    print("tokens  context  " + "  ".join(f"{name:>16}" for name in fitted))
    long_context = {name: {} for name in fitted}
    for s, c in others:
        r = by_point[(s, c)]
        measured = statistics.median(r["forward_s"]) + statistics.median(r["backward_s"])
        row = []
        for name, cal in fitted.items():
            error = (cal.forward_s(s, c) + cal.backward_s(s, c)) / measured - 1
            row.append(f"{error:+16.1%}")
            if c >= 4096:
                regime = sum(s >= cut for cut in profile.ATTENTION_QUERY_CUTS)
                long_context[name].setdefault(regime, []).append(error)
        print(f"{s:6d}  {c:7d}  " + "  ".join(row))
    cuts = profile.ATTENTION_QUERY_CUTS
    for name, regimes in long_context.items():
        text = ", ".join(
            f"{'below ' + str(cuts[r]) if r < len(cuts) else 'from ' + str(cuts[-1])}: "
            f"{statistics.median(e):+.1%}"
            for r, e in sorted(regimes.items())
        )
        print(f"{name}, contexts of 4096 and more, median by query tokens: {text}")


if __name__ == "__main__":
    main()
