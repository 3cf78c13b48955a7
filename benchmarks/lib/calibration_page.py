"""A profile's part of docs/benchmarks.md: its fitted coefficients and held-out errors, from the
sidecar `python -m infinipipe profile` writes beside a cost JSON (<name>.meta.json)."""

from __future__ import annotations

from lib.markdown import table_head


def calibration_section(meta: dict | None) -> list[str]:
    """The calibration's fitted coefficients and held-out errors (cost_cpu.meta.json)."""
    if meta is None:
        return ["No calibration results (run benchmarks/run_all.sh).\n"]
    out = table_head("coefficient", "fitted")
    for key in (
        "a1",
        "a2",
        "b",
        "a3",
        "backward_a1",
        "backward_a2",
        "backward_b",
        "backward_a3",
        "backward_ratio",
        "checkpointed_forward_ratio",
        "head_s_per_token",
        "embedding_s_per_token",
        "activation_bytes",
    ):
        if meta.get(key) is not None:
            out.append(f"| {key} | {meta[key]:.4g} |")
    if meta.get("attention_query_cuts"):
        cuts = ", ".join(str(c) for c in meta["attention_query_cuts"])
        for key in ("a1_by_query", "backward_a1_by_query"):
            values = ", ".join(f"{v:.4g}" for v in meta[key])
            out.append(f"| {key} (regimes from {cuts} query tokens) | {values} |")
    out.append("")
    for part in ("forward", "backward"):
        med, mx = meta.get(f"{part}_heldout_median"), meta.get(f"{part}_heldout_max")
        if med is not None:
            out.append(
                f"- {part}: held-out median error {100 * med:.1f}%, max {100 * mx:.1f}% "
                f"({len(meta.get('held_out', []))} held-out grid points)"
            )
    out.append(
        f"- device: {meta.get('cpu', meta.get('device', '?'))}, {meta.get('threads', '?')} thread; torch {meta.get('torch', '?')}; "
        f"grid {meta.get('grid', '?')}; neighbours {meta.get('neighbours', 0)}; "
        f"in flight {meta.get('in_flight', 'none (before it existed)')}; date {meta.get('date', '?')}"
    )
    if meta.get("refit"):
        name = meta.get("file", "cost_cpu")
        why = (
            "when a1 by query length was added to the fit"
            if meta.get("attention_query_cuts")
            else "when the context term a3 was added to the fit"
        )
        out.append(
            f"- fitted again on {meta['refit']['date'][:16].replace('T', ' ')} UTC from the same "
            "runs (`python -m infinipipe profile --layers-per-stage 4,4 --refit "
            f"benchmarks/results/{name}.meta.json --output benchmarks/results/{name}.json`), "
            f"{why}"
        )
    return out + [""]
