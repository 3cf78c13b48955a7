# Over 400 lines for a reason: one study, the layer split balanced against the head, its cases
# and its section of docs/cluster_study.md, read together.
"""The cluster study's balanced-stages section (issue 13): EPP and the baselines on the even layer
split and on the split `infinipipe-plan --layers-per-stage balanced` chooses (the same split for
every method), against the physical limit: each step's compute without recompute spread evenly
over the stages. Then the same with the spread head (`--spread-head`, docs/design.md "Spread
head": each chunk's LM head on a stage the planner assigns, for every method) at LLaMA-13B and
LLaMA-3-8B."""

from lib import step_breakdown
from lib.cluster_tables import cell
from lib.simulated_case import run_case

MODELS = ["llama-7b", "llama-13b", "llama3-8b"]
NAMES = {"llama-7b": "LLaMA-7B", "llama-13b": "LLaMA-13B", "llama3-8b": "LLaMA-3-8B"}
SPLITS = {"even": [], "balanced": ["--layers-per-stage", "balanced"]}
# The targets at LLaMA-13B, 96K, 8 stages.
TARGET = dict(model="llama-13b", over_limit=0.03, speedup=1.4)
MARK = "balance-study"


# The spread head's cases: these models on both splits, every method with --spread-head.
SPREAD_MODELS = ["llama-13b", "llama3-8b"]
SPREAD = " + spread head"
# The ceiling of any head balancing: the head's work, logits and parameters shared evenly by the
# stages with free communication (`--ideal-even-head`, a what-if), on the even split.
IDEAL = " + ideal even head"


def run(tool, base, stages=8, context=98304, log=None):
    """Every model on both splits, then SPREAD_MODELS on both with the spread head; per case its
    summary (simulated_case.run_case)."""
    out = []
    plans = [(m, split, extra) for m in MODELS for split, extra in SPLITS.items()]
    plans += [
        (m, split + SPREAD, extra + ["--spread-head"])
        for m in SPREAD_MODELS
        for split, extra in SPLITS.items()
    ]
    plans += [(m, "even" + IDEAL, ["--ideal-even-head"]) for m in SPREAD_MODELS]
    for model, split, extra in plans:
        case = dict(base, model=model, stages=stages, context=context)
        result = run_case(tool, case, extra)
        if model == TARGET["model"] and split.startswith("even"):
            result["epp_breakdown"] = step_breakdown.run(tool, case, extra)
        out.append(dict(case, split=split, result=result))
        if log:
            log("balance: %s, %s split: %.1f s" % (model, split, result["seconds"]))
    return out


def _infeasible(s, c):
    return "infeasible on %d of %d steps" % (len(s.get("infeasible_steps", [])), c["steps"])


def _row(c):
    r = c["result"]
    ms = r.get("methods", {})
    e = ms.get("epp", {})
    name = "%s, %dK, %d st" % (NAMES[c["model"]], c["context"] // 1024, c["stages"])
    layers = " ".join(str(n) for n in r.get("layers_per_stage", []))
    if not e.get("feasible"):
        return "| %s | %s | %s | infeasible |||||||" % (name, c["split"], layers)
    b = r["compute_bound"]
    return "| %s | %s (%s) | %s | %.3f | %.3f | %.3f | %.1f%% | %.1f%% | %s | %s | %s | %s |" % (
        name,
        c["split"],
        r.get("layer_split", "?"),
        layers,
        e["mean_step_s"],
        b["bound_s"],
        b["physical_limit_s"],
        100 * (e["mean_step_s"] / b["physical_limit_s"] - 1),
        100 * (b["bound_s"] / b["physical_limit_s"] - 1),
        cell(ms["seq1f1b static"], "mean_step_s", "%.3f") or _infeasible(ms["seq1f1b static"], c),
        cell(ms["seq1f1b static"], "speedup", "%.2fx") or "",
        cell(ms["seq1f1b best"], "speedup", "%.2fx") or "",
        cell(ms["batch static"], "speedup", "%.2fx") or "",
    )


def _find(cases, model, split):
    return next(c for c in cases if c["model"] == model and c["split"] == split)


def _verdict(cases):
    out = []
    for split in ("even", "balanced", "even" + SPREAD, "balanced" + SPREAD, "even" + IDEAL):
        c = _find(cases, TARGET["model"], split)
        ms, b = c["result"]["methods"], c["result"]["compute_bound"]
        over = ms["epp"]["mean_step_s"] / b["physical_limit_s"] - 1
        speedup = ms["seq1f1b static"].get("speedup")
        out.append(
            "- %s%s (layers %s): EPP %.3f s, %.1f%% above the physical limit %.3f s (target "
            "3%%: %s); static Seq1F1B on the same split %s, %s (target %.1fx: %s).\n"
            % (
                c["split"],
                " split" if c["split"] in SPLITS else "",
                " ".join(str(n) for n in c["result"]["layers_per_stage"]),
                ms["epp"]["mean_step_s"],
                100 * over,
                b["physical_limit_s"],
                "met" if over <= TARGET["over_limit"] else "not met",
                "%.3f s" % ms["seq1f1b static"]["mean_step_s"] if speedup else "infeasible",
                "%.2fx" % speedup if speedup else "-",
                TARGET["speedup"],
                "met" if speedup and speedup >= TARGET["speedup"] else "not met",
            )
        )
    return out


def _crossed(cases):
    """EPP on the balanced split against each static baseline on the even one: what balancing
    EPP alone would claim, for comparison with the fair rows."""
    out = []
    for model in MODELS:
        even, bal = _find(cases, model, "even"), _find(cases, model, "balanced")
        e = bal["result"].get("methods", {}).get("epp", {})
        s = even["result"].get("methods", {}).get("seq1f1b static", {})
        if e.get("feasible") and s.get("feasible"):
            out.append(
                "%s %.2fx" % (NAMES[model], s["mean_step_s"] / e["mean_step_s"]),
            )
    return ", ".join(out)


def _candidates(cases):
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
        out.append("- %s, %s: %s.\n" % (NAMES[c["model"]], c["split"], "; ".join(parts)))
    return out


def section(cases, meta):
    """The section's markdown, between its markers, from run()'s cases."""
    text = [
        "<!-- %s: start -->\n## Balanced stages\n\n" % MARK,
        """The last stage also runs the final norm, the LM head and the loss (cost model: the head's
GEMM, 2 x hidden x vocabulary FLOPs per token forward, twice that backward), so with an even
layer split every other stage waits on it. `infinipipe-plan --layers-per-stage balanced`
(planner/stage_balance.h) chooses the split from per-stage costs: each stage's compute over the
sampled steps is l_p x (one layer's forward and backward) + the embedding (first stage) or the
head (last); water filling gives the split with the least busiest stage (exact, tested against
brute force); then EPP plans the steps on that split, on the even one, and on the balanced one
with a layer moved off the first stage (which holds the most chunks in flight under 1F1B) or off
the last, and the fastest predicted is kept (a candidate whose busiest-stage bound is already no
better than the best plan found is not planned). Every method then runs on the chosen split, so
the baselines get the same stage balance as EPP. From Python, `infinipipe.balanced_layer_split(
config, steps, stages)` and `infinipipe.choose_layer_split(config, steps, stages, budget)` give
the same split for the trainer's `layer_split` (python/infinipipe/stage_balance.py).

Settings as above: %s lengths, batch %d, %s, %g GiB per stage, %d sampled steps (seeds %d..%d),
context %dK, %d stages. **Physical limit**: each step's compute without recompute (EPP's plan, summed over
stages) divided by the stages, averaged over the steps: no split of the layers and no schedule
beats it. **Busiest stage**: the mean of each step's busiest stage compute without recompute, the
bound of this split; its gap to the limit is what whole layers cannot remove. Speed-ups are the
baseline's mean step over EPP's on the same split.

| case | split asked (chosen) | layers per stage | EPP (s) | busiest stage (s) | physical limit (s) | EPP over limit | busiest over limit | Seq1F1B static (s) | vs Seq1F1B static | vs Seq1F1B per-step best | vs batch static |
|---|---|---|---|---|---|---|---|---|---|---|---|
"""
        % (
            meta["distribution"],
            meta["batch"],
            meta["hardware"],
            meta["memory_gib"],
            meta["steps"],
            meta["seed"],
            meta["seed"] + meta["steps"] - 1,
            meta["context"] // 1024,
            meta["stages"],
        ),
    ]
    text += [_row(c) + "\n" for c in cases]
    text.append("\nThe splits weighed (bound: mean busiest-stage compute over the steps):\n\n")
    text += _candidates(cases)
    text.append("\nAgainst the issue's targets (%s, 96K, 8 stages):\n\n" % NAMES[TARGET["model"]])
    text += _verdict(cases)
    text.append(
        "\nFor comparison only (not a fair pairing): EPP on the balanced split over static "
        "Seq1F1B on the even split: %s.\n" % _crossed(cases)
    )
    text.append(discussion(cases))
    text.append(
        "\nReproduce: `%s` (%.0f s on %s, %s cores, %s), which runs per model and split\n\n```\n%s\n```\n"
        % (
            meta["command"],
            meta["seconds"],
            meta["machine"],
            meta["cores"],
            meta["date"],
            meta["tool_command"],
        )
    )
    text.append("<!-- %s: end -->\n" % MARK)
    return text


def head_in_layers(c):
    """The head's (and loss's) compute in decoder layers, from the even split's stage compute:
    the last stage's excess over the others' mean, over one of their layers."""
    work = c["result"]["compute_bound"]["stage_compute_s"]
    others = sum(work[:-1]) / (len(work) - 1)
    per_stage = sum(c["result"]["layers_per_stage"][:-1]) / (len(work) - 1)
    return (work[-1] - others) / (others / per_stage)


def discussion(cases):
    """What the rows show and what remains, with the numbers from the rows."""
    heads = {m: head_in_layers(_find(cases, m, "even")) for m in MODELS}
    gain = {}
    floor = {}
    over_busiest = {}
    for m in MODELS:
        even, bal = _find(cases, m, "even"), _find(cases, m, "balanced")
        if even["result"]["methods"]["epp"].get("feasible") and bal["result"]["methods"]["epp"].get(
            "feasible"
        ):
            gain[m] = (
                even["result"]["methods"]["epp"]["mean_step_s"]
                / bal["result"]["methods"]["epp"]["mean_step_s"]
            )
            b = bal["result"]["compute_bound"]
            floor[m] = b["bound_s"] / b["physical_limit_s"] - 1
            over_busiest[m] = bal["result"]["methods"]["epp"]["mean_step_s"] / b["bound_s"] - 1
    even8 = _find(cases, "llama3-8b", "even")["result"]["methods"]["seq1f1b static"]
    memory = (
        ""
        if even8.get("feasible")
        else " On the even split static Seq1F1B does not fit (%s; the tool's reason names the "
        "last stage, which also keeps the loss's log-softmax, 128K entries per token, for the "
        "backward); on the balanced split, with %d layers there instead of 4, it fits, so its "
        "speed-ups are on that split only."
        % (
            _infeasible(even8, _find(cases, "llama3-8b", "even")),
            _find(cases, "llama3-8b", "balanced")["result"]["layers_per_stage"][-1],
        )
    )
    return (
        """
**What whole layers can do.** The head is worth %s of one decoder layer's compute over these
steps. At LLaMA-13B a stage holds 5 layers: moving one off the last stage leaves it 4 + %.2f but
gives another stage 6, busier than 5 + %.2f, so the balanced split is the even one and nothing
changes; its busiest stage stays %.1f%% above the physical limit, and EPP, %.1f%% above its
busiest stage, cannot come within 3%% of the limit on any split of whole layers. The same
holds at LLaMA-7B (4 layers a stage, head %.2f layers). With LLaMA-3-8B's 128K vocabulary the
head is %.2f layers, the last stage gives up layers, and EPP's step is %s faster than on the even
split; what is left above the limit (%.1f%%) is the granularity of whole layers again.%s EPP's
gain from the balanced split: %s.

%s
**Why not vocabulary parallelism.** It divides the head's work over all stages too (Yeung et al.
2024, arXiv 2411.05288), but with a cross-stage softmax reduction for every chunk, a collective
of every stage that EPP's chunks of very different sizes would turn into a stall, and a schedule
of its own; the spread head needs only point-to-point messages the size of a pipeline send, at
the price of a head replica per stage (docs/design.md, "Spread head"). The uneven split and the
spread head combine: the C++ and Python stages, the cost model, the plan and the simulator take
any layers per stage, and pipelined steps on uneven splits and with spread heads give the
unpipelined model's loss and gradients (tests/python/runtime/test_uneven_split.py and
test_spread_head.py, float64, 2 and 4 ranks).
"""
        % (
            ", ".join("%.2f (%s)" % (heads[m], NAMES[m]) for m in MODELS),
            heads["llama-13b"],
            heads["llama-13b"],
            100 * floor.get("llama-13b", float("nan")),
            100 * over_busiest.get("llama-13b", float("nan")),
            heads["llama-7b"],
            heads["llama3-8b"],
            "%.3fx" % gain["llama3-8b"] if "llama3-8b" in gain else "not comparable (infeasible)",
            100 * floor.get("llama3-8b", float("nan")),
            memory,
            ", ".join("%s %.3fx" % (NAMES[m], g) for m, g in gain.items()),
            spread_text(cases),
        )
        + ideal_text(cases)
    )


# The head's parameters (LM head and final norm gain, hidden x vocabulary + hidden; shapes of
# src/cost/model_shape.cc) at 16 bytes each (bf16 weights and gradients, fp32 Adam state and
# master weights: CostCoefficients::model_state_bytes_per_param): the replica a stage running
# heads keeps.
HEAD_PARAMS = {"llama-13b": 5120 * 32000 + 5120, "llama3-8b": 4096 * 128256 + 4096}


def _epp_over(c):
    """EPP's mean step over the physical limit and over its busiest stage, minus 1."""
    e, b = c["result"]["methods"]["epp"], c["result"]["compute_bound"]
    return e["mean_step_s"] / b["physical_limit_s"] - 1, e["mean_step_s"] / b["bound_s"] - 1


def spread_text(cases):
    """The spread head's rows in words, per model and split, from the rows' numbers."""
    parts = []
    for model in SPREAD_MODELS:
        for split in SPLITS:
            c, plain = _find(cases, model, split + SPREAD), _find(cases, model, split)
            ms, pms = c["result"].get("methods", {}), plain["result"].get("methods", {})
            if not ms.get("epp", {}).get("feasible"):
                parts.append("%s, %s split: EPP infeasible" % (NAMES[model], split))
                continue
            over, over_busiest = _epp_over(c)
            s, ps = ms["seq1f1b static"], pms.get("seq1f1b static", {})
            parts.append(
                "%s, %s split (chosen: %s): EPP %.3f s, %s without the spread head, %.1f%% above "
                "the limit and %.1f%% above its busiest stage; static Seq1F1B %s (%s without)"
                % (
                    NAMES[model],
                    split,
                    " ".join(str(n) for n in c["result"]["layers_per_stage"]),
                    ms["epp"]["mean_step_s"],
                    "%.3fx faster than" % (pms["epp"]["mean_step_s"] / ms["epp"]["mean_step_s"])
                    if pms.get("epp", {}).get("feasible")
                    else "infeasible",
                    100 * over,
                    100 * over_busiest,
                    "%.3f s, EPP %.2fx" % (s["mean_step_s"], s["speedup"])
                    if s.get("feasible")
                    else _infeasible(s, c),
                    "%.3f s" % ps["mean_step_s"] if ps.get("feasible") else "infeasible",
                )
            )
    return """**The spread head ("+ spread head" rows).** `infinipipe-plan --spread-head` runs each
chunk's LM head, loss and the head's backward as one action on a stage the planner assigns
(docs/design.md, "Spread head"; planner/head_spread.h), for every method: EPP's plan (its winner and
its runners-up) and each baseline's plan at its setting are spread where the simulator finds it
faster, else kept as they were. Each stage gets the share of the heads' work that fills it to
the others' level, dealt through the step so that no stage takes its heads in a lump; the schedule
is 1F1B over one more stage (the heads as a virtual last stage) merged back. The price is memory:
a stage running heads keeps a replica of the head (%s of weights, gradients and optimizer
state), and the last stage holds one more chunk in flight; where that does not fit, the plan
recomputes or stays unspread. %s.%s
""" % (
        ", ".join(
            "%.2f GiB at %s" % (HEAD_PARAMS[m] * 16 / 2**30, NAMES[m]) for m in SPREAD_MODELS
        ),
        "; ".join(parts),
        _spread_verdict(cases),
    )


def _spread_verdict(cases):
    """The best spread-head row at the target model against its unspread row, in numbers."""
    pairs = [(_find(cases, TARGET["model"], split + SPREAD), split) for split in SPLITS]
    pairs = [p for p in pairs if p[0]["result"].get("methods", {}).get("epp", {}).get("feasible")]
    if not pairs:
        return ""
    c, split = min(pairs, key=lambda p: p[0]["result"]["methods"]["epp"]["mean_step_s"])
    plain = _find(cases, TARGET["model"], split)
    if not plain["result"].get("methods", {}).get("epp", {}).get("feasible"):
        return ""
    ms, pms = c["result"]["methods"], plain["result"]["methods"]
    b, pb = c["result"]["compute_bound"], plain["result"]["compute_bound"]
    over, over_busiest = _epp_over(c)
    _, plain_over_busiest = _epp_over(plain)
    s, ps = ms["seq1f1b static"], pms["seq1f1b static"]
    seq = (
        "static Seq1F1B goes from %.3f s to %.3f s with it (%s), so EPP's speed-up over it is "
        "%.2fx (target %.1fx: %s)"
        % (
            ps["mean_step_s"],
            s["mean_step_s"],
            s["setting"],
            s["speedup"],
            TARGET["speedup"],
            "met" if s["speedup"] >= TARGET["speedup"] else "not met",
        )
        if s.get("feasible") and ps.get("feasible")
        else "static Seq1F1B is not feasible on both"
    )
    return (
        " At %s (%s split): with the spread head the busiest stage is %.1f%% above the limit (%.1f%% "
        "without) and EPP %.1f%% above its busiest stage (%.1f%% without), with %.2f s of "
        "recompute a step summed over the stages (%.2f s without) and a mean bubble of %.1f%% "
        "(%.1f%% without): EPP ends %.1f%% above the limit (target %.0f%%: %s). The rise above "
        "the busiest stage, with no more recompute than without, is what placing heads costs "
        "in stalls: a stage running one is late for the chunks it passes on, and 1F1B over one "
        "more stage holds one chunk of slack to absorb that. %s."
        % (
            NAMES[TARGET["model"]],
            split,
            100 * (b["bound_s"] / b["physical_limit_s"] - 1),
            100 * (pb["bound_s"] / pb["physical_limit_s"] - 1),
            100 * over_busiest,
            100 * plain_over_busiest,
            ms["epp"]["recompute_s"],
            pms["epp"]["recompute_s"],
            100 * ms["epp"]["bubble_fraction"],
            100 * pms["epp"]["bubble_fraction"],
            100 * over,
            100 * TARGET["over_limit"],
            "met" if over <= TARGET["over_limit"] else "not met",
            seq[0].upper() + seq[1:],
        )
    )


def ideal_text(cases):
    """The ideal even head's rows in words: what no balancing of the head removes."""
    parts = []
    for model in SPREAD_MODELS:
        c, spread = _find(cases, model, "even" + IDEAL), _find(cases, model, "even" + SPREAD)
        ms = c["result"].get("methods", {})
        if not ms.get("epp", {}).get("feasible"):
            parts.append("%s: EPP infeasible" % NAMES[model])
            continue
        e, b = ms["epp"], c["result"]["compute_bound"]
        over, over_busiest = _epp_over(c)
        recompute = e["recompute_s"] / c["stages"] / b["physical_limit_s"]
        s, ss = ms["seq1f1b static"], spread["result"]["methods"].get("seq1f1b static", {})
        se = spread["result"]["methods"]["epp"]
        parts.append(
            "%s: EPP %.3f s (spread head %.3f s), %.1f%% above the limit: %.1f%% recompute "
            "(%.2f s a stage, forced by the %g GiB budget on the long steps) and %.1f%% pipeline "
            "fill, drain and stalls (mean bubble %.1f%%); static Seq1F1B %s, EPP %s (%s with the "
            "spread head)"
            % (
                NAMES[model],
                e["mean_step_s"],
                se["mean_step_s"],
                100 * over,
                100 * recompute,
                e["recompute_s"] / c["stages"],
                c["memory_gib"],
                100 * (over - recompute),
                100 * e["bubble_fraction"],
                "%.3f s" % s["mean_step_s"] if s.get("feasible") else _infeasible(s, c),
                "%.2fx" % s["speedup"] if s.get("feasible") else "-",
                "%.2fx" % ss["speedup"] if ss.get("feasible") else "-",
            )
        )
    return (
        """
**The ceiling of any head balancing ("+ ideal even head" rows).** `infinipipe-plan
--ideal-even-head` is a what-if the executor cannot run (CostModel::with_ideal_even_head): every
stage does 1/d of each chunk's head in its forward and backward and keeps 1/d of the logits and of
the head's parameters, with communication free. That is vocabulary parallelism's best case, and no
placement of the head (the spread head included) can beat it; every method gets it. %s. So
even a perfectly balanced head leaves EPP above the 3%% target at LLaMA-13B: what remains is
recompute the memory budget forces on the long steps and the pipeline's fill, drain and stalls
between chunks of different sizes, not the head; and because the baseline gains from a balanced
head as much as EPP does, the ratio to static Seq1F1B stays below 1.4x. Between the spread head
and this ceiling lies what a finer placement (one chunk's head split by token rows over several
stages) could still gain.
"""
        % "; ".join(parts)
        + breakdown_text(cases)
    )


def breakdown_text(cases):
    """Where EPP's step goes on its busiest stage at the target model, per head placement."""
    names = {"even": "head on the last stage", "even" + SPREAD: "spread head"}
    names["even" + IDEAL] = "ideal even head"
    parts = []
    for split, name in names.items():
        b = _find(cases, TARGET["model"], split)["result"].get("epp_breakdown")
        if not b:
            continue
        parts.append(
            "%s: step %.3f s = compute %.3f + recompute %.3f + fill %.3f + drain %.3f + stalls "
            "%.3f s"
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
    if not parts:
        return ""
    return """
Where EPP's step goes at %s, from the simulated timeline (lib/step_breakdown.py: every step
planned alone with `--trace`), averaged over the stages and the steps: %s. Compute averaged over
the stages is the physical limit; fill is a stage's wait for its first chunk, drain its idle time
after its last action, stalls its waits in between, a slower stage's included. With the head on
the last stage most of the stalls are the other stages waiting for it; once the stages are
balanced, every difference between neighbouring chunks' costs is someone's wait, and those stalls
are what is left besides recompute.
""" % (NAMES[TARGET["model"]], "; ".join(parts))
