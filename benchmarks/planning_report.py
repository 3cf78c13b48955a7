#!/usr/bin/env python3
"""Renders the planning pages from the committed results, measuring nothing, through the templates
in benchmarks/templates/: docs/planning.md (planning_comparison.json, planning_speed.json) and
docs/cluster_study.md with docs/img/cluster_speedup.png (cluster_study.json, balance_study.json,
cluster_sp_study.json, flexsp_study.json) and docs/properties.md (properties.json,
properties_sweep.json). Every number on a page comes from a results file; the
prose is the template's.

Usage: python3 benchmarks/planning_report.py [--results DIR] [--docs DIR] [--check]

`--check` renders the pages into memory and exits 1 when one differs from the one in --docs (a
page edited by hand, or results committed without rendering); it leaves the plot alone.
"""

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from lib import cluster_page, planning_page, properties_page, results  # noqa: E402


def pages(res):
    """Each page's path under docs/ and its rendered text, from the results folder `res`."""
    load = lambda name: results.load(res / name)  # noqa: E731
    return {
        "planning.md": planning_page.render_page(
            load("planning_comparison.json"), load("planning_speed.json")
        ),
        "cluster_study.md": cluster_page.render_page(cluster_page.load(res)),
        "properties.md": properties_page.render_page(
            load("properties.json"), load("properties_sweep.json")
        ),
    }


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--results", type=Path, default=results.RESULTS)
    p.add_argument("--docs", type=Path, default=results.DOCS)
    p.add_argument("--check", action="store_true", help="compare with --docs, write nothing")
    args = p.parse_args()
    stale = []
    for name, text in pages(args.results).items():
        path = args.docs / name
        if args.check:
            if not path.exists() or path.read_text() != text:
                stale.append(str(path))
            continue
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        print("planning_report: wrote %s (%d lines)" % (path, text.count("\n")))
    if not args.check:
        picture = args.docs / "img" / "cluster_speedup.png"
        cluster_page.plot_speedups(
            results.load(args.results / "cluster_study.json")["cases"], picture
        )
        print("planning_report: wrote %s" % picture)
    if stale:
        sys.exit("planning_report: not rendered from the results: %s" % ", ".join(stale))


if __name__ == "__main__":
    main()
