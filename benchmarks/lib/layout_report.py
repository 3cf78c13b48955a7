"""docs/benchmarks.md on the measured comparison under a parallel layout (measured_comparison.py
--sequence / --replicas; results/measured_sp*.json and measured_dp*.json): one subsection per
run, with EPP's speed-ups over the same layout's baselines, peak memory per rank and the
all-to-alls' share of the step."""

from __future__ import annotations

import statistics
from pathlib import Path

from lib.markdown import table_head
from lib.measured_report import LABELS, static_setting_texts
from lib.results import MIB, load

BASELINES = ("seq1f1b", "batch", "chunkflow")


def layout_runs(results: Path) -> list[tuple[Path, dict, list[dict]]]:
    """The layout runs kept in `results` (SP runs first, then data-parallel ones), each with
    its repeats: measured_sp2.json and measured_sp2_repeat_*.json."""
    paths = sorted(results.glob("measured_sp*.json")) + sorted(results.glob("measured_dp*.json"))
    mains = [path for path in paths if "_repeat_" not in path.name]
    return [
        (path, load(path), [load(r) for r in sorted(results.glob(f"{path.stem}_repeat_*.json"))])
        for path in mains
    ]


def layout_name(layout: dict) -> str:
    """'pipeline 2 x SP 2' (the degrees above one, pipeline first)."""
    parts = [f"pipeline {layout['pipeline']}"]
    if layout["sequence"] > 1:
        parts.append(f"SP {layout['sequence']}")
    if layout["data"] > 1:
        parts.append(f"data {layout['data']}")
    return " x ".join(parts)


def heading(layout: dict) -> str:
    if layout["sequence"] > 1 and layout["data"] > 1:
        kind = "With sequence parallelism and data-parallel replicas"
    elif layout["sequence"] > 1:
        kind = "With sequence parallelism"
    else:
        kind = "With data-parallel replicas"
    return f"### {kind} ({layout_name(layout)})"


def command(res: dict, path: Path) -> str:
    """The command that made `res` (its case's flags)."""
    case, layout = res["case"], res["case"]["layout"]
    flags = []
    if layout["sequence"] > 1:
        flags.append(f"--sequence {layout['sequence']}")
    if layout["data"] > 1:
        flags.append(f"--replicas {layout['data']}")
    if layout["zero"] != 1:
        flags.append(f"--zero {layout['zero']}")
    defaults = dict(steps=6, batch=16, context=8192, budget_mib=192, seed=0)
    for key, value in defaults.items():
        if case[key] != value:
            flags.append(f"--{key.replace('_', '-')} {case[key]:g}")
    return (
        f".venv/bin/torchrun --nproc_per_node={layout['processes']} "
        f"benchmarks/experiments/measured_comparison.py {' '.join(flags)} --cost-model {case['cost_model']} "
        f"--output benchmarks/results/{path.name}"
    )


def per_rank_peaks(rows: list[dict]) -> list[float]:
    """Each rank's peak memory over the steps (MiB)."""
    ranks = len(rows[0]["memory_bytes"])
    return [max(r["memory_bytes"][k] for r in rows) / MIB for k in range(ranks)]


def layout_section(res: dict, path: Path, repeats: list[dict] = ()) -> list[str]:
    """The subsection of one layout run."""
    case, layout, s = res["case"], res["case"]["layout"], res["summary"]
    rows = res["rows"]
    n = layout["processes"]
    tokens = sum(map(sum, res["lengths"]))
    zero = (
        f"ZeRO-1 over each stage's gradient group of {layout['sequence'] * layout['data']} ranks "
        "(torch's ZeroRedundancyOptimizer)"
        if layout["zero"] == 1 and layout["sequence"] * layout["data"] > 1
        else "no optimizer sharding"
    )
    out = [
        heading(layout),
        "",
        f"The same comparison on {n} processes (Gloo, one thread each) in the layout "
        f"{layout_name(layout)}: "
        + (
            f"{layout['sequence']} Ulysses sequence-parallel ranks inside each stage (a chunk's "
            "tokens split over them, an all-to-all around every layer's attention), "
            if layout["sequence"] > 1
            else ""
        )
        + (
            f"{layout['data']} data-parallel replicas (the batch split over them by predicted "
            "cost, each replica planning its share), "
            if layout["data"] > 1
            else ""
        )
        + f"{zero}. Every same-executor method runs in this layout; the baselines' static "
        "settings are the ones `infinipipe-plan` picks over these steps with the per-rank cost "
        "model the trainer plans with (`"
        + f"--sp {layout['sequence']} --dp {layout['data']} --zero {layout['zero']} "
        + f"--gpus-per-node {layout['gpus_per_node']}`"
        + ", the processes on this host as one node). The memory budget is per rank.",
        "",
        f"This machine has 2 cores, so the {n} processes are oversubscribed (and other work "
        "shared the cores during the run): a rank is often descheduled while a peer waits for "
        "it. The absolute tokens/s are therefore not comparable with the 2-rank table above, "
        "nor with the plans' predictions; the ratios are fair, because the methods run "
        "interleaved step by step (every method's step i, then step i + 1) and meet the same "
        "machine."
        + (
            " The all-to-all time is the executor's clock around each all-to-all, so it "
            "includes waiting for the other sequence rank to reach it."
            if layout["sequence"] > 1
            else ""
        ),
        "",
        f"Case: {case['model']}; {case['steps']} steps of {case['batch']} sequences from the "
        f"Wikipedia length distribution, truncated to {case['context']} tokens (seeds "
        f"{case['seed']}..{case['seed'] + case['steps'] - 1}; {tokens} tokens in all, longest "
        f"{max(map(max, res['lengths']))}); memory budget {case['budget_mib']:g} MiB per rank, "
        "model state included.",
        "",
        *table_head(
            "method",
            "setting",
            "tokens/s",
            "EPP speed-up",
            "peak memory per rank (MiB)",
            "within budget",
            "pipeline efficiency",
            "all-to-all share",
        ),
    ]
    settings = static_setting_texts(res)
    settings["epp"] = "planned per step"
    settings["unpipelined"] = "rank 0 alone, no layout"
    for name in ("epp", *BASELINES):
        e = s[name]
        peaks = per_rank_peaks(rows[name])
        share = f"{100 * e['all_to_all_share']:.1f}%" if "all_to_all_share" in e else "n/a"
        over = e["peak_memory_mib"] - case["budget_mib"]
        fits = (
            "yes"
            if e["within_budget"]
            else f"**no** (+{over:.2f} MiB, {100 * over / case['budget_mib']:+.2f}%)"
        )
        out.append(
            f"| {LABELS[name]} | {settings[name]} | {e['tokens_per_s']:.0f} | "
            f"{e['epp_speedup']:.2f}x | {' / '.join(f'{p:.1f}' for p in peaks)} | {fits} | "
            f"{100 * e['pipeline_efficiency']:.0f}% | {share} |"
        )
    omitted = res["torch_config"].get("omitted", "not run")
    out.append(f"| {LABELS['torch_1f1b']} | n/a | n/a | n/a | n/a | n/a | n/a | n/a |")
    e = s["unpipelined"]
    out += [
        f"| {LABELS['unpipelined']} | {settings['unpipelined']} | {e['tokens_per_s']:.0f} | "
        f"{e['epp_speedup']:.2f}x | n/a | n/a | n/a | n/a |",
        "",
        "Peak memory per rank: measured activation peak (saved tensors, K/V buffers, checkpoint "
        "inputs) plus the rank's model state (weights, gradients and the optimizer state it "
        "keeps, measured in the optimizer), ranks in order "
        + ", ".join(
            f"{k} (stage {(k // layout['sequence']) % layout['pipeline']}"
            + (f", sequence rank {k % layout['sequence']}" if layout["sequence"] > 1 else "")
            + (
                f", replica {k // (layout['sequence'] * layout['pipeline'])}"
                if layout["data"] > 1
                else ""
            )
            + ")"
            for k in range(n)
        )
        + (
            ". All-to-all share = the all-to-alls' seconds over the run's wall time, mean over "
            "the ranks (they run inside the forward and backward compute that the pipeline "
            "efficiency counts)"
            if layout["sequence"] > 1
            else ""
        )
        + ". torch.distributed.pipelining: "
        + omitted
        + ". The unpipelined "
        "model runs on one process without the layout (the reference for the work and for the "
        "first step's loss).",
        "",
    ]
    memory = memory_text(res)
    if memory:
        out += [memory, ""]
    out += [speedup_text(res), ""]
    if repeats:
        out += repeats_table(res, path, repeats)
    out += ["```bash", command(res, path), "```", ""]
    return out


def memory_text(res: dict) -> str:
    """The memory peaks' parts: measured activation over the plan's prediction per rank, and
    the model state each rank keeps (when the run recorded them)."""
    rows = res["rows"]
    if "activation_bytes" not in rows["epp"][0]:
        return ""
    parts = []
    for m in ("epp", *BASELINES):
        ratios = [
            a / p
            for r in rows[m]
            for a, p in zip(r["activation_bytes"], r["predicted_activation_bytes"])
            if p > 0
        ]
        parts.append(f"{LABELS[m] if m != 'epp' else 'EPP'} {min(ratios):.3f}-{max(ratios):.3f}")
    state = rows["epp"][0]["model_state_bytes"]
    text = (
        "Measured activation peak over the plan's per-rank prediction, over every rank and "
        "step: "
        + ", ".join(parts)
        + ". Model state per rank (weights, gradients, this rank's AdamW moments), ranks in "
        "order: " + " / ".join(f"{b / MIB:.2f}" for b in state) + " MiB."
    )
    s, budget = res["summary"], res["case"]["budget_mib"]
    over = []
    for m in ("epp", *BASELINES):
        if s[m]["within_budget"]:
            continue
        # The predicted activation plus the measured model state: what the plan expected.
        expected = max(
            (p + b) / MIB
            for r in rows[m]
            for p, b in zip(r["predicted_activation_bytes"], r["model_state_bytes"])
        )
        over.append(
            f"{LABELS[m] if m != 'epp' else 'EPP'}'s measured peak is "
            f"{s[m]['peak_memory_mib'] - budget:.2f} MiB over it (predicted activation plus "
            f"model state at most {expected:.1f} MiB)"
        )
    if over:
        text += " Against the budget of " + f"{budget:g} MiB: " + "; ".join(over) + "."
    return text


def repeats_table(res: dict, path: Path, repeats: list[dict]) -> list[str]:
    """EPP's speed-ups in this run and in its repeats (the same command, kept to show the
    spread), with the median."""
    runs = [("this run", res)] + [(f"repeat {i}", r) for i, r in enumerate(repeats, 1)]
    out = [
        f"The same command run again (benchmarks/results/{path.stem}_repeat_*.json), to show "
        "the run-to-run spread on this shared machine:",
        "",
        *table_head(
            "run",
            "EPP tokens/s",
            *[f"vs {LABELS[m]}" for m in BASELINES],
            "EPP peak memory (MiB, max over ranks)",
            "what differed",
        ),
    ]
    for name, run in runs:
        s = run["summary"]
        out.append(
            f"| {name} | {s['epp']['tokens_per_s']:.0f} | "
            + " | ".join(f"{s[m]['epp_speedup']:.2f}x" for m in BASELINES)
            + f" | {s['epp']['peak_memory_mib']:.1f} | {run.get('note', '')} |"
        )
    medians = [
        statistics.median(run["summary"][m]["epp_speedup"] for _, run in runs) for m in BASELINES
    ]
    out.append("| median | | " + " | ".join(f"{v:.2f}x" for v in medians) + " | | |")
    return out + [""]


def speedup_text(res: dict) -> str:
    """EPP's measured speed-ups, the plans' predicted ones, the all-to-all seconds and the
    first-step losses."""
    s, rows = res["summary"], res["rows"]
    methods = ("epp", *BASELINES)
    # A step's predicted time: its slowest replica's plan (every rank's plan is its replica's).
    predicted = {
        m: sum(max(k["predicted_s"] for k in r["ranks"]) for r in rows[m]) for m in methods
    }
    measured = {m: s[m]["total_s"] for m in methods}
    loss = res["first_step_loss"]
    spread = max(loss.values()) / min(loss.values()) - 1
    text = (
        "EPP's measured speed-up in this layout: "
        + ", ".join(f"{s[m]['epp_speedup']:.2f}x over {LABELS[m]}" for m in BASELINES)
        + " (tokens/s over tokens/s, same run). From the plans' own predictions (a step's slowest "
        "replica) it was to be "
        + ", ".join(f"{predicted[m] / predicted['epp']:.2f}x" for m in BASELINES)
        + "; measured over predicted step time: "
        + ", ".join(
            f"{LABELS[m] if m != 'epp' else 'EPP'} x{measured[m] / predicted[m]:.2f}"
            for m in methods
        )
        + " (the cost model is calibrated for one process per core beside one neighbour)."
    )
    if "all_to_all_s" in s["epp"]:
        text += (
            " All-to-all seconds per rank over the run: "
            + "; ".join(
                f"{LABELS[m] if m != 'epp' else 'EPP'} "
                + ", ".join(f"{x:.1f}" for x in s[m]["all_to_all_s"])
                for m in methods
            )
            + "."
        )
    text += (
        f" First-step losses: {statistics.mean(loss.values()):.6f} for every method and the "
        f"unpipelined model (relative spread {spread:.1e}; the run stops above 1e-4)."
    )
    return text


def layout_sections(results: Path) -> list[str]:
    """Every layout run's subsection, or nothing when none was run."""
    out = []
    for path, res, repeats in layout_runs(results):
        out += layout_section(res, path, repeats)
    return out
