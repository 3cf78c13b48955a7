"""The cost model the planner uses for a trainer, and the memory its budget comes from."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import torch

from .. import _C
from ..errors import Error
from ..models import llama
from .config import GIB, PlanConfig


def model_shape_json(config: llama.LlamaConfig, dtype: torch.dtype, name: str = "model") -> str:
    """The planner's ModelShape of a LlamaConfig, as JSON text."""
    return json.dumps(
        dict(
            name=name,
            layers=config.layers,
            hidden=config.hidden,
            heads=config.heads,
            kv_heads=config.kv_heads,
            ffn=config.ffn,
            vocab=config.vocab,
            bytes_per_element=torch.empty((), dtype=dtype).element_size(),
            # only when set: an eager model's shape is what it always was
            **({"lean_layer": True} if config.lean_layer else {}),
        )
    )


def cost_model_for(
    config: llama.LlamaConfig, layers_per_stage: Sequence[int], dtype: torch.dtype, plan: PlanConfig
) -> Any:
    """The cost model the planner uses: the plan config's JSON file, or the analytic model of
    the config's shape on plan.hardware (also for cost_model="profile", whose trainer
    replaces it with the profiled one once every rank is set up)."""
    if plan.cost_model is not None and plan.cost_model != "profile":
        cost = _C.plan.CostModel.load(str(plan.cost_model))
        check_same_shape(cost, config, dtype, str(plan.cost_model))
        # The plan tool's rule too (cost/cost_model.h).
        _C.plan.check_cost_file_split(
            cost, str(plan.cost_model), list(layers_per_stage), "the trainer"
        )
        return cost
    return _C.plan.CostModel.analytic(
        model_shape_json(config, dtype), plan.hardware, list(layers_per_stage)
    )


def cost_model_name(plan: PlanConfig) -> str:
    """Which cost model plans the steps, as every report names it: a cost JSON (from the
    profiler: calibrated on the machine it was measured on) or the analytic model of a built-in
    hardware, whose coefficients are published peak figures, not this machine's (uncalibrated:
    on a CPU its step times can be several times off)."""
    if plan.cost_model == "profile":
        return "profiled on this machine"
    if plan.cost_model is not None:
        return f"{plan.cost_model} (profiled)"
    return f"analytic on {plan.hardware!r} (uncalibrated: python -m infinipipe profile)"


def check_same_shape(cost: Any, config: llama.LlamaConfig, dtype: torch.dtype, source: str) -> None:
    """Error naming every field in which the cost model's model shape differs from the
    trainer's: a cost model measured for another model or dtype predicts the wrong times and
    memory (docs/design.md, "Failures")."""
    theirs = json.loads(cost.shape_json)
    ours = json.loads(model_shape_json(config, dtype))
    differing = [
        f"{field} {theirs.get(field)!r} (the trainer's: {value!r})"
        for field, value in ours.items()
        if field != "name" and theirs.get(field) != value
    ]
    if differing:
        raise Error(
            f"the cost model {source} was made for another model shape: "
            + ", ".join(differing)
            + "; profile the trainer's model (python -m infinipipe profile) or drop cost_model"
        )


def hardware_memory(plan: PlanConfig) -> float:
    """Memory of the plan config's hardware description (NaN with a cost JSON file)."""
    if plan.cost_model is not None:
        return float("nan")
    return float(json.loads(_C.plan.hardware_json(plan.hardware))["memory_bytes"])


def default_budget(device: torch.device) -> float:
    """The device's memory (the host's on CPU), for a budget the hardware does not give."""
    if device.type == "cuda":
        return float(torch.cuda.get_device_properties(device).total_memory)
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemTotal:"):
                    return float(line.split()[1]) * 1024
    except OSError:
        pass
    return 16.0 * GIB
