"""The cluster study's results as markdown: case names, the speed-up and per-method tables, and
what the sampled steps share across contexts (lib/cluster_page.py puts them in
docs/cluster_study.md)."""

from lib.markdown import table_head
from lib.plan_tool import BASELINES, LABELS
from lib.simulated_case import kinds


def case_name(c):
    """A case as the tables name it: "13B, 8 st, 96K"."""
    return "%s, %d st, %dK" % (
        c["model"].replace("llama-", "").upper(),
        c["stages"],
        c["context"] // 1024,
    )


def cell(s, field, fmt):
    """A method summary's `field` formatted, or empty when infeasible or missing."""
    return fmt % s[field] if s.get("feasible") and field in s else ""


def method_label(method, kind):
    """EPP, or a baseline with its kind: "Seq1F1B (static)", "ChunkFlow (per-step best)"."""
    return LABELS[method] + (
        "" if kind == "epp" else " (%s)" % ("static" if kind == "static" else "per-step best")
    )


def infeasible_text(c, ms):
    """Why a case has no EPP time: the tool failed, or EPP is infeasible on some steps."""
    if not ms:
        return "tool failed"
    return "infeasible on %d of %d steps" % (len(ms["epp"]["infeasible_steps"]), c["steps"])


def detail_table(cases):
    """EPP and every static baseline of every case, a row each (the per-step best's speed-ups
    are in the speed-up table; all of it is in the results JSON)."""
    lines = table_head(
        "case",
        "method",
        "setting",
        "mean step (s)",
        "EPP speed-up",
        "bubble",
        "recompute (s)",
        "peak GiB",
    )
    shown = [k for k in kinds() if k[2] != "best"]

    def infeasible(c, s):
        return "infeasible on %d of %d steps" % (len(s["infeasible_steps"]), c["steps"])

    for c in cases:
        if "error" in c["result"]:
            lines.append(
                "| %s | all | tool failed: %s | | | | | |"
                % (case_name(c), c["result"]["error"].replace("|", "/"))
            )
            continue
        ms = c["result"]["methods"]
        if not any(ms[key]["feasible"] for key, _, _ in shown):  # one row, not four empty ones
            lines.append(
                "| %s | all | %s | | | | | |"
                % (
                    case_name(c),
                    "; ".join(
                        "%s %s" % (method_label(m, kind), infeasible(c, ms[key]))
                        for key, m, kind in shown
                    ),
                )
            )
            continue
        for key, method, kind in shown:
            s = ms[key]
            if not s["feasible"]:
                lines.append(
                    "| %s | %s | %s | | | | | |"
                    % (case_name(c), method_label(method, kind), infeasible(c, s))
                )
                continue
            lines.append(
                "| %s | %s | %s | %.3f | %s | %.1f%% | %.2f | %.1f |"
                % (
                    case_name(c),
                    method_label(method, kind),
                    s["setting"],
                    s["mean_step_s"],
                    cell(s, "speedup", "%.2fx"),
                    100 * s["bubble_fraction"],
                    s["recompute_s"],
                    s["peak_memory_gib"],
                )
            )
    return lines


def speedup_table(cases):
    """Per case, EPP's mean step and its speed-ups over each baseline, static and best."""
    lines = table_head("case", "EPP (s)", *["vs %s static / best" % LABELS[m] for m in BASELINES])
    for c in cases:
        ms = c["result"].get("methods")
        if not ms or not ms["epp"]["feasible"]:
            lines.append(
                "| %s | %s |%s" % (case_name(c), infeasible_text(c, ms), " |" * len(BASELINES))
            )
            continue
        cells = [
            "%s / %s"
            % (
                cell(ms[m + " static"], "speedup", "%.2fx") or "infeasible",
                cell(ms[m + " best"], "speedup", "%.2fx") or "infeasible",
            )
            for m in BASELINES
        ]
        lines.append(
            "| %s | %.3f | %s |" % (case_name(c), ms["epp"]["mean_step_s"], " | ".join(cells))
        )
    return lines


def longer_than(cases):
    """Per context below the longest, how many sampled steps hold a sequence longer than it (their
    token counts differ from those at the longest context): "48K: 5, 96K: 0"."""
    tokens = {c["context"]: c["result"]["tokens"] for c in cases if "tokens" in c["result"]}
    if len(tokens) < 2:
        return "one context only"
    longest = max(tokens)
    return ", ".join(
        "%dK: %d" % (ctx // 1024, sum(a < b for a, b in zip(tokens[ctx], tokens[longest])))
        for ctx in sorted(tokens)
        if ctx < longest
    )


def repeated_cases(cases):
    """The cases whose sampled steps are those of the same model and stages at a shorter context
    (no sequence reaches the shorter context): their index -> the shorter case's index."""
    out = {}
    for i, c in enumerate(cases):
        for j, d in enumerate(cases[:i]):
            if (
                (c["model"], c["stages"]) == (d["model"], d["stages"])
                and d["context"] < c["context"]
                and c["result"].get("tokens")
                and c["result"].get("tokens") == d["result"].get("tokens")
            ):
                out[i] = j
                break
    return out


def repeat_spread(cases):
    """EPP's largest relative difference on a step that is identical at two contexts.

    The checkpoint program (CBC) stops at a wall-clock limit, so such steps are a rerun check.
    """
    spread = 0.0
    for a in cases:
        for b in cases:
            ea, eb = (x["result"].get("methods", {}).get("epp", {}) for x in (a, b))
            if (
                (a["model"], a["stages"]) != (b["model"], b["stages"])
                or a["context"] >= b["context"]
                or not (ea.get("feasible") and eb.get("feasible"))
            ):
                continue
            for ta, tb, sa, sb in zip(
                a["result"]["tokens"], b["result"]["tokens"], ea["step_s"], eb["step_s"]
            ):
                if ta == tb:
                    spread = max(spread, abs(sa - sb) / min(sa, sb))
    return spread


def spread_text(spread):
    """How far EPP's reruns of identical steps differ: "differ by up to 0.04%"."""
    return "differ by up to %.2f%%" % (100 * spread) if spread else "agree exactly"
