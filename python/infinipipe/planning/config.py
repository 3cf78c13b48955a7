"""How the trainer plans its steps (PlanConfig)."""

from __future__ import annotations

import math
from dataclasses import dataclass

from .. import _C

METHODS = tuple(_C.plan.methods())  # "epp", "batch", "seq1f1b", "chunkflow"
GIB = 1 << 30
_TRAINING = _C.plan.training_defaults()


@dataclass(frozen=True)
class PlanConfig:
    """How steps are planned.

    method: "epp" (elastic: sweeps the slice count up to max_k, and with baseline_chunkings
        the baselines' chunkings too, planned with EPP's waves and recompute; with
        overlap_waves a wave may start during the previous one's cool-down), or a baseline at
        a fixed setting: "batch" (token_cap), "seq1f1b" (token_cap, k), "chunkflow" (chunk_tokens).
        token_cap 0 means the step's longest sequence.
    memory budget per stage, model state included: memory_budget_gib or memory_budget_bytes
        (at most one); neither means the hardware's memory divided by the stages on this host.
    uniform_recompute: baselines only, layers recomputed on every stage and chunk (-1: the
        fewest that fit).
    spread_head: chunks' LM heads and losses may run on any stage the planner assigns, not only
        the last (docs/design.md, "Spread head"); every stage then holds a replica of the
        final norm and the LM head (the Trainer builds them and keeps them equal).
    hardware: built-in hardware of the analytic cost model ("cpu", "a800"), or cost_model: a
        cost JSON file (for example from the profiler) whose layer split must be the trainer's,
        or "profile": the trainer profiles its model's layer on this machine at start-up and
        caches the result (profiled_cost.py).
    profile_check_steps: with cost_model="profile", a profile loaded from the cache is checked
        against the medians of this many steps (after the first): predictions more than 10% off
        the measured steps have it profiled again, once, on every rank, and the cache replaced
        (0: never checked).
    """

    method: str = "epp"
    memory_budget_gib: float | None = None
    memory_budget_bytes: int | None = None
    k: int = 1
    token_cap: int = 0
    chunk_tokens: int = 0
    uniform_recompute: int = -1
    # The planner's training options (PlannerOptions::for_training in plan/planner.h says why
    # they differ from the plan tool's): slice counts up to 32, and no CBC, so every rank's
    # independent plan is the same whatever its load.
    max_k: int = _TRAINING["max_k"]
    checkpoint_time_limit_s: float = _TRAINING["checkpoint_time_limit_s"]
    baseline_chunkings: bool = _TRAINING["baseline_chunkings"]
    overlap_waves: bool = _TRAINING[
        "overlap_waves"
    ]  # EPP: a wave may start in the previous one's cool-down
    spread_head: bool = _TRAINING["spread_head"]
    # EPP: the search keeps its best plan so far once it has done this much work, counted in
    # chunk-stages so that every rank stops at the same candidate (PlannerOptions::
    # search_work_limit); 0 searches without limit.
    search_work_limit: int = _TRAINING["search_work_limit"]
    hardware: str = "cpu"
    cost_model: str | None = None
    profile_check_steps: int = 5

    def __post_init__(self) -> None:
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

    def budget_bytes(self, hardware_memory_bytes: float, stages_on_host: int) -> float:
        if self.memory_budget_bytes is not None:
            return float(self.memory_budget_bytes)
        if self.memory_budget_gib is not None:
            return float(self.memory_budget_gib) * GIB
        return hardware_memory_bytes / max(1, stages_on_host)
