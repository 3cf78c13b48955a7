"""The corpus study's results (benchmarks/experiments/corpus_study.py) as docs/cluster_study.md's
"Code lengths" section: per case and layout, EPP's step and its speed-up over each static
baseline on the Wikipedia and the code distribution side by side."""

import statistics

from lib.markdown import table_head
from lib.page_template import case_values
from lib.plan_tool import BASELINES, LABELS

DISTRIBUTIONS = ("wikipedia", "code")


def layout_name(c):
    """ "8 stages", or "SP 8 x 4" (d_s x d_p)."""
    return "%d stages" % c["stages"] if c["sp"] == 1 else "SP %d x %d" % (c["sp"], c["stages"])


def row_key(c):
    """Without SP first (4, then 8 stages), then SP 8 x 4 and 4 x 8; models by size."""
    size = float(c["model"].split("-")[-1].rstrip("b"))
    return (c["sp"] > 1, -c["sp"] if c["sp"] > 1 else c["stages"], size, c["context"])


def cells(c):
    """EPP's mean step and its speed-up over each static baseline, or why there is none."""
    r = c["result"]
    if "error" in r:  # the plan tool refused the case: the reason is under the table
        return ["refused"] + [""] * len(BASELINES)
    ms = r["methods"]
    if not ms["epp"]["feasible"]:
        return ["infeasible"] + [""] * len(BASELINES)
    out = ["%.3f" % ms["epp"]["mean_step_s"]]
    for m in BASELINES:
        s = ms[m + " static"]
        out.append("%.2fx" % s["speedup"] if "speedup" in s else "infeasible")
    return out


def speedups(cases, distribution, method):
    return [
        c["result"]["methods"][method + " static"]["speedup"]
        for c in cases
        if c["distribution"] == distribution
        and "speedup" in c["result"].get("methods", {}).get(method + " static", {})
    ]


def corpus_table(cases):
    """One row per (layout, model, context), the two distributions side by side."""
    columns = ["EPP (s)"] + ["x %s" % LABELS[m] for m in BASELINES]
    head = ["layout", "case"] + ["%s: %s" % (d, col) for d in DISTRIBUTIONS for col in columns]
    rows = table_head(*head)
    by_key = {}
    for c in cases:
        by_key.setdefault(row_key(c), {})[c["distribution"]] = c
    for key in sorted(by_key):
        pair = by_key[key]
        any_case = next(iter(pair.values()))
        name = "%s, %dK" % (
            any_case["model"].replace("llama-", "").upper(),
            any_case["context"] // 1024,
        )
        line = [layout_name(any_case), name]
        for d in DISTRIBUTIONS:
            line += cells(pair[d]) if d in pair else ["not run"] + [""] * len(BASELINES)
        rows.append("| " + " | ".join(line) + " |")
    # The plan tool's reasons for the cases it refused, each once (after its command line).
    refusals = sorted(
        {
            c["result"]["error"].split("infinipipe-plan: error: ")[-1]
            for c in cases
            if "error" in c["result"]
        }
    )
    return rows + ["", *("Refused: %s" % r for r in refusals)] if refusals else rows


def summary(cases):
    """Per distribution and baseline: the median and the range of EPP's static speed-ups."""
    parts = []
    for d in DISTRIBUTIONS:
        each = []
        for m in BASELINES:
            s = speedups(cases, d, m)
            if s:
                each.append(
                    "%s median %.2fx (%.2f-%.2fx)"
                    % (LABELS[m], statistics.median(s), min(s), max(s))
                )
        parts.append("%s: %s" % (d, "; ".join(each) if each else "no feasible case"))
        # Cases EPP plans that a static baseline cannot fit (on some step) at all.
        only = [
            c
            for c in cases
            if c["distribution"] == d
            and c["result"].get("methods", {}).get("epp", {}).get("feasible")
            and any(not c["result"]["methods"][m + " static"]["feasible"] for m in BASELINES)
        ]
        parts[-1] += "; EPP feasible where a static baseline is not: %d of %d cases" % (
            len(only),
            sum(1 for c in cases if c["distribution"] == d),
        )
    return ". ".join(parts) + "."


def corpus_values(data):
    meta, cases = data["meta"], data["cases"]
    return dict(
        case_values(meta["case"], prefix="cs_"),
        corpus_table="\n".join(corpus_table(cases)),
        corpus_summary=summary(cases),
        cs_stages_list=" and ".join(
            str(n) for n in sorted({c["stages"] for c in cases if c["sp"] == 1})
        ),
        cs_command=meta["command"],
        cs_machine=meta["machine"],
        cs_date=meta["date"],
        cs_seconds="%.0f" % meta["seconds"],
    )
