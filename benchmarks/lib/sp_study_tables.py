"""docs/cluster_study.md's sections "With sequence parallelism" (benchmarks/results/
cluster_sp_study.json) and "Against FlexSP (simulated)" (flexsp_study.json): their tables and the
numbers their prose quotes (benchmarks/templates/cluster_study.md), each from the results."""

import re

from lib.markdown import table_head
from lib.page_template import case_values, lines
from lib.plan_tool import LABELS

NA = "n/a (not in this run)"
PAPER_OVER_FLEXSP = 1.69  # InfiniPipe over FlexSP, as the InfiniPipe paper reports it (issue 13)


def sp_name(case):
    return "LLaMA-%s, %dK, d_s=%d x d_p=%d" % (
        case["model"].split("-")[1].upper(),
        case["context"] // 1024,
        case["sp"],
        case["stages"],
    )


def _time(m):
    return "%.2f s" % m["step_time_s"] if m["feasible"] else "infeasible"


def short_error(text):
    # "parallel layout: sequence parallelism over d_s = 8 ranks needs d_s to divide the
    # attention heads, but model 'llama-30b' has 52 heads; ..." -> the reason, no advice.
    return re.sub(r"; choose .*", "", text).removeprefix("parallel layout: ")


def _ratio(m, base):
    e, b = m["epp"], m[base]
    return (
        "%.3fx" % (b["step_time_s"] / e["step_time_s"]) if e["feasible"] and b["feasible"] else "-"
    )


def same_plans(cases):
    """The runnable (96K, 192K) pairs of one model and layout, and those with the same plans."""
    pairs = [
        (c, d)
        for c in cases
        for d in cases
        if "error" not in c
        and "error" not in d
        and (c["model"], c["sp"], c["context"], d["context"])
        == (d["model"], d["sp"], 98304, 196608)
    ]
    return pairs, [d for c, d in pairs if c["methods"] == d["methods"]]


def sp_tables(cases):
    """The SP study's summary table and its per-method table (192K cases with the same plans as
    at 96K left out of the second)."""
    summary = table_head(
        "case",
        "EPP",
        "Seq1F1B+SP static",
        "per-step best",
        "batch+SP static",
        "per-step best",
        "ChunkFlow+SP static",
        "x Seq1F1B static",
        "x batch static",
    )
    _, repeats = same_plans(cases)
    for c in cases:
        if any(c is d for d in repeats):
            continue
        if "error" in c:
            summary.append(
                "| %s | not runnable: %s |||||||" % (sp_name(c), short_error(c["error"]))
            )
            continue
        m = c["methods"]
        cells = [m[k] for k in ("epp", "static seq1f1b", "best seq1f1b", "static batch")]
        cells += [m["best batch"], m["static chunkflow"]]
        summary.append(
            "| %s | %s | %s | %s |"
            % (
                sp_name(c),
                " | ".join(_time(x) for x in cells),
                _ratio(m, "static seq1f1b"),
                _ratio(m, "static batch"),
            )
        )
    detail = table_head(
        "case",
        "method",
        "step",
        "bubble",
        "recompute",
        "a2a",
        "peak GiB",
        "model state GiB",
        "setting(s)",
    )
    for c in cases:
        if "error" in c or any(c is d for d in repeats):
            continue
        for key in ["epp", "static seq1f1b"]:
            m = c["methods"][key]
            label = LABELS.get(key.split()[-1], key) + ("" if key == "epp" else " (static)")
            if not m["feasible"]:
                detail.append(
                    "| %s | %s | infeasible: %s ||||||" % (sp_name(c), label, m["reason"])
                )
                continue
            detail.append(
                "| %s | %s | %.2f s | %.1f%% | %.2f s | %.2f s | %.1f | %.1f | %s |"
                % (
                    sp_name(c),
                    label,
                    m["step_time_s"],
                    100 * m["bubble"],
                    m["recompute_s"],
                    m["alltoall_s"],
                    m["peak_gib"],
                    m["model_state_gib"],
                    "; ".join(m["settings"][:2]) + (" ..." if len(m["settings"]) > 2 else ""),
                )
            )
    return summary, detail


def sp_values(data):
    """Every placeholder of the SP section."""
    cases, meta = data["cases"], data["meta"]
    base = meta["case"]
    summary, detail = sp_tables(cases)
    runnable = [c for c in cases if "error" not in c]
    ok = [c for c in runnable if c["methods"]["epp"]["feasible"]]
    out = case_values(base, "sp_")
    out.update(
        sp_lengths=meta["lengths"],
        sp_gpus_per_node=base["gpus_per_node"],
        sp_table=lines(summary),
        sp_detail=lines(detail),
        sp_feasible="%d of %d" % (len(ok), len(runnable)),
        sp_command=meta["command"],
        sp_machine=meta["machine"],
        sp_date=meta["date"],
        sp_seconds="%.0f" % meta["seconds"],
    )
    target = [c for c in ok if (c["model"], c["context"], c["sp"]) == ("llama-13b", 98304, 8)]
    e, s = (
        (target[0]["methods"]["epp"], target[0]["methods"]["static seq1f1b"])
        if target
        else ({}, {})
    )
    out.update(
        sp_target_epp="%.2f s" % e["step_time_s"] if target else NA,
        sp_target_seq="%.2f s" % s["step_time_s"] if s.get("feasible") else NA,
        sp_target_ratio="%.3fx" % (s["step_time_s"] / e["step_time_s"])
        if s.get("feasible")
        else NA,
    )
    pairs, repeats = same_plans(cases)
    corpus = meta.get("corpus")
    out.update(
        sp_same_pairs="%d of %d" % (len(repeats), len(pairs)),
        sp_corpus_over="%d of the corpus's %d lengths (%.3f%%)"
        % (corpus["over_96k"], corpus["lengths"], 100 * corpus["over_96k"] / corpus["lengths"])
        if corpus
        else "few of the sampler's lengths",
    )
    ratios = [
        c["methods"]["static batch"]["step_time_s"] / c["methods"]["epp"]["step_time_s"]
        for c in ok
        if c["methods"]["static batch"]["feasible"]
    ]
    shares = [
        100 * c["methods"]["epp"]["alltoall_s"] / c["methods"]["epp"]["step_time_s"] for c in ok
    ]
    syncs = [
        100 * c["methods"]["epp"].get("gradient_sync_s", 0) / c["methods"]["epp"]["step_time_s"]
        for c in ok
    ]
    out.update(
        sp_batch_range="%.2f-%.2fx" % (min(ratios), max(ratios)) if ratios else NA,
        sp_a2a_range="%.1f-%.1f%%" % (min(shares), max(shares)) if shares else NA,
        sp_sync_range="%.1f-%.1f%%" % (min(syncs), max(syncs)) if syncs else NA,
    )
    big = [c for c in ok if (c["model"], c["sp"], c["context"]) == ("llama-30b", 4, 98304)]
    m = big[0]["methods"] if big else None
    out.update(
        sp_30b_seq_recompute="%.1f s" % m["static seq1f1b"]["recompute_s"] if m else NA,
        sp_30b_epp_recompute="%.1f s" % m["epp"]["recompute_s"] if m else NA,
        sp_30b_ratio="%.3fx" % (m["static seq1f1b"]["step_time_s"] / m["epp"]["step_time_s"])
        if m
        else NA,
    )
    return out


def _label(case):
    code = ", code" if case.get("distribution") == "code" else ""
    return "LLaMA-%s, %dK%s" % (case["model"].split("-")[1].upper(), case["context"] // 1024, code)


def _ratios(cases):
    """FlexSP / EPP of the cases where both are feasible."""
    return [
        c["methods"]["FlexSP"]["step_time_s"] / c["methods"]["EPP"]["step_time_s"]
        for c in cases
        if c["methods"]["EPP"]["feasible"] and c["methods"]["FlexSP"]["feasible"]
    ]


def flexsp_tables(cases):
    summary = table_head(
        "case",
        "EPP+SP (d_s x d_p)",
        "FlexSP",
        "Ulysses d=8 x 4",
        "Ulysses d=4 x 8",
        "FlexSP / EPP",
        "best Ulysses / EPP",
        "FlexSP's bound",
        "ZeRO-3 traffic (all of it, not overlapped)",
    )
    for c in cases:
        m = c["methods"]
        e, f = m["EPP"], m["FlexSP"]
        u8, u4 = m.get("Ulysses d=8 x 4"), m.get("Ulysses d=4 x 8")
        us = [u for u in (u8, u4) if u and u["feasible"]]

        def ratio(x):
            return "%.3fx" % (x / e["step_time_s"]) if e["feasible"] else "-"

        summary.append(
            "| %s | %s (%d x %d) | %s | %s | %s | %s | %s | %.2f s | %.2f s |"
            % (
                _label(c),
                _time(e),
                c["sp"],
                c["stages"],
                _time(f),
                _time(u8) if u8 else "no (heads)",
                _time(u4) if u4 else "-",
                ratio(f["step_time_s"]) if f["feasible"] else "-",
                ratio(min(u["step_time_s"] for u in us)) if us else "-",
                c["ideal_s"],
                f.get("zero3_traffic_s", float("nan")),
            )
        )
    detail = table_head(
        "case", "method", "step", "micro-batches", "recompute", "peak GiB", "detail"
    )
    for c in cases:
        for name, m in c["methods"].items():
            if not m["feasible"]:
                detail.append(
                    "| %s | %s | infeasible on %d steps | | | | |"
                    % (_label(c), name, m["infeasible_steps"])
                )
            elif name == "EPP":
                detail.append(
                    "| %s | EPP+SP | %.2f s | - | %.2f s | %.1f | bubble %.1f%%, busiest stage %.2f s "
                    "(stage mean %.2f s), a2a %.2f s |"
                    % (
                        _label(c),
                        m["step_time_s"],
                        m["recompute_s"],
                        m["peak_gib"],
                        100 * m["bubble"],
                        m["busiest_stage_s"],
                        m["mean_stage_s"],
                        m["alltoall_s"],
                    )
                )
            elif name == "FlexSP":  # homogeneous Ulysses: its step times are in the first table
                groups = ", ".join("%s x d=%s" % (n, d) for d, n in m["group_sizes"].items())
                detail.append(
                    "| %s | %s | %.2f s | %.2f | %d of %d | %.1f | %s |"
                    % (
                        _label(c),
                        name,
                        m["step_time_s"],
                        m["micro_batches"],
                        m["recomputed_micro_batches"],
                        round(m["micro_batches"] * len(m["step_times_s"])),
                        m["peak_gib"],
                        "groups " + groups,
                    )
                )
    return summary, detail


def _range(values, scale=1.0, fmt="%.2f-%.2f"):
    return fmt % (scale * min(values), scale * max(values)) if values else NA


def flexsp_values(data):
    """Every placeholder of the FlexSP section."""
    cases, meta = data["cases"], data["meta"]
    base = meta["case"]
    summary, detail = flexsp_tables(cases)
    code = [c for c in cases if c.get("distribution") == "code"]
    cases = [c for c in cases if c.get("distribution", "wikipedia") == "wikipedia"]
    ok = [
        c for c in cases if c["methods"]["EPP"]["feasible"] and c["methods"]["FlexSP"]["feasible"]
    ]
    flex = [c["methods"]["FlexSP"] for c in ok]
    epp = [c["methods"]["EPP"] for c in ok]
    gains = []
    for c in ok:
        us = [
            m["step_time_s"]
            for n, m in c["methods"].items()
            if n.startswith("Ulysses") and m["feasible"]
        ]
        if us:
            gains.append(min(us) / c["methods"]["FlexSP"]["step_time_s"])
    return dict(
        case_values(base, "fx_"),
        fx_lengths=meta["lengths"],
        fx_gpus=base["n_gpus"],
        fx_gpus_per_node=base["gpus_per_node"],
        fx_milp_limit="%g s" % meta["milp_time_limit_s"],
        fx_buckets=meta["buckets"],
        fx_table=lines(summary),
        fx_detail=lines(detail),
        fx_ratio=_range(_ratios(cases), fmt="%.2f-%.2fx"),
        fx_code_ratio=_range(_ratios(code), fmt="%.2f-%.2fx"),
        fx_code_cases="; ".join(_label(c) for c in code) or NA,
        fx_paper="%.2fx" % PAPER_OVER_FLEXSP,
        fx_gain=_range(gains, fmt="%.2f-%.2fx"),
        fx_bound="%.0f%%"
        % (100 * max(c["methods"]["FlexSP"]["step_time_s"] / c["ideal_s"] - 1 for c in ok))
        if ok
        else NA,
        fx_bubbles=_range([e["bubble"] for e in epp], 100, "%.1f-%.1f%%"),
        fx_heads=_range(
            [e["busiest_stage_s"] / e["mean_stage_s"] - 1 for e in epp], 100, "%.1f-%.1f%%"
        ),
        fx_recomputed=sum(f["recomputed_micro_batches"] for f in flex),
        fx_zero3=_range(
            [f["zero3_traffic_s"] / f["step_time_s"] for f in flex], 100, "%.0f-%.0f%%"
        ),
        fx_a2a=_range([e["alltoall_s"] / e["step_time_s"] for e in epp], 100, "%.1f-%.1f%%"),
        fx_command=meta["epp_command"],
        fx_machine=meta["machine"],
        fx_date=meta["date"],
        fx_seconds="%.0f" % meta["seconds"],
    )
