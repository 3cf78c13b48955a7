#!/usr/bin/env python3
"""Does every plan the planner calls feasible pass independent checks (random plans at volume),
and how long does EPP take on single sequences up to the memory limit (the sweep)?

Runs the built `infinipipe-properties` (src/tools/infinipipe_properties.cc) and writes its JSON
summary with the commit it was built at: benchmarks/results/properties.json (random plans) or,
with `--sweep`, properties_sweep.json. benchmarks/planning_report.py renders docs/properties.md
from both. The tool exits 1 on any violation; the summary is written all the same, and this
script exits 1 too. `--smoke` runs the tool's own smoke (a thousand random plans and a tiny sweep)
and renders the page into a temporary directory.

Usage: python3 benchmarks/experiments/properties.py [build/infinipipe-properties] [--sweep]
           [--smoke] [--commit REV] [-- TOOL_OPTIONS...]
"""

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

# The benchmarks' shared code (benchmarks/lib) is one folder up.
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from lib import properties_page, results


def head_commit():
    command = ["git", "-C", str(results.ROOT), "rev-parse", "--short", "HEAD"]
    return subprocess.run(command, capture_output=True, text=True).stdout.strip()


def write(path, summary):
    """The tool's summary as it prints it (two-space JSON), the commit first."""
    Path(path).write_text(json.dumps(summary, indent=2) + "\n")


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("tool", nargs="?", default="build/infinipipe-properties")
    p.add_argument("--sweep", action="store_true", help="the planning-time sweep")
    p.add_argument(
        "--smoke", action="store_true", help="the tool's --smoke, rendered to a temp dir"
    )
    p.add_argument("--commit", help="the commit the tool was built at (default: this HEAD)")
    p.add_argument("options", nargs="*", help="more options for the tool (after --)")
    args = p.parse_args()
    mode = ["--smoke"] if args.smoke else ["--sweep"] if args.sweep else []
    done = subprocess.run([args.tool, *mode, *args.options], capture_output=True, text=True)
    if done.returncode not in (0, 1):
        sys.exit("properties: %s failed (%d): %s" % (args.tool, done.returncode, done.stderr))
    summary = dict(commit=args.commit or head_commit(), **json.loads(done.stdout))
    if args.smoke:
        volume = dict(commit=summary["commit"], volume=summary["volume"])
        sweep = dict(commit=summary["commit"], sweep=summary["sweep"])
        with tempfile.TemporaryDirectory() as tmp:
            page = properties_page.render_page(volume, sweep)
            Path(tmp, "properties.md").write_text(page)
        print(
            "properties smoke: %d plans, %d sweep cases; the page renders (%d lines)"
            % (summary["volume"]["plans"], summary["sweep"]["cases"], page.count("\n"))
        )
    else:
        name = "properties_sweep.json" if args.sweep else "properties.json"
        write(results.RESULTS / name, summary)
        print("properties: wrote %s" % (results.RESULTS / name))
    sys.exit(done.returncode)


if __name__ == "__main__":
    main()
