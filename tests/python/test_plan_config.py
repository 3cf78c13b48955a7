"""PlanConfig refuses settings that cannot describe a step."""

from __future__ import annotations

import math

import pytest

from infinipipe import PlanConfig


@pytest.mark.parametrize("value", [math.inf, -math.inf, math.nan, 0, -1.0])
@pytest.mark.parametrize("field", ["memory_budget_gib", "memory_budget_bytes"])
def test_a_budget_must_be_finite_and_positive(field, value):
    with pytest.raises(ValueError, match=f"PlanConfig.{field} must be a finite positive number"):
        PlanConfig(**{field: value})


def test_a_finite_positive_budget_is_used():
    assert PlanConfig(memory_budget_gib=1.5).budget_bytes(0, 1) == 1.5 * (1 << 30)
    assert PlanConfig(memory_budget_bytes=1000).budget_bytes(0, 1) == 1000.0


def test_spread_head_defaults_to_the_planner_training_default():
    from infinipipe import _C

    assert PlanConfig().spread_head is _C.plan.PlannerOptions.for_training(1, 1).spread_head
    assert PlanConfig().spread_head is False
    assert PlanConfig(spread_head=True).spread_head


def test_a_profile_check_needs_a_count_of_steps():
    with pytest.raises(ValueError, match="profile_check_steps must be 0 .never check."):
        PlanConfig(profile_check_steps=-1)
    assert PlanConfig().profile_check_steps == 5 and PlanConfig(profile_check_steps=0)


def test_the_search_work_limit_reaches_the_planner():
    import torch

    from infinipipe import _C
    from infinipipe.models.llama import LlamaConfig
    from infinipipe.planning.cost_model import model_shape_json

    training = _C.plan.PlannerOptions.for_training(1, 1)
    assert PlanConfig().search_work_limit == training.search_work_limit > 0
    with pytest.raises(ValueError, match="search_work_limit must be 0 .no limit."):
        PlanConfig(search_work_limit=-1)
    shape = model_shape_json(LlamaConfig.tiny(), torch.float32)
    cost = _C.plan.CostModel.analytic(shape, "cpu", [2] * 4)
    lengths = [4096, 3000, 900, 700, 512, 300, 200, 100] * 4

    def report(limit):
        plan = _C.plan.plan_step(lengths, cost, 2**30, "epp", search_work_limit=limit)
        return plan.summary()["planner"]

    free = report(0)
    assert not free["budget_exhausted"] and free["tried"] > 1, free
    # One chunk-stage: the search keeps the first plan it finds.
    capped = report(1)
    assert capped["budget_exhausted"] and capped["tried"] < free["tried"], capped
    with pytest.raises(_C.Error, match="search_work_limit is a count of chunk-stages"):
        report(-1)


def test_the_planner_fields_are_the_cpp_tables():
    """Every field of the planner's options and of a method's setting is a PlanConfig field,
    with the training default and the C++ doc; knobs() gives them back by the same names."""
    import dataclasses

    from infinipipe import _C

    training = _C.plan.PlannerOptions.for_training(1, 1)
    tables = [*_C.plan.Setting.fields(), *_C.plan.PlannerOptions.fields()]
    names = {f.name for f in dataclasses.fields(PlanConfig)}
    for name, default, doc in tables:
        assert name in names and doc in PlanConfig.__doc__, name
        value = getattr(PlanConfig(), name)
        assert list(value) == default if isinstance(default, list) else value == default, name
    assert PlanConfig().max_k == training.max_k == 32
    assert PlanConfig().recompute_time_limit_s == training.recompute_time_limit_s == 0
    knobs = PlanConfig(max_k=8, token_cap=512).knobs()
    assert set(knobs) == {name for name, _, _ in tables}
    assert knobs["max_k"] == 8 and knobs["token_cap"] == 512


def test_plan_step_takes_the_tables_names_and_refuses_others():
    import torch

    from infinipipe import _C
    from infinipipe.models.llama import LlamaConfig
    from infinipipe.planning.cost_model import model_shape_json

    cost = _C.plan.CostModel.analytic(
        model_shape_json(LlamaConfig.tiny(), torch.float32), "cpu", [4, 4]
    )
    plan = _C.plan.plan_step([300, 200, 50], cost, 2**30, "seq1f1b", k=2, token_cap=400)
    assert plan.method == "seq1f1b" and plan.k == 2
    with pytest.raises(_C.Error, match="no setting named 'slices'; the settings are:.* k .*max_k"):
        _C.plan.plan_step([300, 200, 50], cost, 2**30, "seq1f1b", slices=2)


def test_the_old_name_of_the_recompute_time_limit_warns_and_is_used():
    with pytest.warns(DeprecationWarning, match="give recompute_time_limit_s"):
        config = PlanConfig(checkpoint_time_limit_s=0.25)
    assert config.recompute_time_limit_s == 0.25 and config.checkpoint_time_limit_s is None


def test_zero_bubble_is_off_for_training_and_names_itself_when_asked_for():
    import torch

    from infinipipe import _C
    from infinipipe.models.llama import LlamaConfig
    from infinipipe.planning.cost_model import model_shape_json

    # Off unless asked for (PlanConfig(zero_bubble="try")).
    assert PlanConfig().zero_bubble == _C.plan.PlannerOptions.for_training(1, 1).zero_bubble
    assert PlanConfig().zero_bubble == "off"
    shape = model_shape_json(LlamaConfig.tiny(), torch.float32)
    cost = _C.plan.CostModel.analytic(shape, "cpu", [2] * 4)
    lengths = [4096, 3000, 900, 700]
    plain = _C.plan.plan_step(lengths, cost, 2**30, "epp")
    split = _C.plan.plan_step(lengths, cost, 2**30, "epp", zero_bubble="h1")

    def weights(plan):
        return sum(a.startswith("W") for stage in plan.schedule for a in stage)

    assert weights(plain) == 0 and "zero-bubble" not in plain.summary()["setting"]
    assert weights(split) == 3 * len(split.chunks)  # every chunk's W on stages 1-3
    assert plain.summary()["setting"] + " zero-bubble=h1" == split.summary()["setting"]
    assert '"zero_bubble":"h1"' in split.to_json() and "zero_bubble" not in plain.to_json()
    longer = _C.plan.plan_step(lengths, cost, 2**30, "epp", zero_bubble="h2")
    assert weights(longer) == 3 * len(longer.chunks)
    assert longer.summary()["setting"].endswith(" zero-bubble=h2")
    assert '"zero_bubble":"h2"' in longer.to_json()
    with pytest.raises(Exception, match='zero_bubble is "h3": expected "try"'):
        _C.plan.plan_step(lengths, cost, 2**30, "epp", zero_bubble="h3")
