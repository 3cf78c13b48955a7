"""The cluster study's target, EPP at least 1.3x static Seq1F1B and batch-level at 96K and 8
stages: the verdict per model and, where it is missed, how far the busiest stage's compute lets
any plan go."""

from lib.cluster_tables import cell, infeasible_text, method_label
from lib.plan_tool import LABELS, mean
from lib.simulated_case import kinds

TARGET = dict(context=98304, stages=8, speedup=1.3, against=["seq1f1b", "batch"])

# Decoder layers of the built-in shapes (src/cost/model_shape.cc), for the split's granularity.
LAYERS = {"llama-7b": 32, "llama-13b": 40, "llama-30b": 60}


def head_note(bound, case):
    work = bound["stage_compute_s"]
    if bound["busiest_stage"] != len(work) - 1 or len(work) < 2:
        return " (the even layer split gives middle stages an extra layer when stages do not divide the layers)"
    head = work[-1] / mean(work[:-1]) - 1
    per_stage = LAYERS[case["model"]] / case["stages"]
    return (
        (
            ", %.1f%% above the other stages' mean: the LM head. No layer split offsets it: one layer is %.0f%% "
            "of a stage of %g layers, so moving one off the last stage would make another stage busier than the "
            "last one is now" % (100 * head, 100 / per_stage, per_stage)
        )
        if head < 1 / per_stage
        else (
            ", %.1f%% above the other stages' mean: the LM head, which the even layer split does not offset"
            % (100 * head)
        )
    )


def shortfall(c, ms, short):
    """Why EPP misses the target: how close it is to the busiest stage, and what that bound allows."""
    b = c["result"]["compute_bound"]
    text = [
        "  Stage compute without recompute ranges %.3f..%.3f s per step; the busiest is stage %d of 0..%d%s. "
        "EPP's step is %.1f%% above the busiest stage's compute (the mean of each step's maximum, %.3f s)."
        % (
            min(b["stage_compute_s"]),
            max(b["stage_compute_s"]),
            b["busiest_stage"],
            c["stages"] - 1,
            head_note(b, c),
            100 * (ms["epp"]["mean_step_s"] / b["bound_s"] - 1),
            b["bound_s"],
        )
    ]
    for m in short:
        s = ms[m + " static"]
        limit = s["mean_step_s"] / b["bound_s"]
        text.append(
            " Static %s takes %.3f s (bubble %.1f%%, %.2f s recompute summed over stages), so no plan "
            "that runs the same compute on that stage can beat it by more than %.3fx: %s."
            % (
                LABELS[m],
                s["mean_step_s"],
                100 * s["bubble_fraction"],
                s["recompute_s"],
                limit,
                "the target is out of reach in this model"
                if limit < TARGET["speedup"]
                else "the target is within that bound; EPP would need %.3f s, %.2f%% less than its %.3f s"
                % (
                    s["mean_step_s"] / TARGET["speedup"],
                    100 * (1 - s["mean_step_s"] / TARGET["speedup"] / ms["epp"]["mean_step_s"]),
                    ms["epp"]["mean_step_s"],
                ),
            )
        )
    return "".join(text) + "\n"


def target_lines(cases):
    """Per model at the target's context and stages: its speed-ups, met or not, and where missed,
    how far the busiest stage's compute lets any plan go."""
    out = []
    for c in cases:
        if c["context"] != TARGET["context"] or c["stages"] != TARGET["stages"]:
            continue
        ms = c["result"].get("methods")
        if not ms or not ms["epp"]["feasible"]:
            fits = (
                ", ".join(
                    "%s %d"
                    % (method_label(m, kind), c["steps"] - len(ms[key].get("infeasible_steps", [])))
                    for key, m, kind in kinds()
                )
                if ms
                else "none"
            )
            out.append(
                "- %s: not assessable at %g GiB per stage: EPP is %s. Steps that fit, of %d: %s "
                "(reasons above).\n"
                % (c["model"], c["memory_gib"], infeasible_text(c, ms), c["steps"], fits)
            )
            continue
        ratios = {m: ms[m + " static"].get("speedup") for m in TARGET["against"]}
        short = [m for m, r in ratios.items() if r is not None and r < TARGET["speedup"]]
        out.append(
            "- %s: %s: %s.\n"
            % (
                c["model"],
                ", ".join(
                    "%s %s" % (LABELS[m], "%.3fx" % r if r else "infeasible (EPP wins by default)")
                    for m, r in ratios.items()
                ),
                "met" if not short else "not met against " + ", ".join(LABELS[m] for m in short),
            )
        )
        out.append(
            "  Against the per-step best (each step its own setting): %s.\n"
            % ", ".join(
                "%s %s" % (LABELS[m], cell(ms[m + " best"], "speedup", "%.3fx") or "infeasible")
                for m in TARGET["against"]
            )
        )
        if short:
            out.append(shortfall(c, ms, short))
    return out
