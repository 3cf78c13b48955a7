#!/usr/bin/env python3
"""How much faster are EPP's plans than the baselines' (one static setting, or the best per step)
on the issue's headline case, as the planning core's simulator predicts them?

Runs the built `infinipipe-plan` on Wikipedia lengths, LLaMA-13B, A800, 8 stages, 80 GiB per
stage, batch 512, context 96K, 5 sampled steps, and writes benchmarks/results/
planning_comparison.json: per method its mean step time, speed-up, bubble, recompute, chunks and
waves; per step every method's time; EPP's planning time on one core (`taskset -c 0`, the least
of 3 runs); each checkpointing program on the schedules of EPP's plans over 10 steps; and what
the plans show. benchmarks/planning_report.py renders docs/planning.md from it. `--smoke` runs a
small case (batch 64, 2 steps) and renders the page into a temporary directory.

Usage: python3 benchmarks/experiments/planning_comparison.py [build/infinipipe-plan] [--smoke]
           [--output F]
"""

import datetime
import shutil
import sys
import tempfile
from pathlib import Path

# The benchmarks' shared code (benchmarks/lib) is one folder up.
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from lib import checkpoint_compare, plan_tool, planning_page, results
from lib.markdown import machine
from lib.plan_tool import BASELINES, HEADLINE, collect, mean, run_tool, times, tool_args

SMOKE = dict(HEADLINE, batch=64, steps=2)
TIMING_RUNS = 3
CHECKPOINT_STEPS = 10


def plan_means(by_step, steps):
    """A method's mean bubble, recompute, chunks and waves over the steps."""
    return dict(
        bubble=mean([by_step[i]["bubble_fraction"] for i in range(steps)]),
        recompute_s=mean([by_step[i]["recompute_s"] for i in range(steps)]),
        chunks=mean([by_step[i]["num_chunks"] for i in range(steps)]),
        waves=mean([by_step[i]["num_waves"] for i in range(steps)]),
    )


def method_rows(epp, static, best, steps):
    """Per method and kind: its settings, mean step time, speed-up over EPP and plan means."""
    epp_t = times(epp, steps)
    out = [
        dict(
            method="epp",
            kind="epp",
            feasible=True,
            settings=[epp[i]["setting_text"] for i in range(steps)],
            mean_step_s=mean(epp_t),
            speedup=1.0,
            **plan_means(epp, steps),
        )
    ]
    for m in BASELINES:
        for kind, table in (("static", static.get(m, {})), ("best", best.get(m, {}))):
            t = times(table, steps)
            if t is None:
                reason = next(
                    table[i].get("reason", "") for i in range(steps) if not table[i]["feasible"]
                )
                out.append(dict(method=m, kind=kind, feasible=False, reason=reason))
                continue
            out.append(
                dict(
                    method=m,
                    kind=kind,
                    feasible=True,
                    settings=sorted({table[i]["setting_text"] for i in range(steps)}),
                    mean_step_s=mean(t),
                    speedup=mean(t) / mean(epp_t),
                    **plan_means(table, steps),
                )
            )
    return out


def step_rows(epp, static, best, steps):
    """Per step: its tokens, EPP's time and each baseline's, static and per-step best."""

    def time(r):
        return r["step_time_s"] if r and r["feasible"] else None

    return [
        dict(
            step=i,
            tokens=epp[i]["tokens"],
            epp_s=epp[i]["step_time_s"],
            static={m: time(static.get(m, {}).get(i)) for m in BASELINES},
            best={m: time(best.get(m, {}).get(i)) for m in BASELINES},
        )
        for i in range(steps)
    ]


def observations(rows, epp, static, best, steps):
    """What the plans show: waves, the closest baseline, EPP's knobs, the baselines' uniform
    recompute, the busiest stage's compute (a bound on any plan of these chunks)."""
    epp_t = times(epp, steps)
    multi = [i for i in range(steps) if epp[i]["num_waves"] > 1]
    single = [i for i in range(steps) if i not in multi]
    margins = [
        (best[m][i]["step_time_s"] / epp_t[i] - 1, i, m)
        for m in BASELINES
        for i in range(steps)
        if best.get(m, {}).get(i) and best[m][i]["feasible"]
    ]
    closest = min(margins) if margins else None
    bound = [
        max(b - r for b, r in zip(epp[i]["busy_s"], epp[i]["recompute_s_per_stage"]))
        for i in range(steps)
    ]
    seq1f1b = times(static.get("seq1f1b", {}), steps)
    return dict(
        multi_wave_steps=multi,
        bubble_multi=mean([epp[i]["bubble_fraction"] for i in multi]) if multi else None,
        bubble_single=mean([epp[i]["bubble_fraction"] for i in single]) if single else None,
        closest=dict(step=closest[1], method=closest[2], margin=closest[0]) if closest else None,
        knobs=dict(
            token_cap=[i for i in range(steps) if epp[i]["setting"].get("token_cap")],
            strict_packing=[i for i in range(steps) if epp[i]["setting"].get("strict_packing")],
            drain_taper=[i for i in range(steps) if epp[i]["setting"].get("drain_chunks")],
            recompute=[i for i in range(steps) if epp[i]["recompute_s"] > 0],
        ),
        static_recompute=[
            dict(
                method=m,
                layers=static[m][0]["setting"]["uniform_recompute"],
                recompute_s=mean([static[m][i]["recompute_s"] for i in range(steps)]),
            )
            for m in BASELINES
            if static.get(m)
            and times(static[m], steps)
            and static[m][0]["setting"]["uniform_recompute"] > 0
        ],
        busiest_compute_s=mean(bound),
        seq1f1b_static_s=mean(seq1f1b) if seq1f1b else None,
        lowest_bubble=min(r["bubble_fraction"] for r in rows if r["feasible"]),
    )


def summarise(case, rows, plan_ms, pinned, worst_run, checkpoint_rows, command):
    """The results JSON: everything docs/planning.md's comparison shows, as numbers."""
    steps = case["steps"]
    epp, static, best = collect(rows, steps)
    if times(epp, steps) is None:
        sys.exit(
            "planning_comparison: EPP infeasible on some step: %s"
            % [epp[i].get("reason") for i in range(steps) if not epp[i]["feasible"]]
        )
    epp_t = times(epp, steps)
    model, cores = machine()
    return dict(
        case=case,
        command=command,
        machine="%s, %s cores" % (model, cores),
        date=datetime.date.today().isoformat(),
        methods=method_rows(epp, static, best, steps),
        steps=step_rows(epp, static, best, steps),
        per_step_worse={
            m: [
                dict(step=i, excess=epp_t[i] / best[m][i]["step_time_s"] - 1)
                for i in range(steps)
                if epp_t[i] > best[m][i]["step_time_s"] * (1 + 1e-9)
            ]
            for m in BASELINES
            if times(best.get(m, {}), steps)
        },
        planning_ms=dict(per_step=plan_ms, pinned=pinned, runs=TIMING_RUNS, worst_run=worst_run),
        checkpoint=checkpoint_compare.summarise(checkpoint_rows, case["seed"]),
        observations=observations(rows, epp, static, best, steps),
    )


def main():
    parser = plan_tool.parser(__doc__.splitlines()[0], "small case for CI (batch 64, 2 steps)")
    parser.add_argument(
        "--output",
        help="results JSON to write (default benchmarks/results/planning_comparison.json; "
        "a temporary directory with --smoke)",
    )
    args = plan_tool.parse(parser, "planning_comparison")
    case = SMOKE if args.smoke else HEADLINE
    command = [args.tool] + tool_args(case, "all")
    rows = run_tool(command)

    # Other work on the machine only ever adds to a wall-clock time, so each step's planning time
    # is the least over a few runs.
    pin = ["taskset", "-c", "0"] if shutil.which("taskset") else []
    runs = []
    for _ in range(TIMING_RUNS):
        epp_rows = run_tool(pin + [args.tool] + tool_args(case, "epp"))
        runs.append([r["plan_ms"] for r in epp_rows if r["method"] == "epp" and r["feasible"]])
    plan_ms = [min(times_of_step) for times_of_step in zip(*runs)]
    worst_run = max(max(run) for run in runs)

    # Tied against untied checkpointing, over more steps than the comparison.
    wide = dict(case, steps=max(case["steps"], CHECKPOINT_STEPS))
    checkpoint_rows = [r for r in run_tool([args.tool] + tool_args(wide, "epp")) if r["feasible"]]

    summary = summarise(
        case,
        rows,
        plan_ms,
        bool(pin),
        worst_run,
        checkpoint_rows,
        " ".join(["infinipipe-plan"] + command[1:]),
    )
    if args.smoke and not args.output:
        with tempfile.TemporaryDirectory() as tmp:
            results.write(Path(tmp) / "planning_comparison.json", summary)
            speed = results.load(results.RESULTS / "planning_speed.json")
            page = planning_page.render_page(summary, speed)
        epp = summary["methods"][0]
        print(
            "planning_comparison smoke: EPP %.3f s; the page renders (%d lines)"
            % (epp["mean_step_s"], page.count("\n"))
        )
        return
    output = args.output or results.RESULTS / "planning_comparison.json"
    results.write(output, summary)
    print("planning_comparison: wrote %s" % output)


if __name__ == "__main__":
    main()
