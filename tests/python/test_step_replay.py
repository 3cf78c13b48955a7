"""benchmarks/lib/validation.py, replay: a schedule replayed with given action times, the
simulator's dependencies without its cost model (benchmarks/step_replay.py replays measured
steps with it)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from infinipipe import _C

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
from lib.validation import predicted_action_seconds, replay  # noqa: E402

SHAPE = dict(
    name="tiny", layers=4, hidden=64, heads=4, kv_heads=2, ffn=176, vocab=512, bytes_per_element=4
)


def test_two_stages_by_hand():
    # Stage 0: F0 (1 s), F1 (1 s), then B0 once stage 1 sent it; stage 1: F0 once sent (at 1 s).
    schedule = [
        ["F0", "SEND_F0", "F1", "SEND_F1", "RECV_B0", "B0", "RECV_B1", "B1"],
        ["RECV_F0", "F0", "B0", "SEND_B0", "RECV_F1", "F1", "B1", "SEND_B1"],
    ]
    times = {"F": 1.0, "B": 2.0}
    assert replay(schedule, lambda s, t: times.get(t[0], 0.0)) == pytest.approx(
        # stage 1: F0 1-2, B0 2-4, F1 4-5, B1 5-7; stage 0: B0 4-6, B1 7-9
        9.0
    )


def test_a_plan_replays_to_its_prediction_without_transfer_time():
    cost = json.loads(_C.plan.CostModel.analytic(json.dumps(SHAPE), "cpu", [2, 2]).to_json())
    cost["coefficients"]["p2p_latency_s"] = 0.0
    cost["coefficients"]["p2p_bandwidth"] = 1e30
    cost = _C.plan.CostModel.from_json(json.dumps(cost))
    # A budget that forces recompute and three waves (B actions hold their recompute), and none.
    waves = set()
    for budget_mib in (1024, 16):
        plan = _C.plan.plan_step([3000, 120, 800, 45, 2000, 9, 1500, 600], cost, budget_mib * 2**20)
        waves.add(len(plan.waves))
        seconds = predicted_action_seconds(plan, cost)
        replayed = replay(plan.schedule, lambda s, t, seconds=seconds: seconds.get((s, t), 0.0))
        assert replayed == pytest.approx(plan.summary()["predicted_step_s"], rel=1e-9)
    assert len(waves) == 2  # one wave, and several


def test_refuses_a_deadlock_and_head_transfers():
    with pytest.raises(ValueError, match="deadlocks"):
        replay([["RECV_B0", "B0"], ["F0"]], lambda s, t: 1.0)
    with pytest.raises(ValueError, match="SEND_H0@1 of stage 0 is not a 1F1B one"):
        replay([["SEND_H0@1"], []], lambda s, t: 1.0)
