"""docs/benchmarks.md on the measured comparison (measured_comparison.py's results): its methods'
labels, its table and kept runs, the throughput plot, EPP's measured speed-ups over the runs, and
why the margins are what they are."""

from __future__ import annotations

import json
import statistics
from pathlib import Path

import matplotlib

from infinipipe import _C  # the planner's own text of a setting
from lib.markdown import table_head
from lib.results import MIB
from lib.validation import errors

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

LABELS = {
    "epp": "EPP",
    "seq1f1b": "Seq1F1B (static)",
    "batch": "batch-level 1F1B (static)",
    "chunkflow": "ChunkFlow (static)",
    "torch_1f1b": "torch.distributed.pipelining Schedule1F1B (padded)",
    "torch_packed": "torch.distributed.pipelining (packed documents)",
    "torch_packed_context": "torch.distributed.pipelining (packed, rows of the context)",
    "unpipelined": "unpipelined, one process",
}


def measured_section(res: dict | None, docs: Path, context_run: dict | None = None) -> list[str]:
    if res is None:
        return ["No measured comparison.\n"]
    s, case = res["summary"], res["case"]
    out = [
        f"Case: {case['model']}; {case['steps']} steps of {case['batch']} sequences from the "
        f"Wikipedia length distribution, truncated to {case['context']} tokens (seeds "
        f"{case['seed']}..{case['seed'] + case['steps'] - 1}; {sum(map(sum, res['lengths']))} "
        f"tokens in all, longest {max(map(max, res['lengths']))}); memory budget "
        f"{case['budget_mib']:g} MiB per stage, model state included.",
        "",
        *table_head(
            "method",
            "setting",
            "tokens/s",
            "EPP speed-up",
            "peak memory (MiB)",
            "within budget",
            "pipeline efficiency",
        ),
    ]
    settings = static_setting_texts(res)
    tc = res["torch_config"]
    if "omitted" not in tc:
        settings["torch_1f1b"] = (
            f"microbatch {tc['microbatch_size']}, checkpoint {tc['checkpoint']}"
        )
    pc = res.get("packed_config")
    if pc:
        settings["torch_packed"] = packed_setting(pc)
        if "context_row" in pc:
            settings["torch_packed_context"] = packed_setting(pc["context_row"])
    settings["epp"] = "planned per step"
    settings["unpipelined"] = "rank 0 alone"
    for name, e in s.items():
        mem = f"{e['peak_memory_mib']:.0f}" if "peak_memory_mib" in e else "n/a"
        fits = ("yes" if e["within_budget"] else "**no**") if "within_budget" in e else "n/a"
        eff = f"{100 * e['pipeline_efficiency']:.0f}%" if "pipeline_efficiency" in e else "n/a"
        out.append(
            f"| {LABELS.get(name, name)} | {settings.get(name, '')} | "
            f"{e['tokens_per_s']:.0f} | {e['epp_speedup']:.2f}x | {mem} | {fits} | {eff} |"
        )
    out += [
        "",
        "EPP speed-up = EPP's tokens/s over the method's, both measured in the same run "
        "(methods interleaved step by step). Pipeline efficiency = mean over stages of the "
        "measured compute (forward and backward, recompute included) over the step's wall "
        "time.",
        "",
    ]
    if res.get("note"):
        out += [f"This run: {res['note']}.", ""]
    out += tried_text(
        tc.get("tried", []),
        "torch.distributed.pipelining's padded configuration",
        "--torch-config",
        lambda t: f"microbatch {t['microbatch_size']}, checkpoint {t['checkpoint']}",
    )
    if pc:
        out += packed_text(res, pc)
    if context_run:
        out += context_run_text(context_run)
    plot_throughput(s, docs / "img" / "measured_throughput.png")
    out.append("![throughput by method](img/measured_throughput.png)\n")
    return out


def tried_text(tried: list, what: str, option: str, describe) -> list[str]:
    """What a peer's tuning tried (memory on its largest step), or that its setting was given."""
    out = []
    tuned = [t for t in tried if "given" not in t]
    given = [t["given"] for t in tried if "given" in t]
    if given:
        out += [
            f"{what} was given (`{option} {given[0]}`), from the tuning of an earlier run of "
            "this case" + (" listed next." if tuned else "."),
            "",
        ]
    if tuned:
        out += [
            f"{what}s tried (memory on the step padding or packing makes the largest): "
            + "; ".join(
                f"{describe(t)}: {t['peak_bytes'] / MIB:.0f} MiB"
                + (f", step 0 {t['step0_s']:.1f} s" if t["fits"] else " (over budget)")
                for t in tuned
            )
            + ".",
            "",
        ]
    return out


def packed_setting(pc: dict) -> str:
    return f"{pc['schedule']}, rows of {pc['row_length']}, checkpoint {pc['checkpoint']}"


def packed_text(res: dict, pc: dict) -> list[str]:
    """EPP against the packed peer, and what the packed peer trains differently."""
    s, loss = res["summary"], res["first_step_loss"]
    p, e = s["torch_packed"], s["epp"]
    return [
        f"Against the packed peer at the same budget: EPP {p['epp_speedup']:.2f}x its "
        f"throughput, peaks {e['peak_memory_mib']:.0f} MiB (EPP) and "
        f"{p['peak_memory_mib']:.0f} MiB (packed) of {res['case']['budget_mib']:g} MiB; the padded "
        f"peer's row is kept above for comparison. The packed peer trains as torchtitan does "
        f"(benchmarks/lib/torch_packed.py): each step's documents, in batch order, make one token "
        f"stream cut into rows of a fixed length, one row per microbatch, the last row padded "
        f"(and all-pad rows added where a schedule needs more microbatches); attention is "
        f"document-causal, with the same chunk attention EPP runs. A document crossing a row "
        f"boundary is cut there, and one longer than a row spans several rows; each piece "
        f"attends only to itself, its rotary positions start at 0 (under RoPE the same attention "
        f"as the document's positions, up to rounding), and every token keeps its target (the "
        f"next token of its document, also across a cut), so the loss has the same targets and "
        f"normaliser as the other methods'. What differs is the context: "
        f"{100 * p.get('cut_share', 0):.0f}% of the tokens lie after a cut in their document "
        f"at the chosen rows and do not see what came before it "
        f"({100 * pad_share(res, 'torch_packed'):.0f}% of its rows' tokens are padding), so its "
        f"first-step loss is "
        f"{loss['torch_packed']:.6f} against {loss['epp']:.6f} (EPP), and it does less "
        f"attention work than the methods that keep every document whole. Chosen: "
        f"{packed_setting(pc)}, the fastest configuration whose measured memory fits, over "
        f"the schedules of the installed torch (Schedule1F1B, ScheduleGPipe, "
        f"ScheduleInterleaved1F1B and ScheduleInterleavedZeroBubble with 2 stages per rank, "
        f"ScheduleZBVZeroBubble), rows of the context and its halves to eighths, and no or full "
        f"checkpointing (a longer row of a schedule and checkpointing that went over was not "
        f"tried; the cut share is of step 0's tokens).",
        "",
        *context_row_text(res, pc),
        *tried_text(
            pc["tried"],
            "The packed peer's configuration",
            "--packed-config",
            lambda t: (
                f"{packed_setting(t)}"
                + (f" ({100 * t['cut_share']:.0f}% cut)" if "cut_share" in t else "")
            ),
        ),
    ]


def pad_share(res: dict, name: str) -> float:
    """The share of a packed peer's row tokens that are padding, over the run's steps."""
    rows = sum(step["ranks"][0]["padded_tokens"] for step in res["rows"][name])
    return 1 - sum(map(sum, res["lengths"])) / rows


def context_row_text(res: dict, pc: dict) -> list[str]:
    """EPP against the packed peer with rows of the whole context, when the run has it."""
    if "context_row" not in pc:
        return []
    s, loss = res["summary"], res["first_step_loss"]
    c = s["torch_packed_context"]
    return [
        f"With rows of the whole context ({packed_setting(pc['context_row'])}, the fastest "
        f"configuration with rows that long that fitted in the tuning), the packed peer cuts only "
        f"{100 * c.get('cut_share', 0):.0f}% of the tokens from their earlier context (first-step "
        f"loss {loss['torch_packed_context']:.6f}), but "
        f"{100 * pad_share(res, 'torch_packed_context'):.0f}% of its rows' tokens are padding "
        f"(a row's unfilled tail, and whole rows where a step has fewer rows than the schedule "
        f"needs microbatches): EPP {c['epp_speedup']:.2f}x its throughput, its peak "
        f"{c['peak_memory_mib']:.0f} MiB.",
        "",
    ]


def context_run_text(run: dict) -> list[str]:
    """A run of the packed peer alone, with rows of the whole context
    (benchmarks/results/measured_packed_context.json)."""
    s, pc = run["summary"], run["packed_config"]
    p, e = s["torch_packed"], s["epp"]
    others = ", ".join(
        f"{s[m]['epp_speedup']:.2f}x {LABELS[m]}" for m in ("seq1f1b", "batch", "chunkflow")
    )
    return [
        f"A separate run of the same case with the packed peer at rows of the whole context "
        f"only ({packed_setting(pc)}; benchmarks/results/measured_packed_context.json; "
        f"{run.get('note', '')}): EPP {p['epp_speedup']:.2f}x its throughput, peaks "
        f"{e['peak_memory_mib']:.0f} MiB (EPP) and {p['peak_memory_mib']:.0f} MiB (packed), "
        f"{100 * p.get('cut_share', 0):.0f}% of the tokens cut and "
        f"{100 * pad_share(run, 'torch_packed'):.0f}% of its rows' tokens padding; in that run "
        f"EPP was {others}.",
        "",
    ]


def static_setting_texts(res: dict) -> dict:
    """Each baseline's static setting in the run `res`, as the planner writes it."""
    return {
        m: _C.plan.describe_setting(m, json.dumps(v)) for m, v in res["static"]["settings"].items()
    }


def runs_table(runs: list[dict], name: str) -> list[str]:
    """One row per kept run of the measured comparison: EPP's tokens/s, its speed-ups, the note."""
    methods = ("seq1f1b", "batch", "chunkflow", "torch_1f1b", "torch_packed")
    out = table_head(
        "run", "EPP tokens/s", *[f"vs {LABELS.get(m, m)}" for m in methods], "what differed"
    )
    for i, run in enumerate(runs, 1):
        s = run["summary"]
        out.append(
            f"| {name} {i} | {s['epp']['tokens_per_s']:.0f} | "
            + " | ".join(f"{s[m]['epp_speedup']:.2f}x" if m in s else "n/a" for m in methods)
            + f" | {run.get('note', '')} |"
        )
    return out + [""]


def kept_runs_section(repeats: list[dict], history: list[dict]) -> list[str]:
    """Repeats of the measured comparison with the same code (measured_repeat_*.json), judged
    with the main run, and runs with earlier code (measured_history_*.json), listed only."""
    out = []
    if repeats:
        out += [
            "Repeats of the same comparison with the same code, kept to show the run-to-run spread "
            "and judged with the run above by their median "
            "(benchmarks/results/measured_repeat_*.json):",
            "",
        ] + runs_table(repeats, "repeat")
    if history:
        out += [
            "Runs with earlier code, listed but not judged: the planner has changed since, so they "
            "measure a different EPP (benchmarks/results/measured_history_*.json):",
            "",
        ]
        out += runs_table(history, "earlier")
    return out


def plot_throughput(summary: dict, path: Path) -> None:
    """Bars of every method's measured tokens/s, EPP's speed-up over each beside them."""
    path.parent.mkdir(parents=True, exist_ok=True)
    names = list(summary)
    values = [summary[n]["tokens_per_s"] for n in names]
    fig, ax = plt.subplots(figsize=(8, 3.6))
    bars = ax.barh(
        [LABELS.get(n, n).replace(" (p", "\n(p") for n in names],
        values,
        color=["tab:green" if n == "epp" else "tab:gray" for n in names],
    )
    for bar, n in zip(bars, names):
        ax.text(
            bar.get_width(),
            bar.get_y() + bar.get_height() / 2,
            f" {summary[n]['tokens_per_s']:.0f} ({summary[n]['epp_speedup']:.2f}x)",
            va="center",
            fontsize=8,
        )
    ax.invert_yaxis()
    ax.set_xlabel("tokens/s (measured; EPP's speed-up over each in parentheses)")
    ax.set_xlim(0, max(values) * 1.3)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def speedups(runs: list[dict], method: str, history=()) -> tuple[str, float]:
    """EPP's measured speed-up over `method`: the text (this run's, the repeats' with the median,
    and the median with the runs of earlier code too) and the median over this run and repeats."""
    values = [run["summary"][method]["epp_speedup"] for run in runs]
    median = statistics.median(values)
    text = f"{values[0]:.2f}x"
    if len(values) > 1:
        text += (
            " (repeats: " + ", ".join(f"{v:.2f}x" for v in values[1:]) + f"; median {median:.2f}x)"
        )
    if history:
        every = values + [run["summary"][method]["epp_speedup"] for run in history]
        text += f"; with the {len(history)} runs of earlier code, median {statistics.median(every):.2f}x"
    return text, median


def busy_note(val: dict | None) -> str:
    """How far the validation found the stages' measured compute from the predicted."""
    if not val:
        return ""
    busy = [e for c in val["cases"] for e in errors(c)["busy"]]
    return (
        f" (in the simulator validation below, the stages' predicted compute is "
        f"{100 * statistics.median(busy):+.1f}% off the measured in the median; a step here "
        f"also includes planning, the ranks' agreement and the optimizer step, which the "
        f"simulation leaves out)"
    )


def shortfall_text(res: dict, meta: dict | None, val: dict | None, short: bool = True) -> str:
    """Why the measured margins are what they are; `short`: some measured target is not met."""
    methods = ("epp", "seq1f1b", "batch", "chunkflow")
    predicted = {m: sum(r["ranks"][0]["predicted_s"] for r in res["rows"][m]) for m in methods}
    pred = {m: predicted[m] / predicted["epp"] for m in methods}  # EPP's predicted speed-ups
    over = {m: sum(r["seconds"] for r in res["rows"][m]) / predicted[m] - 1 for m in methods}
    overhead = (
        f"about {1e3 * meta['b']:.1f} ms against {1e6 * meta['a2']:.1f} us per token"
        if meta
        else "small"
    )
    return (
        (
            "Where the measured targets fall short, the margin was thin in the plans already"
            if short
            else "The measured margins are about what the plans predicted"
        )
        + ": from their own predictions EPP was to be "
        + ", ".join(f"{pred[m]:.2f}x {LABELS[m]}" for m in methods[1:])
        + " on these steps. Measured "
        "against predicted (positive: slower than predicted): "
        + ", ".join(f"{LABELS[m] if m != 'epp' else 'EPP'} {100 * over[m]:+.1f}%" for m in methods)
        + busy_note(val)
        + ". On this CPU a small "
        "chunk costs little beyond its FLOPs (b, the per-layer overhead of a chunk, is "
        + overhead
        + "), so Seq1F1B's and ChunkFlow's fine slices lose little "
        "efficiency; what EPP saves them is mostly recompute, which their one static setting "
        "needs for the worst step on every step, and a better packing of the short sequences. "
        "The paper's larger gains come from GPUs, where small slices under-use the device. At "
        "paper scale (simulated), the busiest stage's compute, the last stage's LM head "
        "included, bounds what any plan can gain over static Seq1F1B; cluster_study.md gives "
        "the bound per model. LLaMA-30B's model state leaves too little of 80 GiB for activations "
        "with pipeline parallelism alone (the paper also shards with data parallelism)."
    )
