"""How the trainer plans its steps (PlanConfig).

The planner's options and a method's knobs are defined once, in C++ (PlannerOptions::visit_fields
in planner/planner.h, Setting::visit_fields in plan/plan.h): PlanConfig's fields for them, their
defaults (PlannerOptions::for_training: what every rank can plan alike) and their docs are read
from those tables, and PlanConfig.knobs() hands them back to the planner by the same names.
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass
from typing import Any

from .. import _C

METHODS = tuple(_C.plan.methods())  # "epp", "batch", "seq1f1b", "chunkflow"
GIB = 1 << 30
# (name, default, doc) of each field the planner reads: a method's knobs, then its options.
_PLANNER_FIELDS = [*_C.plan.Setting.fields(), *_C.plan.PlannerOptions.fields()]


def _with_planner_fields(cls: type) -> type:
    """Adds the C++ tables' fields to `cls` (before @dataclass makes them fields), lists as
    tuples so that the config stays frozen and hashable, and their docs to its docstring."""
    docs = []
    for name, default, doc in _PLANNER_FIELDS:
        default = tuple(default) if isinstance(default, list) else default
        cls.__annotations__[name] = type(default).__name__
        setattr(cls, name, default)
        docs.append(f"    {name} (default {default!r}): {doc}.")
    cls.__doc__ += "\n    The planner's fields, from C++:\n" + "\n".join(docs) + "\n"
    return cls


@dataclass(frozen=True)
@_with_planner_fields
class PlanConfig:
    """How steps are planned.

    method: "epp" (elastic: sweeps the slice count up to max_k, and with baseline_chunkings
        the baselines' chunkings too, planned with EPP's waves and recompute; with
        overlap_waves a wave may start during the previous one's cool-down), or a baseline at
        a fixed setting: "batch" (token_cap), "seq1f1b" (token_cap, k), "chunkflow" (chunk_tokens).
    memory budget per stage, model state included: memory_budget_gib or memory_budget_bytes
        (at most one); neither means the hardware's memory divided by the stages on this host.
    hardware: built-in hardware of the analytic cost model ("cpu", "a800", "h100"), or cost_model: a
        cost JSON file (for example from the profiler) whose layer split must be the trainer's,
        or "profile": the trainer profiles its model's layer on this machine at start-up and
        caches the result (profiling/profiled_cost.py).
    profile_check_steps: with cost_model="profile", a profile loaded from the cache is checked
        against the medians of this many steps (after the first): predictions more than 10% off
        the measured steps have it profiled again, once, on every rank, and the cache replaced
        (0: never checked).
    checkpoint_time_limit_s: 0.1.0's name of recompute_time_limit_s (a DeprecationWarning; it
        goes in 0.2).
    """

    method: str = "epp"
    memory_budget_gib: float | None = None
    memory_budget_bytes: int | None = None
    hardware: str = "cpu"
    cost_model: str | None = None
    profile_check_steps: int = 5
    checkpoint_time_limit_s: float | None = None

    def __post_init__(self) -> None:
        if self.checkpoint_time_limit_s is not None:
            warnings.warn(
                "PlanConfig(checkpoint_time_limit_s=...) is deprecated and goes in 0.2: give "
                "recompute_time_limit_s",
                DeprecationWarning,
                stacklevel=3,
            )
            object.__setattr__(self, "recompute_time_limit_s", self.checkpoint_time_limit_s)
            object.__setattr__(self, "checkpoint_time_limit_s", None)
        if self.method not in METHODS:
            raise ValueError(
                f"PlanConfig.method must be one of {', '.join(METHODS)}, got {self.method!r}"
            )
        if self.memory_budget_gib is not None and self.memory_budget_bytes is not None:
            raise ValueError("PlanConfig: give memory_budget_gib or memory_budget_bytes, not both")
        for name in ("memory_budget_gib", "memory_budget_bytes"):
            value = getattr(self, name)
            if value is not None and not (value > 0 and math.isfinite(value)):
                raise ValueError(
                    f"PlanConfig.{name} must be a finite positive number, got {value!r} (give "
                    "the memory each stage may use, or leave it unset for the hardware's)"
                )
        if self.k < 1 or self.max_k < 1:
            raise ValueError("PlanConfig: k and max_k must be at least 1")
        if self.search_work_limit < 0:
            raise ValueError(
                "PlanConfig.search_work_limit must be 0 (no limit) or a count of chunk-stages, "
                f"got {self.search_work_limit}"
            )
        if self.profile_check_steps < 0:
            raise ValueError(
                "PlanConfig.profile_check_steps must be 0 (never check) or a count of steps, "
                f"got {self.profile_check_steps!r}"
            )
        if self.method == "chunkflow" and self.chunk_tokens <= 0:
            raise ValueError("PlanConfig: method 'chunkflow' needs chunk_tokens > 0")

    def knobs(self) -> dict[str, Any]:
        """The planner's fields by their C++ names: plan_step's keywords."""
        return {name: getattr(self, name) for name, _, _ in _PLANNER_FIELDS}

    def budget_bytes(self, hardware_memory_bytes: float, stages_on_host: int) -> float:
        if self.memory_budget_bytes is not None:
            return float(self.memory_budget_bytes)
        if self.memory_budget_gib is not None:
            return float(self.memory_budget_gib) * GIB
        return hardware_memory_bytes / max(1, stages_on_host)
