"""The cluster study's results as markdown: case names, the speed-up and per-method tables, and
notes on the sampled steps (cluster_study.py writes them into docs/cluster_study.md)."""

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


def detail_table(cases, notes):
    """Every method of every case, a row each; infeasible reasons are numbered into `notes`."""
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

    def infeasible(c, s):
        return "infeasible on %d of %d steps [%d]" % (
            len(s["infeasible_steps"]),
            c["steps"],
            notes.setdefault(s["reason"], len(notes) + 1),
        )

    for c in cases:
        if "error" in c["result"]:
            lines.append(
                "| %s | all | tool failed: %s | | | | | |"
                % (case_name(c), c["result"]["error"].replace("|", "/"))
            )
            continue
        ms = c["result"]["methods"]
        if not any(s["feasible"] for s in ms.values()):  # one row, not seven empty ones
            lines.append(
                "| %s | all | %s | | | | | |"
                % (
                    case_name(c),
                    "; ".join(
                        "%s %s" % (method_label(m, kind), infeasible(c, ms[key]))
                        for key, m, kind in kinds()
                    ),
                )
            )
            continue
        for key, method, kind in kinds():
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


def context_note(cases):
    """How many sampled steps the context truncates: the others are the same step at every context."""
    tokens = {c["context"]: c["result"]["tokens"] for c in cases if "tokens" in c["result"]}
    if len(tokens) < 2:
        return ""
    longest = max(tokens)
    parts = [
        "%d have a sequence longer than %dK"
        % (sum(a < b for a, b in zip(tokens[ctx], tokens[longest])), ctx // 1024)
        for ctx in sorted(tokens)
        if ctx < longest
    ]
    return (
        "Wikipedia lengths are heavy-tailed but a batch of %d rarely holds a very long sequence: of the "
        "%d sampled steps, %s (their token counts differ from those at %dK); the other steps are the "
        "same at every context, so the context changes little below.\n\n"
        % (cases[0]["batch"], len(tokens[longest]), " and ".join(parts), longest // 1024)
    )


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


def spread_note(spread):
    """The page's note on how far EPP's reruns of identical steps differ."""
    return (
        "EPP's checkpoint program (CBC) stops at a wall-clock time limit, so a step that reaches it can "
        "plan slightly differently from run to run. In this run, EPP's step times on the steps that are "
        "identical at two contexts %s.\n\n"
        % ("differ by up to %.2f%%" % (100 * spread) if spread else "agree exactly")
    )
