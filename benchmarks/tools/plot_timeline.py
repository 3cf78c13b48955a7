#!/usr/bin/env python3
"""Draw pipeline timelines from Chrome traces (one row per stage, boxes coloured by category).

Reads what `infinipipe-plan --trace OUT.json` writes, and measured timelines in the same format:
complete events ("ph": "X", "ts"/"dur" in microseconds, "tid" = stage, "cat" = category).
Counter events (memory) and anything else are ignored, so they are optional.

Usage: python benchmarks/tools/plot_timeline.py a.json [b.json ...] [--labels EPP Seq1F1B] --output x.png
"""

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/, for lib
from lib.timeline_plot import plot_timelines, read_trace  # noqa: E402


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("traces", nargs="+", help="Chrome trace JSON files")
    parser.add_argument("--labels", nargs="+", help="one label per trace (default: the file names)")
    parser.add_argument("--output", required=True, help="PNG to write")
    args = parser.parse_args()
    labels = args.labels or args.traces
    if len(labels) != len(args.traces):
        parser.error("%d labels for %d traces" % (len(labels), len(args.traces)))
    plot_timelines([(label, read_trace(p)) for label, p in zip(labels, args.traces)], args.output)
    print("plot_timeline: wrote %s" % args.output)


if __name__ == "__main__":
    main()
