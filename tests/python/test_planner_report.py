"""The planner's report reaches Python: Plan.summary()["planner"] (the trainer's result.plan)
holds the planning call's CPU time, EPP's candidates, and the step time's lower bound
(plan/planner_report.h)."""

from __future__ import annotations

import json

from infinipipe import _C

# The tiny LLaMA of the examples on 2 stages, analytic CPU costs.
SHAPE = dict(
    name="tiny", layers=4, hidden=64, heads=4, kv_heads=2, ffn=176, vocab=512, bytes_per_element=4
)
LENGTHS = [3000, 120, 800, 45, 2000, 9]


def test_summary_carries_the_planners_report():
    cost = _C.plan.CostModel.analytic(json.dumps(SHAPE), "cpu", [2, 2])
    epp = _C.plan.plan_step(LENGTHS, cost, 4 * 2**30, "epp").summary()
    report = epp["planner"]
    assert set(report) == {
        "cpu_ms",
        "candidates",
        "tried",
        "pruned",
        "recomputed",
        "step_time_lower_bound_s",
        "predicted_over_bound",
        "work",
        "budget_exhausted",
    }
    assert report["cpu_ms"] > 0
    assert report["work"] > 0 and report["budget_exhausted"] is False
    assert report["candidates"] == report["tried"] + report["pruned"] > 1
    assert 0 < report["step_time_lower_bound_s"] <= epp["predicted_step_s"]
    ratio = epp["predicted_step_s"] / report["step_time_lower_bound_s"]
    assert abs(report["predicted_over_bound"] - ratio) < 1e-12 * ratio
    batch = _C.plan.plan_step(LENGTHS, cost, 4 * 2**30, "batch").summary()["planner"]
    assert (batch["candidates"], batch["tried"], batch["pruned"]) == (1, 1, 0)
    # The bound belongs to the step, not to the method.
    assert batch["step_time_lower_bound_s"] == report["step_time_lower_bound_s"]


def test_summary_counts_the_heads_each_stage_runs():
    """heads_per_stage: per stage, the chunks whose LM head and loss run there. Without the
    spread head the last stage's forwards run them all; with it, one per H action in the
    schedule (docs/design.md, "Spread head"). A vocabulary of 8192 makes the head heavy enough
    that the planner spreads it."""
    shape = dict(SHAPE, vocab=8192)
    cost = _C.plan.CostModel.analytic(json.dumps(shape), "cpu", [2, 2])
    for method in ("seq1f1b", "epp"):
        plain = _C.plan.plan_step(LENGTHS, cost, 4 * 2**30, method, k=4, token_cap=3000)
        assert plain.summary()["heads_per_stage"] == [0, plain.summary()["chunks"]]
        spread = _C.plan.plan_step(
            LENGTHS, cost, 4 * 2**30, method, k=4, token_cap=3000, spread_head=True
        )
        summary = spread.summary()
        h_actions = [sum(a.startswith("H") for a in stage) for stage in spread.schedule]
        assert summary["heads_per_stage"] == h_actions, method
        assert sum(h_actions) == summary["chunks"] and min(h_actions) > 0, method
