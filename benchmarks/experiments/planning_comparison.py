#!/usr/bin/env python3
"""EPP against static and per-step-best baselines, predicted by the planning core's simulator.

Runs the built `infinipipe-plan` tool on the issue's headline case (Wikipedia lengths, LLaMA-13B,
A800, 8 stages, 80 GiB per stage, batch 512, context 96K, 5 sampled steps), computes the mean
step times and the speed-ups of EPP, measures EPP's planning time on one core (`taskset -c 0`),
and writes docs/planning.md. `--smoke` runs a small case for CI and writes nothing unless
--output is given.

Usage: python3 benchmarks/experiments/planning_comparison.py [build/infinipipe-plan] [--smoke] [--output F]
"""

import datetime
import json
import shutil
import sys
from pathlib import Path

# The benchmarks' shared code (benchmarks/lib) is one folder up.
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from lib import plan_tool
from lib.checkpoint_compare import checkpoint_section
from lib.markdown import machine, table_head
from lib.plan_tool import (
    BASELINES,
    HEADLINE,
    LABELS,
    collect,
    mean,
    run_tool,
    setting_text,
    times,
    tool_args,
)
from lib.results import DOCS

SMOKE = dict(HEADLINE, batch=64, steps=2)
# The page ends with sections written by hand (the plan tool's own-lengths options and the
# planner's report, with a run on real lengths that are not in the repository): a run rewrites
# the page above this line and keeps the rest.
HAND_WRITTEN = "<!-- Written by hand below this line; planning_comparison.py keeps it. -->"
TIMING_RUNS = 3
CHECKPOINT_STEPS = 10


def fmt_ratio(a, b):
    return "%.2fx" % (b / a) if a and b else "n/a"


def plan_means(by_step, steps):
    """The table cells of a method's mean bubble, recompute, chunks and waves over the steps."""
    return "%.1f%% | %.2f | %.0f | %.1f" % (
        100 * mean([by_step[i]["bubble_fraction"] for i in range(steps)]),
        mean([by_step[i]["recompute_s"] for i in range(steps)]),
        mean([by_step[i]["num_chunks"] for i in range(steps)]),
        mean([by_step[i]["num_waves"] for i in range(steps)]),
    )


def report(case, rows, plan_ms_one_core, pinned, command, plan_ms_worst_run, checkpoint_rows):
    steps = case["steps"]
    epp, static, best = collect(rows, steps)
    epp_t = times(epp, steps)
    if epp_t is None:
        sys.exit(
            "planning_comparison: EPP infeasible on some step: %s"
            % [epp[i].get("reason") for i in range(steps) if not epp[i]["feasible"]]
        )
    lines = []
    summary = {"epp_mean_s": mean(epp_t), "ratios": {}, "per_step_worse": {}}

    lines += table_head(
        "method",
        "setting",
        "mean step time (s)",
        "EPP speed-up",
        "bubble",
        "recompute (s)",
        "chunks",
        "waves",
    )
    lines.append(
        "| EPP | per step: %s | %.3f | 1.00x | %s |"
        % (
            "; ".join(setting_text(epp[i]) for i in range(steps)),
            mean(epp_t),
            plan_means(epp, steps),
        )
    )
    for m in BASELINES:
        for kind, table in (("static", static.get(m, {})), ("per-step best", best.get(m, {}))):
            t = times(table, steps)
            if t is None:
                reason = next(
                    table[i].get("reason", "") for i in range(steps) if not table[i]["feasible"]
                )
                lines.append(
                    "| %s (%s) | infeasible: %s | | | | | | |"
                    % (LABELS[m], kind, reason.replace("|", "/"))
                )
                summary["ratios"]["%s %s" % (m, kind)] = None
                continue
            ratio = mean(t) / mean(epp_t)
            summary["ratios"]["%s %s" % (m, kind)] = ratio
            settings = sorted({setting_text(table[i]) for i in range(steps)})
            setting = settings[0] if kind == "static" else "per step: " + "; ".join(settings)
            lines.append(
                "| %s (%s) | %s | %.3f | %.2fx | %s |"
                % (LABELS[m], kind, setting, mean(t), ratio, plan_means(table, steps))
            )
            if kind == "per-step best":
                summary["per_step_worse"][m] = [
                    i for i in range(steps) if epp_t[i] > t[i] * (1 + 1e-9)
                ]

    step_lines = table_head(
        "step",
        "tokens",
        "EPP (s)",
        *["%s static / best (speed-up)" % LABELS[m] for m in BASELINES],
    )
    for i in range(steps):
        cells = []
        for m in BASELINES:
            s, b = static.get(m, {}).get(i), best.get(m, {}).get(i)

            def cell(r):
                return (
                    "%.3f (%s)" % (r["step_time_s"], fmt_ratio(epp_t[i], r["step_time_s"]))
                    if r and r["feasible"]
                    else "infeasible"
                )

            cells.append("%s / %s" % (cell(s), cell(b)))
        step_lines.append(
            "| %d | %d | %.3f | %s |" % (i, epp[i]["tokens"], epp_t[i], " | ".join(cells))
        )

    summary["plan_ms_one_core"] = plan_ms_one_core
    summary["plan_ms_worst_run"] = plan_ms_worst_run
    model, cores = machine()
    text = []
    text.append("# Planning: EPP against the baselines\n")
    text.append("""Predicted step times from the planning core (analytic cost model, discrete-event simulator),
not measured on GPUs. Every method is built from the same chunking, scheduling, checkpointing and
simulation parts, so the comparison is about the plans only.

## Methods and settings

- **EPP** (elastic pipeline parallelism), planned per step by searching its knobs: the slice
  count K of the cost-balanced mesh of the longest sequence (1..64: every K to 16, every other
  to 32, every fourth beyond; never slices under 128 tokens); a chunk token cap in {none, 16384,
  8192, 4096, 2048, 1024} (short sequences packed under min(T_m, cap), mesh slices longer than
  the cap cut into equal-cost pieces); and packing that relaxes the time target T_t when a
  sequence fits nowhere (the paper's step 4) or strictly never does ("strict"). Long sequences
  are cut along the mesh, tails seed hybrid chunks, packed chunks run lightest first. The search
  also weighs the baselines' chunkings at their static candidates below ("seq1f1b chunks ...",
  "chunkflow chunks ..."), planned with EPP's waves and recompute, so no baseline's chunking
  beats EPP on a step in simulation. One wave
  when everything fits without recompute, else recompute (stage-aware) and, when it can win,
  waves by the grouping DP. Waves are tried back to back and overlapped (each wave's warm-up
  forwards placed between the last backwards of the previous wave's cool-down, as one 1F1B over
  both would run them: a fill and a drain fewer per wave, but the two waves share memory where
  they meet); the faster in simulation, with its recompute, is kept. The search ranks settings
  by a bound (busiest stage plus the first
  chunk's fill and the last chunk's drain; exact when the pipeline never stalls), simulates them
  best first and stops when no bound beats the best plan found; recompute and grouping, the
  expensive steps, go to at most 6 and 2 settings of each family (the sequence processor's, the
  baselines'). The winner then tries drain tapers (the short
  sequences of its last 8..64 packed chunks packed 2 or 4 times finer, so the pipeline drains
  faster) and its recompute is the fastest in simulation of the tied greedy, the untied greedy
  and the tied integer program (CBC, 50 ms limit): see "Checkpointing" below.
- **Baselines**, as their users run them: one setting for the whole run, chosen as the one with
  the least total predicted time over the evaluated steps among the candidates below, with
  uniform checkpointing at the count the worst step needs.
  - batch-level: whole sequences packed into micro-batches of a token cap in
    {1, 1.25, 1.5, 2, 3, 4} x the longest sequence of all steps (rounded up to 1024), 1F1B;
  - Seq1F1B: micro-batches packed the same way (same caps), each cut into k in {1, 2, 4, 8, 16, 32}
    slices of equal forward cost, sequence-level 1F1B;
  - ChunkFlow: fixed chunks of {1024, ..., 65536} tokens, long sequences cut into chunks.
  "Per-step best" lets every step pick its own candidate and its own smallest recompute count:
  a more generous comparison than any real run. Its candidates also include caps sized from
  the step's own longest sequence.
""")
    text.append("\n## Result\n\n")
    text.append(
        "Case: %s lengths, %s, %s, %d stages, %g GiB per stage (model state with mixed-precision "
        "Adam inside it), batch %d, context %d, %d steps (seeds %d..%d).\n"
        % (
            case["distribution"],
            case["model"],
            case["hardware"],
            case["stages"],
            case["memory_gib"],
            case["batch"],
            case["context"],
            steps,
            case["seed"],
            case["seed"] + steps - 1,
        )
    )
    text.append("\n")
    text.extend(line + "\n" for line in lines)
    text.append("\nSpeed-up = baseline mean step time / EPP mean step time.\n\nPer step:\n\n")
    text.extend(line + "\n" for line in step_lines)
    worse = {m: s for m, s in summary["per_step_worse"].items() if s}
    text.append(
        "\nEPP slower than a baseline's per-step best on: %s.\n"
        % (
            ", ".join("%s steps %s" % (LABELS[m], s) for m, s in worse.items())
            if worse
            else "no step"
        )
    )
    text.append(
        "\nEPP planning time (the whole search: chunkings, simulations, recompute, grouping, "
        "checkpoint choice) per step, %s, wall clock, the least of %d runs: mean %.0f ms, max %.0f ms "
        "(slowest single run: %.0f ms).\n"
        % (
            "one core (`taskset -c 0`)" if pinned else "not pinned (taskset missing)",
            TIMING_RUNS,
            mean(plan_ms_one_core),
            max(plan_ms_one_core),
            summary["plan_ms_worst_run"],
        )
    )
    text.extend(checkpoint_section(checkpoint_rows, case["seed"]))
    text.append("\n## Against the targets\n\n")
    targets = [
        ("static Seq1F1B", summary["ratios"].get("seq1f1b static"), 1.25),
        ("static batch-level", summary["ratios"].get("batch static"), 1.6),
    ]
    for name, ratio, goal in targets:
        text.append(
            "- EPP vs %s: %s (target >= %.2fx): %s\n"
            % (
                name,
                "n/a" if ratio is None else "%.2fx" % ratio,
                goal,
                "met" if ratio is not None and ratio >= goal else "not met",
            )
        )
    text.append(
        "- EPP never slower than any baseline's per-step best: %s\n"
        % (
            "met"
            if not worse
            else "not met (%s)"
            % ", ".join(
                "%s on %d of %d steps, by up to %.1f%%"
                % (
                    LABELS[m],
                    len(s),
                    steps,
                    100 * max(epp_t[i] / best[m][i]["step_time_s"] - 1 for i in s),
                )
                for m, s in worse.items()
            )
        )
    )
    text.append(
        "- EPP planning under 1 s per step on one core: %s (max %.0f ms)\n"
        % (
            "met" if plan_ms_one_core and max(plan_ms_one_core) < 1000 else "not met",
            max(plan_ms_one_core),
        )
    )
    multi = [i for i in range(steps) if epp[i]["num_waves"] > 1]
    text.append("\nObservations from the plans:\n\n")
    if multi:
        single = [i for i in range(steps) if i not in multi]
        text.append(
            "- EPP needed several waves (the whole step did not fit one pipeline without "
            "recompute) on steps %s: bubble %.1f%% there against %.1f%% on the other steps.\n"
            % (
                multi,
                100 * mean([epp[i]["bubble_fraction"] for i in multi]),
                100 * mean([epp[i]["bubble_fraction"] for i in single]) if single else float("nan"),
            )
        )
    margins = [
        (best[m][i]["step_time_s"] / epp_t[i] - 1, i, m)
        for m in BASELINES
        for i in range(steps)
        if best.get(m, {}).get(i) and best[m][i]["feasible"]
    ]
    if margins:
        closest = min(margins)
        text.append(
            "- Closest per-step comparison: step %d, %s's per-step best, %.2f%% %s than EPP.\n"
            % (
                closest[1],
                LABELS[closest[2]],
                100 * abs(closest[0]),
                "slower" if closest[0] >= 0 else "faster",
            )
        )
    knobs = [
        ("a chunk token cap", [i for i in range(steps) if epp[i]["setting"].get("token_cap")]),
        ("strict packing", [i for i in range(steps) if epp[i]["setting"].get("strict_packing")]),
        ("a drain taper", [i for i in range(steps) if epp[i]["setting"].get("drain_chunks")]),
        ("recompute", [i for i in range(steps) if epp[i]["recompute_s"] > 0]),
    ]
    text.append(
        "- EPP's search chose %s.\n"
        % "; ".join(
            "%s on %s" % (name, "steps %s" % chosen if chosen else "no step")
            for name, chosen in knobs
        )
    )
    for m in BASELINES:
        t = static.get(m, {})
        if (
            t
            and all(t[i]["feasible"] for i in range(steps))
            and t[0]["setting"]["uniform_recompute"] > 0
        ):
            text.append(
                "- Static %s recomputes %d layer(s) per stage on every step, %.2f s of recompute per "
                "step summed over stages, because its worst step needs it.\n"
                % (
                    LABELS[m],
                    t[0]["setting"]["uniform_recompute"],
                    mean([t[i]["recompute_s"] for i in range(steps)]),
                )
            )
    bound = [
        max(b - r for b, r in zip(epp[i]["busy_s"], epp[i]["recompute_s_per_stage"]))
        for i in range(steps)
    ]
    text.append(
        "- Compute of the busiest stage in EPP's plans, recompute left out (no plan of these chunks "
        "can be faster): mean %.3f s, so EPP is within %.1f%% of it, and no method could be more than "
        "%.2fx faster than static Seq1F1B here unless it ran less compute on that stage.\n"
        % (
            mean(bound),
            100 * (mean(epp_t) / mean(bound) - 1),
            (mean(times(static["seq1f1b"], steps)) / mean(bound))
            if times(static.get("seq1f1b", {}), steps)
            else float("nan"),
        )
    )
    text.append(
        "- Lowest bubble of any plan: %.1f%%. With even layer splits the last stage also "
        "runs the LM head, so the other stages wait for it whatever the chunking.\n"
        % (100 * min(r["bubble_fraction"] for r in rows if r["feasible"]))
    )
    text.append(
        "\n## How to reproduce\n\n```\n%s\n```\n\nThe table comes from\n\n```\n%s\n```\n"
        % ("python3 benchmarks/experiments/planning_comparison.py build/infinipipe-plan", command)
    )
    text.append(
        "\nMachine: %s, %s cores. Date: %s.\n" % (model, cores, datetime.date.today().isoformat())
    )
    return "".join(text), summary


def hand_written_tail(path):
    """The part of the page at `path` from HAND_WRITTEN on ("" when there is none)."""
    try:
        with open(path) as f:
            text = f.read()
    except FileNotFoundError:
        return ""
    at = text.find(HAND_WRITTEN)
    return "\n" + text[at:] if at >= 0 else ""


def main():
    parser = plan_tool.parser(__doc__.splitlines()[0], "small case for CI (batch 64, 2 steps)")
    parser.add_argument(
        "--output", help="markdown to write (default docs/planning.md, none with --smoke)"
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

    markdown, summary = report(
        case,
        rows,
        plan_ms,
        bool(pin),
        " ".join(["infinipipe-plan"] + command[1:]),
        worst_run,
        checkpoint_rows,
    )
    output = args.output or (None if args.smoke else DOCS / "planning.md")
    if output:
        tail = hand_written_tail(output)
        with open(output, "w") as f:
            f.write(markdown + tail)
    print(json.dumps(summary, indent=1))


if __name__ == "__main__":
    main()
