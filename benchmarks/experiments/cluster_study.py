#!/usr/bin/env python3
"""EPP against the baselines at the paper's cluster scale, predicted by the simulator.

Runs the built `infinipipe-plan` (analytic A800 coefficients, Wikipedia lengths, batch 512,
80 GiB per stage) over LLaMA-7B/13B/30B, contexts 48K/96K/192K and 4/8 stages, and writes
docs/cluster_study.md, docs/img/cluster_speedup.png and benchmarks/results/cluster_study.json.
The plan tool's rows are summarised per case by lib/simulated_case.py and rendered by
lib/cluster_tables.py and lib/cluster_target.py. `--smoke` runs one small case for CI and writes
into a temporary directory only. `--balance` runs only the balanced-stages section (lib/
balance_study.py: LLaMA-7B, LLaMA-13B and LLaMA-3-8B at 96K on 8 stages, the even layer split and
the balanced one, and LLaMA-13B and LLaMA-3-8B on both with the spread head) and replaces that
section of the page and the results JSON's "balance".

Usage: python benchmarks/experiments/cluster_study.py [build/infinipipe-plan] [--smoke | --balance]
"""

import datetime
import os
import sys
import tempfile
import time
from pathlib import Path

# The benchmarks' shared code (benchmarks/lib) is one folder up.
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from lib import balance_study, plan_tool, results
from lib.cluster_tables import (
    case_name,
    cell,
    context_note,
    detail_table,
    infeasible_text,
    repeat_spread,
    speedup_table,
    spread_note,
)
from lib.cluster_target import TARGET, target_section
from lib.markdown import machine
from lib.plan_tool import BASELINES, HEADLINE, LABELS, tool_args
from lib.results import ROOT
from lib.simulated_case import run_case, timeline, traces_text

MODELS = ["llama-7b", "llama-13b", "llama-30b"]
CONTEXTS = [49152, 98304, 196608]
STAGES = [4, 8]
# One case of 10 steps took 8-40 s on the 2-core dev machine under `nice` and the time grows
# faster than the step count (the baselines' static choice weighs every setting on every step);
# 16 steps of all 18 cases took 459 s, well inside a 40-minute budget with room for load.
STEPS = 16
BASE = dict(
    distribution="wikipedia", batch=512, hardware="a800", memory_gib=80, seed=0, steps=STEPS
)
SMOKE = dict(BASE, model="llama-7b", stages=4, context=49152, batch=64, steps=2)


def markdown(cases, meta):
    """docs/cluster_study.md from the cases' results and the run's `meta`."""
    notes = {}
    text = [
        "# Cluster-scale study (simulated)\n\n",
        """Predicted step times of EPP and the baselines at the paper's scale, from the planning
core's discrete-event simulator with the built-in analytic A800 coefficients (FLOP counts over
datasheet and published efficiency figures; sources in src/cost/hardware.cc). These are
simulator predictions, not GPU measurements. Methods and their settings are those of
[planning.md](planning.md): baselines run one static setting for all steps (chosen over the
steps below); "per-step best" lets every step pick its own.

Settings: %s lengths, batch %d, %s, %g GiB per stage, %d sampled steps per case (seeds %d..%d,
the same for every case). Speed-up = baseline mean step time / EPP mean step time. Peak memory is
the maximum over stages and steps.

"""
        % (
            meta["case"]["distribution"],
            meta["case"]["batch"],
            meta["case"]["hardware"],
            meta["case"]["memory_gib"],
            meta["case"]["steps"],
            meta["case"]["seed"],
            meta["case"]["seed"] + meta["case"]["steps"] - 1,
        ),
        context_note(cases),
        spread_note(repeat_spread(cases)),
        "![EPP speed-up per case](img/cluster_speedup.png)\n\n## Speed-ups\n\n",
    ]
    text += [line + "\n" for line in speedup_table(cases)]
    for stages in sorted({c["stages"] for c in cases}):
        text.append("\n## %d stages\n\n" % stages)
        text += [
            line + "\n" for line in detail_table([c for c in cases if c["stages"] == stages], notes)
        ]
    if notes:
        text.append("\nInfeasible, with the tool's reason:\n\n")
        text += [
            "%d. %s\n" % (n, reason) for reason, n in sorted(notes.items(), key=lambda kv: kv[1])
        ]
    text.append("\n")
    text += target_section(cases)
    text += timeline_section(meta["timeline"])
    text.append(
        "\n## How to reproduce\n\n```\n%s\n```\n\nwhich runs, for every case,\n\n```\n%s\n```\n"
        % (meta["command"], meta["tool_command"])
    )
    text.append(
        "\nMachine: %s, %s cores. Date: %s. The study took %.0f s (one process at a time, `nice -n 19`).\n"
        % (meta["machine"], meta["cores"], meta["date"], meta["seconds"])
    )
    return "".join(text)


def timeline_section(t):
    """The page's section on the simulated timeline of one step (`t`, from timeline())."""
    c = t["case"]
    return [
        "\n## One step as a timeline\n\n",
        "![EPP and static Seq1F1B, simulated](img/timeline_sim_13b.png)\n\n",
        "The first step (seed %d) of [planning.md](planning.md)'s case: %s, %s, %d stages, batch %d, context %dK; "
        "the static Seq1F1B setting is the one chosen over that case's %d steps. %s. One row per stage; "
        "sends are the thin strips under the rows.\n\n```\n%s\n```\n"
        % (
            c["seed"],
            c["model"],
            c["hardware"],
            c["stages"],
            c["batch"],
            c["context"] // 1024,
            c["steps"],
            traces_text(t["traces"], "%.3f"),
            "\n".join(t["commands"]),
        ),
    ]


def vertical_note(ax, x, text, color, **style):
    """A note standing up from the bottom of the bars' axis at `x`."""
    ax.text(x, 0.05, text, rotation=90, ha="center", va="bottom", fontsize=7, color=color, **style)


def plot_speedups(cases, path):
    """Bars of EPP's speed-up over each static baseline, one panel per stage count."""
    import matplotlib

    matplotlib.use("Agg")  # no display on CI machines
    import matplotlib.pyplot as plt

    stage_counts = sorted({c["stages"] for c in cases})
    ratios = [
        s["speedup"]
        for c in cases
        for s in c["result"].get("methods", {}).values()
        if "speedup" in s
    ]
    top = 1.25 * max(ratios + [TARGET["speedup"]])  # room for the value labels and the legend
    fig, axes = plt.subplots(
        len(stage_counts), 1, figsize=(11, 3.4 * len(stage_counts)), squeeze=False
    )
    width = 0.8 / len(BASELINES)
    for ax, stages in zip(axes[:, 0], stage_counts):
        group = [c for c in cases if c["stages"] == stages]
        for i, c in enumerate(group):
            if not c["result"].get("methods", {}).get("epp", {}).get("feasible"):
                vertical_note(
                    ax,
                    i,
                    "EPP " + infeasible_text(c, c["result"].get("methods")).replace(" steps", ""),
                    "grey",
                    bbox=dict(facecolor="white", edgecolor="none", pad=1),
                )
        for j, m in enumerate(BASELINES):
            for i, c in enumerate(group):
                x = i + (j - (len(BASELINES) - 1) / 2) * width
                s = c["result"].get("methods", {}).get(m + " static", {})
                if "speedup" in s:
                    ax.bar(
                        x, s["speedup"], width, color="C%d" % j, label=LABELS[m] if i == 0 else None
                    )
                    ax.text(
                        x, s["speedup"], "%.2f" % s["speedup"], ha="center", va="bottom", fontsize=6
                    )
                elif c["result"]["methods"]["epp"]["feasible"]:  # say so instead of drawing nothing
                    ax.bar(x, 0, width, color="C%d" % j, label=LABELS[m] if i == 0 else None)
                    vertical_note(ax, x, "infeasible", "C%d" % j)
        ax.axhline(1.0, color="black", linewidth=0.6)
        if stages == TARGET["stages"]:
            ax.axhline(
                TARGET["speedup"],
                color="grey",
                linestyle="--",
                linewidth=0.8,
                label="target %.1fx at %dK" % (TARGET["speedup"], TARGET["context"] // 1024),
            )
        ax.set_ylim(0, top)
        ax.set_xlim(-0.5, len(group) - 0.5)
        ax.set_xticks(range(len(group)))
        ax.set_xticklabels([case_name(c) for c in group], fontsize=8)
        ax.set_ylabel("EPP speed-up over static")
        ax.set_title("%d stages (simulated, analytic A800)" % stages, loc="left", fontsize=10)
        ax.legend(fontsize=7, ncol=4, loc="upper left")
    fig.tight_layout()
    fig.savefig(path, dpi=150)
    plt.close(fig)


def write_all(cases, meta, out_dir, tool):
    """The page, its two pictures and the results JSON under `out_dir`; their paths."""
    paths = {
        "md": os.path.join(out_dir, "docs", "cluster_study.md"),
        "png": os.path.join(out_dir, "docs", "img", "cluster_speedup.png"),
        "json": os.path.join(out_dir, "benchmarks", "results", "cluster_study.json"),
        "timeline": os.path.join(out_dir, "docs", "img", "timeline_sim_13b.png"),
    }
    for p in paths.values():
        os.makedirs(os.path.dirname(p), exist_ok=True)
    meta["timeline"] = timeline(tool, meta["timeline_case"], paths["timeline"])
    text = markdown(cases, meta)
    # The sections written apart (--balance: balanced stages; cluster_sp_study.py: with sequence
    # parallelism; flexsp_study.py: against FlexSP) stay as they were.
    old = open(paths["md"]).read() if os.path.exists(paths["md"]) else ""
    for name in (balance_study.MARK, "sp-study", "flexsp-study"):
        start, end = f"<!-- {name}: start -->", f"<!-- {name}: end -->"
        if start in old and end in old:
            kept = old[old.index(start) : old.index(end) + len(end)]
            text = text.rstrip("\n") + "\n\n" + kept + "\n"
    with open(paths["md"], "w") as f:
        f.write(text)
    kept = (results.load(paths["json"]) or {}).get("balance")  # --balance's, written apart
    results.write(
        paths["json"], dict({"meta": meta, "cases": cases}, **({"balance": kept} if kept else {}))
    )
    plot_speedups(cases, paths["png"])
    return paths


def splice(old, section, mark, before):
    """`old` page text with the section between `mark`'s markers replaced by `section`, or
    inserted before the marker `before` (appended when neither is there)."""
    start, end = f"<!-- {mark}: start -->", f"<!-- {mark}: end -->"
    if start in old and end in old:
        return old[: old.index(start)] + section + old[old.index(end) + len(end) + 1 :]
    at = f"<!-- {before}: start -->"
    if at in old:
        return old[: old.index(at)] + section + "\n" + old[old.index(at) :]
    return old.rstrip("\n") + "\n\n" + section


def run_balance(tool):
    """The balanced-stages section alone, spliced into the page and the results JSON."""
    started = time.monotonic()
    cases = balance_study.run(tool, BASE, log=lambda m: print(m, file=sys.stderr))
    model, cores = machine()
    case = dict(BASE, model="MODEL", stages=8, context=98304)
    meta = dict(
        BASE,
        context=98304,
        stages=8,
        seconds=time.monotonic() - started,
        machine=model,
        cores=cores,
        date=datetime.date.today().isoformat(),
        command="nice -n 10 .venv/bin/python benchmarks/experiments/cluster_study.py build/infinipipe-plan "
        "--balance",
        tool_command=" ".join(["infinipipe-plan"] + tool_args(case, "all"))
        + " [--layers-per-stage balanced] [--spread-head]",
    )
    path = os.path.join(ROOT, "benchmarks", "results", "cluster_study.json")
    data = results.load(path) or {}
    data["balance"] = {"meta": meta, "cases": cases}
    results.write(path, data)
    md = os.path.join(ROOT, "docs", "cluster_study.md")
    text = "".join(balance_study.section(cases, meta))
    with open(md) as f:
        old = f.read()
    with open(md, "w") as f:
        f.write(splice(old, text, balance_study.MARK, "sp-study"))
    print("cluster_study --balance: %d cases in %.0f s" % (len(cases), meta["seconds"]))


def main():
    parser = plan_tool.parser(
        __doc__.splitlines()[0], "one small case for CI, written to a temp dir"
    )
    parser.add_argument(
        "--balance", action="store_true", help="only the balanced-stages section (issue 13)"
    )
    args = plan_tool.parse(parser, "cluster_study")
    if args.balance:
        run_balance(args.tool)
        return
    grid = (
        [SMOKE]
        if args.smoke
        else [
            dict(BASE, model=m, stages=s, context=c)
            for s in STAGES
            for m in MODELS
            for c in CONTEXTS
        ]
    )
    started = time.monotonic()
    cases = []
    for case in grid:
        result = run_case(args.tool, case)
        cases.append(dict(case, result=result))
        epp = result.get("methods", {}).get("epp", {})
        print(
            "cluster_study: %s: %.1f s, EPP %s"
            % (
                case_name(case),
                result["seconds"],
                "%.3f s" % epp["mean_step_s"] if epp.get("feasible") else "infeasible",
            ),
            file=sys.stderr,
        )
    model, cores = machine()
    meta = {
        "case": grid[0],
        "seconds": time.monotonic() - started,
        "machine": model,
        "cores": cores,
        "date": datetime.date.today().isoformat(),
        "timeline_case": SMOKE if args.smoke else HEADLINE,
        "command": "nice -n 19 .venv/bin/python benchmarks/experiments/cluster_study.py build/infinipipe-plan",
        "tool_command": " ".join(
            ["infinipipe-plan"]
            + tool_args(dict(grid[0], model="MODEL", stages="STAGES", context="CONTEXT"), "all")
        ),
    }
    if args.smoke:
        with tempfile.TemporaryDirectory() as tmp:
            write_all(cases, meta, tmp, args.tool)
        c = cases[0]["result"]
        ratios = (
            ", ".join(
                "%s %s"
                % (LABELS[m], cell(c["methods"][m + " static"], "speedup", "%.2fx") or "infeasible")
                for m in BASELINES
            )
            if "methods" in c
            else c["error"]
        )
        print(
            "cluster_study smoke: %s, EPP %s; speed-up over static %s; %.1f s"
            % (
                case_name(cases[0]),
                cell(c.get("methods", {}).get("epp", {}), "mean_step_s", "%.3f s") or "infeasible",
                ratios,
                meta["seconds"],
            )
        )
        return
    paths = write_all(cases, meta, ROOT, args.tool)
    print(
        "cluster_study: %d cases in %.0f s; wrote %s"
        % (len(cases), meta["seconds"], ", ".join(os.path.relpath(p, ROOT) for p in paths.values()))
    )


if __name__ == "__main__":
    main()
