"""docs/cluster_study.md's "Balanced stages" from benchmarks/results/balance_study.json: EPP and the
baselines on the even layer split and on the split `infinipipe-plan --layers-per-stage balanced`
chooses, with the spread head, with the ideal even head and with zero bubble, against the
physical limit (each
step's compute without recompute spread evenly over the stages). The cases and what they mean:
benchmarks/experiments/balance_study.py; the prose: benchmarks/templates/cluster_study.md."""

from lib.cluster_tables import cell
from lib.markdown import table_head
from lib.page_template import case_values, lines, pct

MODELS = ["llama-7b", "llama-13b", "llama3-8b"]
NAMES = {"llama-7b": "LLaMA-7B", "llama-13b": "LLaMA-13B", "llama3-8b": "LLaMA-3-8B"}
SPLITS = {"even": [], "balanced": ["--layers-per-stage", "balanced"]}
# The targets at LLaMA-13B, 96K, 8 stages.
TARGET = dict(model="llama-13b", over_limit=0.03, speedup=1.4)
# The spread head's cases: these models on both splits, every method with --spread-head.
SPREAD_MODELS = ["llama-13b", "llama3-8b"]
SPREAD = " + spread head"
# The ceiling of any head balancing: the head's work, logits and parameters shared evenly by the
# stages with free communication (`--ideal-even-head`, a what-if), on the even split.
IDEAL = " + ideal even head"
# Zero bubble (docs/design.md, "Zero bubble"): EPP may split its backwards into B and W where the
# simulator finds it faster (`--zero-bubble try`), at the target model, with each head placement.
ZERO_BUBBLE = " + zero bubble"
ZERO_BUBBLE_HEADS = ["even", "even" + SPREAD, "even" + IDEAL]
# The code lengths (the plan tool's "code" distribution, docs/notes/2026-11-29-code-lengths.md):
# the target model's splits and head placements again.
CODE = " (code)"
# The head's parameters (LM head and final norm gain, hidden x vocabulary + hidden; shapes of
# src/cost/model_shape.cc) at 16 bytes each (bf16 weights and gradients, fp32 Adam state and
# master weights: CostCoefficients::model_state_bytes_per_param): the replica a stage running
# heads keeps.
HEAD_PARAMS = {"llama-13b": 5120 * 32000 + 5120, "llama3-8b": 4096 * 128256 + 4096}


def _infeasible(s, c):
    return "infeasible on %d of %d steps" % (len(s.get("infeasible_steps", [])), c["steps"])


def _find(cases, model, split):
    return next(c for c in cases if c["model"] == model and c["split"] == split)


def _wikipedia(cases):
    return [c for c in cases if not c["split"].endswith(CODE)]


def _epp(c):
    return c["result"].get("methods", {}).get("epp", {})


def _layers(c):
    return " ".join(str(n) for n in c["result"].get("layers_per_stage", []))


def _over(c):
    """EPP's mean step over the physical limit and over its busiest stage, minus 1."""
    e, b = _epp(c), c["result"]["compute_bound"]
    return e["mean_step_s"] / b["physical_limit_s"] - 1, e["mean_step_s"] / b["bound_s"] - 1


def _row(c):
    r = c["result"]
    ms = r.get("methods", {})
    e = _epp(c)
    name = "%s, %dK, %d st" % (NAMES[c["model"]], c["context"] // 1024, c["stages"])
    if not e.get("feasible"):
        return "| %s | %s | %s | infeasible |||||||" % (name, c["split"], _layers(c))
    b = r["compute_bound"]
    return "| %s | %s (%s) | %s | %.3f | %.3f | %.3f | %s | %s | %s | %s | %s | %s |" % (
        name,
        c["split"],
        r.get("layer_split", "?"),
        _layers(c),
        e["mean_step_s"],
        b["bound_s"],
        b["physical_limit_s"],
        pct(e["mean_step_s"] / b["physical_limit_s"] - 1),
        pct(b["bound_s"] / b["physical_limit_s"] - 1),
        cell(ms["seq1f1b static"], "mean_step_s", "%.3f") or _infeasible(ms["seq1f1b static"], c),
        cell(ms["seq1f1b static"], "speedup", "%.2fx") or "",
        cell(ms["seq1f1b best"], "speedup", "%.2fx") or "",
        cell(ms["batch static"], "speedup", "%.2fx") or "",
    )


def table(cases):
    out = table_head(
        "case",
        "split asked (chosen)",
        "layers per stage",
        "EPP (s)",
        "busiest stage (s)",
        "physical limit (s)",
        "EPP over limit",
        "busiest over limit",
        "Seq1F1B static (s)",
        "vs Seq1F1B static",
        "vs Seq1F1B per-step best",
        "vs batch static",
    )
    return out + [_row(c) for c in cases]


def candidates(cases):
    """The splits `--layers-per-stage balanced` weighed, per balanced case."""
    out = []
    for c in cases:
        cands = c["result"].get("layer_split_candidates") or []
        if not c["split"].startswith("balanced") or not cands:
            continue
        parts = []
        for k in cands:
            text = "%s [%s] bound %.3f s" % (
                k["name"],
                " ".join(str(n) for n in k["layers_per_stage"]),
                k["bound_s"],
            )
            if not k["planned"]:
                text += ", not planned"
            elif "mean_step_s" in k:
                text += ", EPP %.3f s" % k["mean_step_s"]
            else:
                text += ", EPP feasible on %d steps" % k["feasible_steps"]
            parts.append(text + (" (chosen)" if k["chosen"] else ""))
        out.append("- %s, %s: %s." % (NAMES[c["model"]], c["split"], "; ".join(parts)))
    return out


def targets(cases):
    """The issue's two targets at the target model: on which splits and head placements each is
    met ("none" when on none)."""
    near, fast = [], []
    splits = ["even", "balanced", "even" + SPREAD, "balanced" + SPREAD, "even" + IDEAL]
    for split in splits + [h + ZERO_BUBBLE for h in ZERO_BUBBLE_HEADS]:
        c = _find(cases, TARGET["model"], split)
        if not _epp(c).get("feasible"):
            continue
        if _over(c)[0] <= TARGET["over_limit"]:
            near.append(split)
        s = c["result"]["methods"]["seq1f1b static"]
        if s.get("feasible") and s["speedup"] >= TARGET["speedup"]:
            fast.append(split)
    return ", ".join(near) or "none", ", ".join(fast) or "none"


def head_in_layers(c):
    """The head's (and loss's) compute in decoder layers, from the even split's stage compute:
    the last stage's excess over the others' mean, over one of their layers."""
    work = c["result"]["compute_bound"]["stage_compute_s"]
    others = sum(work[:-1]) / (len(work) - 1)
    per_stage = sum(c["result"]["layers_per_stage"][:-1]) / (len(work) - 1)
    return (work[-1] - others) / (others / per_stage)


def whole_layers(cases):
    """The numbers of "What whole layers can do"."""
    heads = {m: head_in_layers(_find(cases, m, "even")) for m in MODELS}
    gain, floor, over_busiest = {}, {}, {}
    for m in MODELS:
        even, bal = _find(cases, m, "even"), _find(cases, m, "balanced")
        if _epp(even).get("feasible") and _epp(bal).get("feasible"):
            gain[m] = _epp(even)["mean_step_s"] / _epp(bal)["mean_step_s"]
            b = bal["result"]["compute_bound"]
            floor[m] = b["bound_s"] / b["physical_limit_s"] - 1
            over_busiest[m] = _epp(bal)["mean_step_s"] / b["bound_s"] - 1
    target = _find(cases, TARGET["model"], "even")["result"]["layers_per_stage"][0]
    even8, bal8 = _find(cases, "llama3-8b", "even"), _find(cases, "llama3-8b", "balanced")
    s8 = even8["result"]["methods"]["seq1f1b static"]
    na = "n/a (infeasible)"
    return dict(
        head_layers=", ".join("%.2f (%s)" % (heads[m], NAMES[m]) for m in MODELS),
        target_layers=target,
        target_layers_less=target - 1,
        target_layers_more=target + 1,
        target_head="%.2f" % heads[TARGET["model"]],
        target_floor=pct(floor[TARGET["model"]]) if TARGET["model"] in floor else na,
        target_over_busiest=pct(over_busiest[TARGET["model"]])
        if TARGET["model"] in over_busiest
        else na,
        head_8b="%.2f" % heads["llama3-8b"],
        gain_8b="%.3fx" % gain["llama3-8b"] if "llama3-8b" in gain else na,
        floor_8b=pct(floor["llama3-8b"]) if "llama3-8b" in floor else na,
        seq1f1b_even_8b="fits" if s8.get("feasible") else _infeasible(s8, even8),
        last_stage_8b=" ".join(str(n) for n in bal8["result"]["layers_per_stage"][-1:]),
        balanced_gains=", ".join("%s %.3fx" % (NAMES[m], g) for m, g in gain.items()),
        crossed=crossed(cases),
    )


def crossed(cases):
    """EPP on the balanced split against static Seq1F1B on the even one: what balancing EPP alone
    would claim, for comparison with the fair rows."""
    out = []
    for model in MODELS:
        e = _epp(_find(cases, model, "balanced"))
        s = _find(cases, model, "even")["result"].get("methods", {}).get("seq1f1b static", {})
        if e.get("feasible") and s.get("feasible"):
            out.append("%s %.2fx" % (NAMES[model], s["mean_step_s"] / e["mean_step_s"]))
    return ", ".join(out) or "none feasible"


def _seconds(c, key="mean_step_s"):
    s = c["result"].get("methods", {}).get("seq1f1b static", {})
    return "%.3f" % s[key] if s.get("feasible") else "infeasible"


def spread_table(cases):
    """Per model and split: EPP with and without the spread head, and static Seq1F1B."""
    out = table_head(
        "case",
        "EPP with spread head (s)",
        "without (s)",
        "gain",
        "over limit",
        "over busiest stage (without)",
        "recompute s (without)",
        "bubble (without)",
        "static Seq1F1B s (without)",
    )
    for model in SPREAD_MODELS:
        for split in SPLITS:
            c, plain = _find(cases, model, split + SPREAD), _find(cases, model, split)
            e, p = _epp(c), _epp(plain)
            name = "%s, %s split" % (NAMES[model], split)
            if not e.get("feasible"):
                out.append("| %s | infeasible |||||||" % name)
                continue
            over, over_busiest = _over(c)
            plain_busiest = pct(_over(plain)[1]) if p.get("feasible") else "-"
            out.append(
                "| %s | %.3f | %s | %s | %s | %s (%s) | %.2f (%s) | %s (%s) | %s (%s) |"
                % (
                    name,
                    e["mean_step_s"],
                    "%.3f" % p["mean_step_s"] if p.get("feasible") else "infeasible",
                    "%.3fx" % (p["mean_step_s"] / e["mean_step_s"]) if p.get("feasible") else "-",
                    pct(over),
                    pct(over_busiest),
                    plain_busiest,
                    e["recompute_s"],
                    "%.2f" % p["recompute_s"] if p.get("feasible") else "-",
                    pct(e["bubble_fraction"]),
                    pct(p["bubble_fraction"]) if p.get("feasible") else "-",
                    _seconds(c),
                    _seconds(plain),
                )
            )
    return out


def ideal_table(cases):
    """The ideal even head per model: how far EPP stays above the limit, and why."""
    out = table_head(
        "model",
        "EPP (s)",
        "spread head (s)",
        "over limit",
        "of it recompute",
        "of it fill, drain, stalls",
        "bubble",
        "static Seq1F1B (s)",
        "EPP speed-up (spread head)",
    )
    for model in SPREAD_MODELS:
        c, spread = _find(cases, model, "even" + IDEAL), _find(cases, model, "even" + SPREAD)
        e = _epp(c)
        if not e.get("feasible"):
            out.append("| %s | infeasible |||||||" % NAMES[model])
            continue
        over, _ = _over(c)
        recompute = (
            e["recompute_s"] / c["stages"] / c["result"]["compute_bound"]["physical_limit_s"]
        )
        s = c["result"]["methods"]["seq1f1b static"]
        ss = spread["result"]["methods"].get("seq1f1b static", {})
        out.append(
            "| %s | %.3f | %.3f | %s | %s | %s | %s | %s | %s (%s) |"
            % (
                NAMES[model],
                e["mean_step_s"],
                _epp(spread)["mean_step_s"],
                pct(over),
                pct(recompute),
                pct(over - recompute),
                pct(e["bubble_fraction"]),
                _seconds(c),
                "%.2fx" % s["speedup"] if s.get("feasible") else "-",
                "%.2fx" % ss["speedup"] if ss.get("feasible") else "-",
            )
        )
    return out


def zero_bubble_table(cases):
    """At the target model, per head placement: EPP with zero bubble tried and without."""
    out = table_head(
        "head",
        "EPP with zero bubble (s)",
        "without (s)",
        "gain",
        "steps split",
        "over limit (without)",
        "recompute s (without)",
        "bubble (without)",
        "vs static Seq1F1B (without)",
    )
    for head in ZERO_BUBBLE_HEADS:
        c = _find(cases, TARGET["model"], head + ZERO_BUBBLE)
        plain = _find(cases, TARGET["model"], head)
        e, p = _epp(c), _epp(plain)
        name = HEAD_NAMES[head]
        if not (e.get("feasible") and p.get("feasible")):
            out.append("| %s | infeasible ||||||||" % name)
            continue
        s = c["result"]["methods"]["seq1f1b static"]
        ps = plain["result"]["methods"]["seq1f1b static"]
        out.append(
            "| %s | %.3f | %.3f | %.3fx | %d of %d | %s (%s) | %.2f (%.2f) | %s (%s) | %s (%s) |"
            % (
                name,
                e["mean_step_s"],
                p["mean_step_s"],
                p["mean_step_s"] / e["mean_step_s"],
                e["zero_bubble_steps"],
                c["steps"],
                pct(_over(c)[0]),
                pct(_over(plain)[0]),
                e["recompute_s"],
                p["recompute_s"],
                pct(e["bubble_fraction"]),
                pct(p["bubble_fraction"]),
                "%.2fx" % s["speedup"] if s.get("feasible") else "-",
                "%.2fx" % ps["speedup"] if ps.get("feasible") else "-",
            )
        )
    return out


HEAD_NAMES = {
    "even": "head on the last stage",
    "even" + SPREAD: "spread head",
    "even" + IDEAL: "ideal even head",
}


def breakdown_table(cases):
    """Where EPP's step goes at the target model, per head placement (with zero bubble tried
    and without), over stages and steps."""
    names = dict(HEAD_NAMES)
    names.update({h + ZERO_BUBBLE: HEAD_NAMES[h] + ", zero bubble" for h in ZERO_BUBBLE_HEADS})
    out = table_head("head", "step (s)", "compute", "recompute", "fill", "drain", "stalls")
    for split, name in names.items():
        b = _find(cases, TARGET["model"], split)["result"].get("epp_breakdown")
        if b:
            out.append(
                "| %s | %.3f | %.3f | %.3f | %.3f | %.3f | %.3f |"
                % (
                    name,
                    b["step_s"],
                    b["compute_s"],
                    b["recompute_s"],
                    b["fill_s"],
                    b["drain_s"],
                    b["stalls_s"],
                )
            )
    return out


def values(data):
    """Every placeholder of the section, from balance_study.json's `data`."""
    cases, meta = data["cases"], data["meta"]
    out = case_values(meta, "b_")
    out.update(
        b_context="%dK" % (meta["context"] // 1024),
        b_target_model=NAMES[TARGET["model"]],
        b_target_over=pct(TARGET["over_limit"], 0),
        b_target_speedup="%.1fx" % TARGET["speedup"],
        balance_table=lines(table(_wikipedia(cases))),
        code_balance_table=lines(table([c for c in cases if c["split"].endswith(CODE)])),
        balance_candidates=lines(candidates(cases)),
        b_within_limit_on=targets(cases)[0],
        b_speedup_on=targets(cases)[1],
        head_replicas=", ".join(
            "%.2f GiB at %s" % (HEAD_PARAMS[m] * 16 / 2**30, NAMES[m]) for m in SPREAD_MODELS
        ),
        spread_table=lines(spread_table(cases)),
        ideal_table=lines(ideal_table(cases)),
        zero_bubble_table=lines(zero_bubble_table(cases)),
        breakdown_table=lines(breakdown_table(cases)),
        b_tool_command=meta["tool_command"],
        b_seconds="%.0f" % meta["seconds"],
        b_machine="%s, %s cores" % (meta["machine"], meta["cores"]),
        b_date=meta["date"],
    )
    out.update(whole_layers(cases))
    return out
