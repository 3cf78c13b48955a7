"""0.1.0's Trainer API on the composed Trainer: its keywords (now fields of PlanConfig, Parallel
and RuntimeConfig), a model factory with model_config (now a StageFactory), and its attributes
(now the parts'). Each still works, with a DeprecationWarning naming its new place, until 0.2."""

from __future__ import annotations

import dataclasses
import operator
import warnings
from typing import Any

from ..distributed.layout import Parallel
from ..models import llama
from ..models.stage_protocol import StageFactory
from ..planning.config import PlanConfig
from .config import RuntimeConfig

MOVED_ATTRIBUTES = {
    "executor": "stage.executor",
    "master": "stage.master",
    "protocol": "stage.protocol",
    "head_parameters": "stage.head_parameters",
    "cost_model_name": "planner.cost_model_name",
    "memory_budget_bytes": "planner.memory_budget_bytes",
    "dtype": "config.dtype",
    "master_dtype": "runtime.master_dtype",
    "timeout_s": "runtime.timeout_s",
    "pause_gc": "runtime.pause_gc",
    "spread_head": "plan_config.spread_head",
    "board": "failures.board",
}


# Trainer keywords of 0.1.0 and the config that holds each now; they still work, with a
# DeprecationWarning, until 0.2.
_MOVED = {
    "layer_split": "parallel",
    "spread_head": "plan",
    **{f.name: "runtime" for f in dataclasses.fields(RuntimeConfig)},
}
_CONFIG_TYPES = {"parallel": "Parallel", "plan": "PlanConfig", "runtime": "RuntimeConfig"}


def with_moved_keywords(
    model: Any,
    plan: PlanConfig | None,
    parallel: Parallel | None,
    runtime: RuntimeConfig | None,
    moved: dict[str, Any],
) -> tuple[Any, PlanConfig, Parallel, RuntimeConfig]:
    """The configs with 0.1's keywords applied, each with a DeprecationWarning naming its new
    place; a model factory with model_config becomes a StageFactory."""
    configs = {
        "plan": plan if plan is not None else PlanConfig(),
        "parallel": parallel if parallel is not None else Parallel(),
        "runtime": runtime if runtime is not None else RuntimeConfig(),
    }
    model_config = moved.pop("model_config", None)
    unknown = [k for k in moved if k not in _MOVED]
    if unknown:
        raise TypeError(f"Trainer() got unexpected keyword arguments: {', '.join(unknown)}")
    for name, value in moved.items():
        if name == "spread_head" and value is None:
            continue  # 0.1's "keep the plan config's"
        where = _MOVED[name]
        warnings.warn(
            f"Trainer({name}=...) is deprecated and goes in 0.2: give "
            f"{where}=infinipipe.{_CONFIG_TYPES[where]}({name}=...)",
            DeprecationWarning,
            stacklevel=3,
        )
        configs[where] = dataclasses.replace(configs[where], **{name: value})
    if callable(model) and not isinstance(model, (llama.LlamaConfig, StageFactory)):
        if model_config is None:
            raise ValueError(
                "Trainer: with a model factory, give a StageFactory(build, config) (the "
                "LlamaConfig the planner's cost model is built from)"
            )
        warnings.warn(
            "Trainer(factory, model_config=...) is deprecated and goes in 0.2: give "
            "infinipipe.StageFactory(factory, config)",
            DeprecationWarning,
            stacklevel=3,
        )
        model = StageFactory(model, model_config)
    if not isinstance(model, (llama.LlamaConfig, StageFactory)):
        raise TypeError(f"Trainer: model must be a LlamaConfig or a StageFactory, got {model!r}")
    return model, configs["plan"], configs["parallel"], configs["runtime"]


def moved_attribute(trainer: Any, name: str) -> Any:
    """Trainer.<name> of 0.1.0, read where it lives now; AttributeError for any other name."""
    if name not in MOVED_ATTRIBUTES:
        raise AttributeError(f"'Trainer' object has no attribute {name!r}")
    where = MOVED_ATTRIBUTES[name]
    warnings.warn(
        f"Trainer.{name} is deprecated and goes in 0.2: read Trainer.{where}",
        DeprecationWarning,
        stacklevel=3,
    )
    return operator.attrgetter(where)(trainer)
