"""Planning a trainer's steps: the cost model (analytic, a cost file, or profiled on this machine and
checked against the measured steps), the memory budget, this replica's share of each batch, and
planning ahead on a background thread (planning/ahead.py). Every rank plans on its own and alike:
the agreement (distributed/agreement.py) checks the plans' hashes before a step runs."""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable
from typing import Any

import torch

from .. import _C
from ..distributed.failures import Failures
from ..distributed.layout import Layout, Share, share_indices
from ..models import llama
from ..planning.ahead import PlanAhead
from ..planning.config import PlanConfig
from ..planning.cost_model import cost_model_for, cost_model_name, default_budget, hardware_memory
from ..profiling import alltoall, profiled_cost
from . import step_input

_log = logging.getLogger("infinipipe")

Gather = Callable[[str], list[str]]  # every rank's text, in rank order (a collective)
Planning = tuple[float, float]  # seconds planning took, and the part of them done ahead


class StepPlanner:
    """Plans this rank's replica's share of each batch with the C++ planner."""

    cost: Any  # _C.plan.CostModel, for one rank of the layout
    cost_model_name: str  # which cost model plans the steps, as every report names it
    memory_budget_bytes: float  # per stage, model state included

    def __init__(
        self,
        plan_config: PlanConfig,
        config: llama.LlamaConfig,
        layers_per_stage: list[int],
        layout: Layout,
        device: torch.device,
        timeout_s: float,
    ) -> None:
        self._plan_config = plan_config
        self._config = config
        self._layers_per_stage = layers_per_stage
        self._layout = layout
        self._device = device
        self._timeout_s = timeout_s
        # The processes on this host share its fast links, as the GPUs of a node do.
        self._ranks_on_host = int(os.environ.get("LOCAL_WORLD_SIZE", layout.world_size))
        self.cost = self._per_rank(
            cost_model_for(config, layers_per_stage, config.dtype, plan_config)
        )
        self.cost_model_name = cost_model_name(plan_config)
        self.memory_budget_bytes = plan_config.budget_bytes(
            hardware_memory(plan_config), self._ranks_on_host
        )
        if self.memory_budget_bytes != self.memory_budget_bytes:  # NaN: no default known
            self.memory_budget_bytes = default_budget(device) / max(1, self._ranks_on_host)
        self._ahead = PlanAhead(self.plan)
        self._profile_check: profiled_cost.StaleProfileCheck | None = None
        self._profile_path: Any = None

    # --- planning ---

    def share(self, lengths: list[int]) -> list[int]:
        """The sequences of a batch this rank's replica trains on (all without replicas)."""
        return share_indices(self._layout, lengths, self.cost)

    def plan(self, lengths: list[int]) -> Any:
        """The plan of this replica's share of a batch of these lengths (an _C.plan.Plan)."""
        p = self._plan_config
        share = self.share(lengths)
        return _C.plan.plan_step(
            [lengths[i] for i in share],
            self.cost,
            float(self.memory_budget_bytes),
            p.method,
            **p.knobs(),
        )

    def planned(self, lengths: list[int]) -> tuple[Any, Planning]:
        """The plan for these lengths, planned ahead or now; and (planning seconds, the part of
        them hidden by planning ahead)."""
        ahead = self._ahead.take(lengths)
        if ahead is not None:
            plan, planning_s, waited_s = ahead
            return plan, (planning_s, max(0.0, planning_s - waited_s))
        started = time.perf_counter()
        plan = self.plan(lengths)
        return plan, (time.perf_counter() - started, 0.0)

    def prepare(self, sequences: list[torch.Tensor], plan: Any) -> tuple[Any, Share, Planning]:
        """A checked batch's share for this replica and its plan: planned ahead, planned now, or
        `plan` when given (checked against the batch); and how long planning took (Planning)."""
        lengths = [t.numel() for t in sequences]
        indices = self.share(lengths)
        share = Share(
            indices=indices,
            sequences=[sequences[i] for i in indices],
            loss_tokens=sum(n - 1 for n in lengths),
            tokens=sum(lengths),
        )
        if plan is None:
            plan, planning = self.planned(lengths)  # validated by the planner
            return plan, share, planning
        step_input.check_given_plan(
            plan, lengths, indices, self._layers_per_stage, self._plan_config.spread_head
        )
        return plan, share, (0.0, 0.0)

    def prefetch(self, lengths: list[int]) -> None:
        """Starts planning these lengths on the background thread."""
        self._ahead.submit(lengths)

    def close(self) -> None:
        """Stops planning ahead, its thread joined."""
        self._ahead.close()

    # --- a cost model profiled on this machine (PlanConfig(cost_model="profile")) ---

    @property
    def checks_profile(self) -> bool:
        """Whether the steps' times are still being compared with a cached profile's."""
        return self._profile_check is not None

    def profile(self, gather: Gather) -> None:
        """Rank 0's cached or freshly profiled cost model on every rank (profiling/profiled_cost.py). One
        loaded from the cache is checked against the measured steps (check_profile)."""
        self._use_profile(
            profiled_cost.agreed_cost_json(
                self._config, self._layers_per_stage, **self._profile_options(gather)
            )
        )

    def check_profile(
        self, measured_s: float, predicted_s: float, gather: Gather, failures: Failures
    ) -> None:
        """After a step: once the check has its steps, every rank takes rank 0's error (the
        ranks must plan alike). A cached profile beyond STALE_ERROR is profiled again, once,
        and that profile checked in turn (record_check notes whether it missed too)."""
        error = self._profile_check.add(measured_s, predicted_s)
        if error is None:
            return
        again = self._profile_check.profiled_again
        self._profile_check = None
        failures.next_call()  # a collective of its own on the failure board
        with failures.named():
            error = float(gather(repr(error))[0])
            if again:
                profiled_cost.record_check(self._profile_path, error)
                return
            if abs(error) <= profiled_cost.STALE_ERROR:
                return
            _log.info(
                "the cached profile predicts the steps %+.0f%% off: profiling again", error * 100
            )
            agreed = profiled_cost.reprofiled_cost_json(
                self._config,
                self._layers_per_stage,
                error=error,
                **self._profile_options(gather),
            )
        self._use_profile(agreed, again=True)
        # A plan made ahead meanwhile may have read either model, and not alike on every rank.
        self._ahead.close(wait=False)
        self._ahead = PlanAhead(self.plan)

    def _use_profile(self, agreed: profiled_cost.AgreedCost, again: bool = False) -> None:
        self.cost = self._per_rank(_C.plan.CostModel.from_json(agreed.text))
        self.cost_model_name = agreed.name
        self._profile_path = agreed.path
        steps = self._plan_config.profile_check_steps
        check = agreed.check and steps > 0
        self._profile_check = profiled_cost.StaleProfileCheck(steps, again) if check else None

    def _profile_options(self, gather: Gather) -> dict:
        layout = self._layout
        return dict(
            ranks_on_host=self._ranks_on_host,
            device=self._device,
            gather=gather,
            sequence=layout.parallel.sequence,
            measure_link=lambda: alltoall.measure(layout.sequence_group, self._timeout_s),
        )

    def _per_rank(self, cost: Any) -> Any:
        """`cost` for one rank of the layout: its share of a chunk's work and memory, the
        all-to-alls, the model state ZeRO leaves it (cost/parallel_layout.h)."""
        p = self._layout.parallel
        return cost.with_layout(
            sequence=p.sequence, data=p.data, zero=p.zero, gpus_per_node=self._ranks_on_host
        )
