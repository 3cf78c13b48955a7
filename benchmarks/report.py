"""Writes docs/benchmarks.md and its plots from the JSON results of the benchmark scripts.

    python benchmarks/report.py [--results benchmarks/results] [--docs docs]

Reads what benchmarks/run_all.sh produced (the calibration sidecar, the simulator validation,
the measured comparison, the cluster study) and renders tables and matplotlib PNGs. Nothing is
measured here, so the page can be re-rendered without re-running anything.
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

MIB = 1 << 20
LABELS = {"epp": "EPP", "seq1f1b": "Seq1F1B (static)", "batch": "batch-level 1F1B (static)",
          "chunkflow": "ChunkFlow (static)",
          "torch_1f1b": "torch.distributed.pipelining Schedule1F1B (padded)",
          "unpipelined": "unpipelined, one process"}


def load(path: Path):
    return json.loads(path.read_text()) if path.exists() else None


def pct(x: float) -> str:
    return f"{100 * x:+.1f}%"


def calibration_section(meta: dict | None) -> list[str]:
    if meta is None:
        return ["No calibration results (run benchmarks/run_all.sh).\n"]
    out = ["| coefficient | fitted |", "|---|---|"]
    for key in ("a1", "a2", "b", "backward_ratio", "head_s_per_token", "embedding_s_per_token",
                "activation_bytes"):
        if key in meta:
            out.append(f"| {key} | {meta[key]:.4g} |")
    out.append("")
    for part in ("forward", "backward"):
        med, mx = meta.get(f"{part}_heldout_median"), meta.get(f"{part}_heldout_max")
        if med is not None:
            out.append(f"- {part}: held-out median error {100 * med:.1f}%, max {100 * mx:.1f}% "
                       f"({len(meta.get('held_out', []))} held-out grid points)")
    out.append(f"- device: {meta.get('device', '?')}; torch {meta.get('torch', '?')}; "
               f"grid {meta.get('grid', '?')}; date {meta.get('date', '?')}")
    return out + [""]


def validation_section(val: dict | None) -> list[str]:
    if val is None:
        return ["No validation results.\n"]
    out = ["| # | lengths | method | budget | plan | predicted step (s) | measured step (s) | "
           "step error | activation peak error per stage | busy error per stage |",
           "|---|---|---|---|---|---|---|---|---|---|"]
    for i, r in enumerate(val["cases"]):
        c = r["case"]
        measured = statistics.median(r["measured_step_s"])
        mem = [p / m - 1 for p, m in zip(r["predicted_activation_bytes"], r["measured_activation_bytes"])]
        busy = [p / m - 1 for p, m in zip(r["predicted_busy_s"], r["measured_busy_s"])]
        budget = "none" if c["budget_mib"] is None else f"{c['budget_mib']:g} MiB"
        out.append(f"| {i} | {c['distribution']} x{c['batch']} <= {c['context']} "
                   f"({sum(r['lengths'])} tokens, longest {max(r['lengths'])}) | {c['method']} | "
                   f"{budget} | {r['setting']}; {r['chunks']} chunks, {r['waves']} waves, "
                   f"{r['recomputed_layer_chunks']} recomputed layer-chunks | "
                   f"{r['predicted_step_s']:.2f} | {measured:.2f} | "
                   f"{pct(r['predicted_step_s'] / measured - 1)} | "
                   f"{', '.join(pct(m) for m in mem)} | {', '.join(pct(b) for b in busy)} |")
    out += ["", f"Step time: median |error| **{100 * val['median_abs_step_error']:.1f}%** (max "
            f"{100 * val['max_abs_step_error']:.1f}%) over {len(val['cases'])} cases. Activation "
            f"memory: median |error| **{100 * val['median_abs_memory_error']:.1f}%** (max "
            f"{100 * val['max_abs_memory_error']:.1f}%) over every stage of every case. Error = "
            "predicted / measured - 1.", ""]
    return out


def measured_section(res: dict | None, docs: Path) -> list[str]:
    if res is None:
        return ["No measured comparison.\n"]
    s, case = res["summary"], res["case"]
    out = [f"Case: {case['model']}; {case['steps']} steps of {case['batch']} sequences from the "
           f"Wikipedia length distribution, truncated to {case['context']} tokens (seeds "
           f"{case['seed']}..{case['seed'] + case['steps'] - 1}; {sum(map(sum, res['lengths']))} "
           f"tokens in all, longest {max(map(max, res['lengths']))}); memory budget "
           f"{case['budget_mib']:g} MiB per stage, model state included.", "",
           "| method | setting | tokens/s | EPP speed-up | peak memory (MiB) | within budget | "
           "pipeline efficiency |", "|---|---|---|---|---|---|---|"]
    settings = {m: describe_static(v) for m, v in res["static"]["settings"].items()}
    tc = res["torch_config"]
    settings["torch_1f1b"] = (f"microbatch {tc['microbatch_size']}, checkpoint "
                              f"{tc['checkpoint']}")
    settings["epp"] = "planned per step"
    settings["unpipelined"] = "rank 0 alone"
    for name, e in s.items():
        mem = f"{e['peak_memory_mib']:.0f}" if "peak_memory_mib" in e else "n/a"
        fits = ("yes" if e["within_budget"] else "**no**") if "within_budget" in e else "n/a"
        eff = f"{100 * e['pipeline_efficiency']:.0f}%" if "pipeline_efficiency" in e else "n/a"
        out.append(f"| {LABELS.get(name, name)} | {settings.get(name, '')} | "
                   f"{e['tokens_per_s']:.0f} | {e['epp_speedup']:.2f}x | {mem} | {fits} | {eff} |")
    out += ["", "EPP speed-up = EPP's tokens/s over the method's, both measured in the same run "
            "(methods interleaved step by step). Pipeline efficiency = mean over stages of the "
            "measured compute (forward and backward, recompute included) over the step's wall "
            "time.", ""]
    plot_throughput(s, docs / "img" / "measured_throughput.png")
    out.append("![throughput by method](img/measured_throughput.png)\n")
    return out


def describe_static(setting: dict) -> str:
    parts = []
    if setting.get("chunk_tokens"):
        parts.append(f"chunk {setting['chunk_tokens']}")
    else:
        parts.append(f"cap {setting['token_cap']}")
        if setting.get("k", 1) > 1:
            parts.append(f"k={setting['k']}")
    parts.append(f"recompute {setting['uniform_recompute']}")
    return ", ".join(parts)


def plot_throughput(summary: dict, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    names = list(summary)
    values = [summary[n]["tokens_per_s"] for n in names]
    fig, ax = plt.subplots(figsize=(8, 3.6))
    bars = ax.barh([LABELS.get(n, n).replace(" (padded)", "\n(padded)") for n in names], values,
                   color=["tab:green" if n == "epp" else "tab:gray" for n in names])
    for bar, n in zip(bars, names):
        ax.text(bar.get_width(), bar.get_y() + bar.get_height() / 2,
                f" {summary[n]['tokens_per_s']:.0f} ({summary[n]['epp_speedup']:.2f}x)",
                va="center", fontsize=8)
    ax.invert_yaxis()
    ax.set_xlabel("tokens/s (measured; EPP's speed-up over each in parentheses)")
    ax.set_xlim(0, max(values) * 1.3)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--results", type=Path, default=Path(__file__).parent / "results")
    p.add_argument("--docs", type=Path, default=Path(__file__).parents[1] / "docs")
    args = p.parse_args()
    r = args.results
    text = ["# Benchmarks", ""]
    text += ["## Calibration", ""] + calibration_section(load(r / "cost_cpu.meta.json"))
    text += ["## Simulator validation", ""] + validation_section(load(r / "validation.json"))
    text += ["## Measured comparison", ""] + measured_section(load(r / "measured.json"), args.docs)
    args.docs.mkdir(parents=True, exist_ok=True)
    (args.docs / "benchmarks.md").write_text("\n".join(text) + "\n")
    print(f"wrote {args.docs / 'benchmarks.md'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
