"""The planning core's parallel layout through the bindings: CostModel.analytic with a layout,
and the batch split over data-parallel replicas (planner/data_split.h)."""

import json

import pytest

from infinipipe import _C

SHAPE = json.dumps(
    dict(
        name="t",
        layers=4,
        hidden=256,
        heads=8,
        kv_heads=4,
        ffn=512,
        vocab=1000,
        bytes_per_element=2,
    )
)


def test_analytic_with_a_layout_is_per_rank():
    one = _C.plan.CostModel.analytic(SHAPE, "a800", [2, 2])
    sp = _C.plan.CostModel.analytic(SHAPE, "a800", [2, 2], sequence=4, data=2, zero=1)
    assert one.layout == dict(sequence=1, data=1, zero=1, gpus_per_node=8)
    assert sp.layout == dict(sequence=4, data=2, zero=1, gpus_per_node=8)
    # ZeRO-1 over 4 x 2 ranks: 4 of 16 bytes per parameter whole, 12 sharded 8 ways.
    assert sp.model_state_bytes(0) == pytest.approx(one.model_state_bytes(0) * (4 + 12 / 8) / 16)
    assert json.loads(sp.to_json())["layout"]["sequence"] == 4
    assert "layout" not in json.loads(one.to_json())


def test_sequence_degree_must_divide_the_kv_heads():
    with pytest.raises(_C.Error, match="4 KV heads"):
        _C.plan.CostModel.analytic(SHAPE, "a800", [2, 2], sequence=8)


def test_split_over_replicas():
    cost = _C.plan.CostModel.analytic(SHAPE, "a800", [2, 2])
    split = _C.plan.split_over_replicas([100, 5000, 100, 100, 300], cost, 2)
    assert split == [[1], [0, 2, 3, 4]]
    with pytest.raises(_C.Error, match="fewer than the 3 data-parallel replicas"):
        _C.plan.split_over_replicas([1, 2], cost, 3)
