"""Plan.predicted_actions: the simulator's time of every compute action, which the simulator
validation compares with each action's measured CPU time (benchmarks/experiments/validate_simulator.py). Its
parts add up to the plan's own predictions."""

from __future__ import annotations

import json

import pytest

from infinipipe import _C

SHAPE = dict(
    name="tiny", layers=4, hidden=64, heads=4, kv_heads=2, ffn=176, vocab=512, bytes_per_element=4
)
LENGTHS = [3000, 120, 800, 45, 2000, 9]


@pytest.mark.parametrize("ratio", [1.0, 0.9])
def test_actions_add_up_to_the_plans_busy_and_recompute_time(ratio):
    cost = json.loads(_C.plan.CostModel.analytic(json.dumps(SHAPE), "cpu", [2, 2]).to_json())
    cost["coefficients"]["checkpointed_forward_ratio"] = ratio
    cost = _C.plan.CostModel.from_json(json.dumps(cost))
    # A budget that forces recompute, so that B actions have a recompute part.
    plan = _C.plan.plan_step(LENGTHS, cost, 32 * 2**20, "epp")
    summary = plan.summary()
    assert summary["recomputed_layer_chunks"] > 0
    actions = plan.predicted_actions(cost)
    stages = len(summary["predicted_busy_s"])
    busy, recompute = [0.0] * stages, [0.0] * stages
    names = {p: [] for p in range(stages)}
    for stage, name, category, seconds in actions:
        assert category in ("forward", "recompute", "backward") and seconds > 0
        busy[stage] += seconds
        if category == "recompute":
            recompute[stage] += seconds
            assert name.startswith("recompute B")
        else:
            names[stage].append(name)
    assert busy == pytest.approx(summary["predicted_busy_s"], rel=1e-12)
    assert sum(recompute) == pytest.approx(summary["predicted_recompute_s"], rel=1e-12)
    for stage in range(stages):  # every chunk's F and B once on every stage
        chunks = range(summary["chunks"])
        assert sorted(names[stage]) == sorted([f"F{c}" for c in chunks] + [f"B{c}" for c in chunks])
