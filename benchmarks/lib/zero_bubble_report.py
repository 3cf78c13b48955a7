"""docs/benchmarks.md's "Zero bubble, measured" from zero_bubble_measured.py's results: per run
(2 ranks, 4 ranks), EPP without, with (forced) and with tried zero bubble, and the packed torch
peers' schedules, as ratios over EPP without it in the same run."""

from __future__ import annotations

from pathlib import Path

from lib.markdown import table_head
from lib.results import load

# (results file, ranks, the command that writes it)
RUNS = [
    (
        "zero_bubble_measured.json",
        "torchrun --nproc_per_node=2 benchmarks/experiments/zero_bubble_measured.py "
        "--cost-model benchmarks/results/cost_cpu.json "
        "--output benchmarks/results/zero_bubble_measured.json",
    ),
    (
        "zero_bubble_measured_4.json",
        "torchrun --nproc_per_node=4 benchmarks/experiments/zero_bubble_measured.py "
        "--cost-model benchmarks/results/cost_cpu_4stages.json "
        "--output benchmarks/results/zero_bubble_measured_4.json",
    ),
]
LABELS = {
    "off": "EPP",
    "h1": "EPP, zero bubble forced (ZB-H1 on every step)",
    "h2": "EPP, ZB-H2 forced (ZB-H1 on a longer warm-up, every step)",
    "try": "EPP, zero bubble tried (kept where predicted faster)",
    "torch 1f1b": "torch.distributed.pipelining Schedule1F1B (packed)",
    "torch zbv": "torch.distributed.pipelining ScheduleZBVZeroBubble (packed)",
    "torch interleaved_zb": "torch.distributed.pipelining ScheduleInterleavedZeroBubble (packed)",
}


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:.1f}%"


def _setting(name: str, case: dict, s: dict) -> str:
    torch = case.get("torch_settings", {}).get(name)
    if torch is None:
        return "planned per step"
    ckpt = torch["checkpoint_layers"]
    return (
        f"rows of {torch['row_length']}, {'every layer checkpointed' if ckpt else 'no checkpointing'}; "
        f"{100 * s['cut_share']:.0f}% of the tokens cut off their context"
    )


def noise(rows: dict) -> list[float]:
    """ "try" over "off" on the timed steps where "try" kept off's plan (no split): the same work
    twice, so the spread of these ratios is the run's noise."""
    return [
        t["seconds"] / o["seconds"]
        for o, t in zip(rows["off"][1:], rows["try"][1:])
        if not t["split"]
    ]


def run_section(res: dict, command: str) -> list[str]:
    case, summary = res["case"], res["summary"]
    timed = case["steps"] - 1
    out = [
        f"{case['ranks']} ranks (one pipeline stage each; the packed torch peers' ZBV and "
        f"interleaved schedules run two stages per rank), {timed} timed steps of {case['batch']} "
        f"Wikipedia sequences at {case['context'] // 1024}K, {case['budget_mib']:g} MiB per stage, "
        f"cost model {case['cost_model']}; {res['machine']}, {res['cores']} cores, {res['date']}, "
        f"{res['seconds']:.0f} s:",
        "",
        "```",
        command,
        "```",
        "",
        *table_head(
            "runner",
            "setting",
            "tokens/s",
            "vs EPP",
            "bubble (wait over actions)",
            "steps split",
            "predicted (s)",
        ),
    ]
    for name, s in summary.items():
        split = f"{s['split_steps']} of {timed}" if "split_steps" in s else "-"
        predicted = f"{s['predicted_s']:.2f}" if "predicted_s" in s else "-"
        out.append(
            f"| {LABELS.get(name, name)} | {_setting(name, case, s)} | {s['tokens_per_s']:.0f} | "
            f"{s['speedup_over_off']:.3f}x | {_pct(s.get('bubble'))} | {split} | {predicted} |"
        )
    same = noise(res["rows"])
    if same:
        steps = f"{len(same)} timed steps" if len(same) > 1 else "one timed step"
        took = f"{min(same):.2f}-{max(same):.2f}x" if len(same) > 1 else f"{same[0]:.2f}x"
        out += [
            "",
            f"The run's noise: on the {steps} where the tried mode kept EPP's own plan (the same "
            f"work twice), its step took {took} EPP's.",
        ]
    return out + [""]


def zero_bubble_section(results: Path) -> list[str]:
    out = []
    for name, command in RUNS:
        res = load(results / name)
        out += run_section(res, command) if res else [f"No {name} (not run).", ""]
    return out
