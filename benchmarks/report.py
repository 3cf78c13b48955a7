"""Renders docs/benchmarks.md and its plots from the experiments' results, through
benchmarks/templates/benchmarks.md, measuring nothing (planning_report.py renders the planning
pages).

    python benchmarks/report.py [--results benchmarks/results] [--docs docs]

The template holds the prose; every figure comes from a result file in --results (a section whose
file is missing says so). The sections' numbers are computed by lib/calibration_page.py,
lib/validation_page.py, lib/summary_page.py, the measured comparison's lib/measured_report.py and
lib/layout_report.py, lib/zero_bubble_report.py, and lib/gpu_report.py.
"""

from __future__ import annotations

import argparse
import string
from pathlib import Path

from lib.calibration_page import calibration_section
from lib.gpu_report import gpu_section
from lib.layout_report import layout_sections
from lib.measured_report import measured_section
from lib.results import DOCS, RESULTS, load
from lib.soak_report import BEGIN, END
from lib.soak_report import section as soak_section
from lib.summary_page import (
    cluster_section,
    horizon_section,
    machine,
    targets_section,
    timeline_section,
)
from lib.validation_page import time_outside_section, validation_section, with_repeats
from lib.zero_bubble_report import zero_bubble_section

HERE = Path(__file__).resolve().parent
TEMPLATES = HERE / "templates"


def text(lines: list[str]) -> str:
    return "\n".join(lines) + "\n"


def validation(results: Path, stem: str) -> tuple[dict | None, str, str]:
    """A validation run with its repeats, the profile it planned with, and that profile's table."""
    val = with_repeats(load(results / f"{stem}.json"), results, stem)
    if val is None:
        return None, "(not run)", f"No {stem}.json.\n"
    profile = Path(val["cost_model"])
    meta = load(results / profile.with_suffix(".meta.json").name)
    return val, str(profile), text(calibration_section(meta))


def reproduce_commands() -> str:
    """benchmarks/run_all.sh's full run, as it runs: the one list of commands."""
    script = (HERE / "run_all.sh").read_text().split("\n")
    start = next(i for i, line in enumerate(script) if line.startswith("R=benchmarks/results"))
    return "\n".join(script[start:]).strip()


def render(results: Path, docs: Path) -> str:
    meta = load(results / "cost_cpu.meta.json")
    cpp, cpp_profile, cpp_calibration = validation(results, "validation_cpp")
    python, python_profile, _ = validation(results, "validation")
    measured = load(results / "measured.json")
    packed_context = load(results / "measured_packed_context.json")
    cluster, headline = cluster_section(load(results / "cluster_study.json"))
    soak = load(results / "soak.json")
    values = dict(
        targets=text(targets_section(meta, python, measured, headline, (), (), packed_context)),
        calibration=text(calibration_section(meta)),
        cpp_profile=cpp_profile,
        cpp_calibration=cpp_calibration,
        cpp_validation=text(validation_section(cpp)),
        cpp_parts=text(time_outside_section(cpp)) if cpp else "",
        python_profile=python_profile,
        python_validation=text(validation_section(python)),
        measured=text(measured_section(measured, docs, packed_context)),
        layouts=text(layout_sections(results)),
        zero_bubble=text(zero_bubble_section(results)),
        horizon=text(horizon_section(load(results / "cpu_horizon.json"))),
        timeline=timeline_section(load(results / "timeline_cpu.json")),
        cluster=text(cluster),
        gpu=text(gpu_section(results, docs)),
        soak=text([BEGIN, *soak_section(soak, "img/soak.png", "benchmarks/results/soak.json"), END])
        if soak
        else "",
        commands=reproduce_commands(),
        machine=machine(meta),
    )
    return string.Template((TEMPLATES / "benchmarks.md").read_text()).substitute(values)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--results", type=Path, default=RESULTS)
    p.add_argument("--docs", type=Path, default=DOCS)
    args = p.parse_args()
    args.docs.mkdir(parents=True, exist_ok=True)
    page = render(args.results, args.docs)
    (args.docs / "benchmarks.md").write_text(page)
    print(f"wrote {args.docs / 'benchmarks.md'} ({page.count(chr(10))} lines)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
