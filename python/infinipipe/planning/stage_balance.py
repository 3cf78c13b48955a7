"""Layer splits from per-stage costs (planner/stage_balance.h): give the trainer's `layer_split` a
split whose last stage, which also runs the LM head and the loss, is not the busiest.

    steps = [[len(s) for s in batch] for batch in sample_batches]
    split = infinipipe.balanced_layer_split(config, steps, stages=4)
    trainer = infinipipe.Trainer(config, layer_split=split)

Every rank must pass the same steps (the result is deterministic), so the stages agree.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from .. import _C
from ..models import llama
from .config import PlanConfig
from .cost_model import cost_model_for


def _steps(steps: Sequence[Sequence[int]] | Sequence[int]) -> list[list[int]]:
    steps = list(steps)
    if steps and not isinstance(steps[0], Sequence | torch.Tensor):
        steps = [steps]  # one step's lengths
    out = [[int(n) for n in step] for step in steps]
    if not out or any(not step for step in out):
        raise ValueError("give at least one step of sequence lengths, each step non-empty")
    return out


def _cost(config: llama.LlamaConfig, stages: int, plan: PlanConfig | None, dtype) -> Any:
    plan = plan if plan is not None else PlanConfig()
    dtype = dtype if dtype is not None else config.dtype
    if plan.cost_model is not None and plan.cost_model != "profile":
        cost = _C.plan.CostModel.load(str(plan.cost_model))
        if cost.num_stages != stages:
            raise ValueError(
                f"cost model {plan.cost_model} has {cost.num_stages} stages, not {stages}"
            )
        return cost
    return cost_model_for(config, llama.even_layer_split(config.layers, stages), dtype, plan)


def balanced_layer_split(
    config: llama.LlamaConfig,
    steps: Sequence[Sequence[int]] | Sequence[int],
    stages: int,
    *,
    plan: PlanConfig | None = None,
    dtype: torch.dtype | None = None,
) -> list[int]:
    """Layers per stage with the least busiest stage's compute over `steps` (lists of sequence
    lengths, or one list), on the plan config's cost model (its hardware, or its cost JSON
    file, whose split is not used): water filling, exact for identical layers."""
    return list(_C.plan.balanced_layer_split(_steps(steps), _cost(config, stages, plan, dtype)))


def choose_layer_split(
    config: llama.LlamaConfig,
    steps: Sequence[Sequence[int]] | Sequence[int],
    stages: int,
    memory_budget_bytes: float,
    *,
    plan: PlanConfig | None = None,
    dtype: torch.dtype | None = None,
) -> dict:
    """The split EPP plans `steps` fastest on within the memory budget (per stage), among the
    even split, the balanced one and its neighbours: a dict with layers_per_stage, name and the
    candidates weighed (planner/stage_balance.h)."""
    cost = _cost(config, stages, plan, dtype)
    return _C.plan.choose_layer_split(_steps(steps), cost, float(memory_budget_bytes))
