"""docs/benchmarks.md's "On the GPU": what scripts/gpu_check.sh measured on a lent GPU (issue 37),
from the result files it returned: the layer profiles fitted there (cost_<gpu>_<model>.json and
their .meta.json) with each grid point's error, and the GEMM and attention efficiency
(gpu_efficiency_<gpu>.json) beside the published curves the built-in hardware cites."""

from __future__ import annotations

import statistics
from pathlib import Path

from lib.markdown import table_head
from lib.results import load

# The committed runs (scripts/gpu_check.sh writes cost_gpu_*.json and gpu_efficiency.json; they
# are committed under the GPU's name: cost_h200_llama7b.json and cost_h200_llama13b.json beside
# these sidecars, gpu_efficiency_h200.json).
PROFILES = {"LLaMA-7B": "cost_h200_llama7b.meta.json", "LLaMA-13B": "cost_h200_llama13b.meta.json"}
EFFICIENCY = "gpu_efficiency_h200.json"
PLANS = "gpu_cost_plans.json"  # benchmarks/experiments/gpu_cost_plans.py
SPEED = "gpu_step_speed.json"  # benchmarks/experiments/gpu_step_speed.py, run by gpu_check.sh
MEMORY = "gpu_memory.json"  # benchmarks/experiments/gpu_memory.py, run by gpu_check.sh
HOST_LINK = "gpu_host_link.json"  # benchmarks/experiments/gpu_host_link.py, run by gpu_check.sh
GOAL = {"median": 0.05, "max": 0.10}  # issue 37: held-out error goal


def predicted(meta: dict, part: str, tokens: int, context: int) -> float:
    """The fitted time (cost/calibration.h): a1 ((c+s)^2 - c^2) + a2 s + b + a3 c."""
    k = "" if part == "forward" else "backward_"
    attention = (context + tokens) ** 2 - context**2
    return (
        meta[k + "a1"] * attention
        + meta[k + "a2"] * tokens
        + meta[k + "b"]
        + meta[k + "a3"] * context
    )


def point_errors(meta: dict) -> list[dict]:
    """Each grid point's median times and the fit's relative error on them."""
    out = []
    for i, r in enumerate(meta["runs"]["layer"]):
        row = dict(tokens=r["tokens"], context=r["context"], held_out=i in meta["held_out"])
        for part in ("forward", "backward"):
            runs = r[part + "_s"]
            measured = statistics.median(runs)
            row[part + "_ms"] = 1e3 * measured
            # how far the runs themselves spread: their quartiles' distance over the median
            q1, _, q3 = statistics.quantiles(runs, n=4) if len(runs) > 1 else (measured,) * 3
            row[part + "_spread"] = (q3 - q1) / measured
            row[part + "_error"] = predicted(meta, part, r["tokens"], r["context"]) / measured - 1
        out.append(row)
    return out


def runs_text(meta: dict) -> str:
    """How often each point was timed (cost/profile_grid.h, timed_runs)."""
    text = f"{meta['repeats']} timed runs per point"
    least = meta.get("min_timed_tokens", 0)
    if least > 0:
        text += f" (more under {least:,} tokens: as many as hold {least:,} tokens)"
    return text


def profile_lines(metas: dict[str, dict]) -> list[str]:
    out = table_head(
        "layer (bf16)",
        "forward held-out median / max",
        "backward held-out median / max",
        "b (fixed per layer call)",
        "activation bytes / token",
    )
    for name, meta in metas.items():

        def errors(part: str) -> str:
            med, mx = meta[f"{part}_heldout_median"], meta[f"{part}_heldout_max"]
            met = med <= GOAL["median"] and mx <= GOAL["max"]
            return f"{100 * med:.1f}% / {100 * mx:.1f}%{'' if met else ' (goal missed)'}"

        out.append(
            f"| {name} | {errors('forward')} | {errors('backward')} | "
            f"{1e3 * meta['b']:.2f} ms | {meta['activation_bytes']:.0f} |"
        )
    out.append("")
    return out


def error_grid_lines(meta: dict) -> list[str]:
    """Forward time, the fit's error and the runs' quartile spread at every point, tokens by
    context (held-out points starred)."""
    rows = point_errors(meta)
    contexts = sorted({r["context"] for r in rows})
    out = table_head("tokens \\ context", *[f"{c // 1024}K" if c else "0" for c in contexts])
    for tokens in sorted({r["tokens"] for r in rows}):
        cells = []
        for c in contexts:
            r = next((r for r in rows if r["tokens"] == tokens and r["context"] == c), None)
            cells.append(
                ""
                if r is None
                else f"{r['forward_ms']:.2f} ms, {100 * r['forward_error']:+.0f}%"
                f"{'*' if r['held_out'] else ''} ({100 * r['forward_spread']:.0f}%)"
            )
        out.append(f"| {tokens} | " + " | ".join(cells) + " |")
    out.append("")
    return out


def efficiency_lines(eff: dict) -> list[str]:
    pub = eff["published"]

    def published(points: list, x: int) -> str:
        return next((f"{y:.0f}" for px, y in points if px == x), "")

    out = table_head(
        "rows",
        "GEMM forward (4096x4096)",
        f"published ({pub['hardware']})",
        "weight gradient",
        f"published ({pub['hardware']})",
    )
    for r in eff["gemm"]["4096x4096"]:
        out.append(
            f"| {r['rows']} | {r['forward_tflops']:.0f} | "
            f"{published(pub['gemm_forward'], r['rows'])} | {r['weight_grad_tflops']:.0f} | "
            f"{published(pub['gemm_weight_grad'], r['rows'])} |"
        )
    out += [""] + table_head(
        "length",
        "causal attention forward",
        "forward + backward",
        f"published forward + backward ({pub['hardware']})",
    )
    for r in eff["attention"]:
        out.append(
            f"| {r['length']} | {r['forward_tflops']:.0f} | {r['forward_backward_tflops']:.0f} | "
            f"{published(pub['attention_forward_backward'], r['length'])} |"
        )
    return out + [""]


def plans_lines(plans: dict) -> list[str]:
    """EPP and the static baselines' mean simulated step, by the costs planned with."""
    c = plans["case"]
    out = [
        f"Planned and simulated with each cost model ({c['steps']} sampled Wikipedia steps of "
        f"{c['batch']} sequences, context {c['context'] // 1024}K, {c['stages']} stages, "
        f"{c['memory_gib']:.0f} GiB per stage; `benchmarks/experiments/gpu_cost_plans.py`), mean "
        "step time and EPP's speed-up over each static baseline:",
        "",
        *table_head(
            "model",
            "layer costs",
            "EPP",
            "EPP's chunks per step",
            "Seq1F1B",
            "ChunkFlow",
            "batch-level",
        ),
    ]
    for case in plans["cases"]:
        m = case["means"]

        def cell(method: str) -> str:
            t = m.get(f"{method} static")
            return "infeasible" if t is None else f"{t:.3f} s ({t / m['epp']:.2f}x)"

        out.append(
            f"| {case['model']} | {case['costs']} | {m['epp']:.3f} s | {m['epp_chunks']:.0f} | "
            f"{cell('seq1f1b')} | "
            f"{cell('chunkflow')} | {cell('batch')} |"
        )
    return out + [""]


def speed_lines(speed: dict) -> list[str]:
    """The executor's training step against the plain one, tokens/s by batch and runner."""
    m = speed["model"]
    out = [
        f"A training step of a {m['layers']}-layer LLaMA (hidden {m['hidden']}, vocab "
        f"{m['vocab']}) on one {speed['device']} in {speed['dtype'].replace('torch.', '')} with "
        f"float32 masters and AdamW, the median of {speed['steps']} steps per runner taken in "
        "turns (`benchmarks/experiments/gpu_step_speed.py`); plain is the model's own step on the "
        "whole batch as one chunk:",
        "",
        *table_head("batch", "runner", "tokens/s", "time over plain's"),
    ]
    for case, c in speed["cases"].items():
        for name, r in c["runners"].items():
            out.append(
                f"| {case} ({len(c['lengths'])} documents, {c['tokens']} tokens) | {name} | "
                f"{r['tokens_per_s']:.0f} | {r['time_over_plain']:.3f} |"
            )
    return out + [""]


def memory_lines(memory: dict) -> list[str]:
    """A stage's measured peak GPU memory against the plan's prediction, and the allocator's."""
    gib = 2**30
    out = [
        f"A stage of {memory['layers']} decoder layers with the embedding and the head on one "
        f"{memory['device']} ({memory['dtype'].replace('torch.', '')}, float32 masters, AdamW), "
        f"{memory['chunk_tokens']}-token chunks, a step's forward and backward after two steps "
        "(`benchmarks/experiments/gpu_memory.py`): `torch.cuda.max_memory_allocated` against "
        "the plan's predicted peak, and what the caching allocator reserved:",
        "",
        *table_head(
            "stage", "batch", "model state, predicted", "peak, measured", "predicted",
            "measured / predicted", "reserved",
        ),
    ]  # fmt: skip
    for r in memory["cases"]:
        out.append(
            f"| {r['model']} | {r['batch']} ({r['tokens']} tokens, {r['chunks']} chunks) | "
            f"{r['predicted_model_state_bytes'] / gib:.2f} GiB | {r['peak_bytes'] / gib:.2f} GiB | "
            f"{r['predicted_bytes'] / gib:.2f} GiB | {r['measured_over_predicted']:.3f} | "
            f"{r['reserved_bytes'] / gib:.2f} GiB |"
        )
    return out + [""]


def host_link_lines(link: dict) -> list[str]:
    """Pinned copies between the GPU and host memory, GB/s each way, and the GEMMs beside them."""
    gib = link["bytes"] / 2**30
    beside = link["beside_gemms"]
    out = [
        f"Pinned copies of {gib:g} GiB between the {link['device']} and host memory on side "
        f"streams, the median of {link['repeats']} CUDA-event timings "
        "(`benchmarks/experiments/gpu_host_link.py`): the rate activation offload would get "
        '(docs/design.md, "Activation offload"). Beside GEMMs: while a third stream runs '
        f"{link['gemm']['size']}^3 bf16 GEMMs, at {beside['gemm_tflops']:.0f} TFLOP/s against "
        f"{beside['gemm_tflops_alone']:.0f} alone.",
        "",
        *table_head("copies", "device to host (GB/s)", "host to device (GB/s)"),
    ]
    for key, name in (("alone", "one way at a time"), ("both_ways", "both ways at once")):
        r = link[key]
        out.append(f"| {name} | {r['device_to_host_gb_s']:.1f} | {r['host_to_device_gb_s']:.1f} |")
    out.append(
        f"| both ways, beside GEMMs | {beside['device_to_host_gb_s']:.1f} | "
        f"{beside['host_to_device_gb_s']:.1f} |"
    )
    return out + [""]


def plot_efficiency(eff: dict, path: Path) -> None:
    """TFLOP/s by size, measured against the published points, GEMMs and attention."""
    import matplotlib

    matplotlib.use("Agg")  # no display on CI machines
    import matplotlib.pyplot as plt

    pub = eff["published"]
    fig, (gemm, attn) = plt.subplots(1, 2, figsize=(11, 3.8))
    for i, (shape, rows) in enumerate(eff["gemm"].items()):
        x = [r["rows"] for r in rows]
        gemm.plot(x, [r["forward_tflops"] for r in rows], "o-", color=f"C{i}", label=shape)
    for key, style in (("gemm_forward", "k--"), ("gemm_weight_grad", "k:")):
        x, y = zip(*pub[key], strict=True)
        gemm.plot(x, y, style, label=f"published {pub['hardware']}: {key[5:].replace('_', ' ')}")
    gemm.set(xscale="log", xlabel="rows (chunk tokens)", ylabel="TFLOP/s (bf16)")
    gemm.set_title(f"GEMM forward on the {eff['meta']['device']}", loc="left", fontsize=10)
    x = [r["length"] for r in eff["attention"]]
    attn.plot(x, [r["forward_tflops"] for r in eff["attention"]], "o-", label="forward")
    attn.plot(
        x,
        [r["forward_backward_tflops"] for r in eff["attention"]],
        "o-",
        label="forward + backward",
    )
    px, py = zip(*pub["attention_forward_backward"], strict=True)
    attn.plot(px, py, "k--", label=f"published {pub['hardware']}: forward + backward")
    attn.set(xscale="log", xlabel="sequence length", ylabel="TFLOP/s (bf16)")
    attn.set_title("causal attention (SDPA)", loc="left", fontsize=10)
    for ax in (gemm, attn):
        ax.set_ylim(bottom=0)
        ax.legend(fontsize=7)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=150)
    plt.close(fig)


def gpu_section(results: Path, docs: Path) -> list[str]:
    metas = {
        name: meta for name, file in PROFILES.items() if (meta := load(results / file)) is not None
    }
    eff = load(results / EFFICIENCY)
    plans = load(results / PLANS)
    speed = load(results / SPEED)
    memory = load(results / MEMORY)
    link = load(results / HOST_LINK)
    if not metas and eff is None and speed is None:
        return [f"No GPU results ({', '.join([*PROFILES.values(), EFFICIENCY])}).", ""]
    out = []
    if metas:
        any_meta = next(iter(metas.values()))
        out += [
            f"One decoder layer profiled on the {any_meta['gpu']} (torch {any_meta['torch']}, "
            f"{any_meta['date'][:10]}; grid `{any_meta['grid']}`, {runs_text(any_meta)}, "
            f"{any_meta['statistic']} of wall times between CUDA synchronizations), "
            f"fitted with the CPU's model, held-out points {len(any_meta['held_out'])} of "
            f"{len(any_meta['runs']['layer'])} (goal: median <= {100 * GOAL['median']:.0f}%, "
            f"max <= {100 * GOAL['max']:.0f}%):",
            "",
            *profile_lines(metas),
        ]
        if "LLaMA-13B" in metas:
            out += [
                "LLaMA-13B's forward at every point: the median time, the fit's error (its "
                "prediction over the median, less one: negative where it predicts too little; * "
                "held out) and, in brackets, how far the point's own runs spread (the distance "
                "between their quartiles over the median):",
                "",
                *error_grid_lines(metas["LLaMA-13B"]),
            ]
    if eff is not None:
        image = docs / "img" / EFFICIENCY.replace(".json", ".png")
        plot_efficiency(eff, image)
        out += [
            f"![GEMM and attention TFLOP/s by size on the {eff['meta']['device']}]"
            f"(img/{image.name})",
            "",
            f"TFLOP/s on the {eff['meta']['device']} (bf16, median of {eff['meta']['repeats']} "
            f"CUDA-event timings; `benchmarks/experiments/gpu_efficiency.py`), beside the curves "
            f"the built-in `{eff['published']['hardware']}` hardware cites:",
            "",
            *efficiency_lines(eff),
        ]
    if plans is not None:
        out += plans_lines(plans)
    if speed is not None and speed["device"] != "cpu":  # a CPU run is the smoke path's
        out += speed_lines(speed)
    if memory is not None and memory["device"] != "cpu":
        out += memory_lines(memory)
    if link is not None and link["device"] != "cpu":
        out += host_link_lines(link)
    return out
