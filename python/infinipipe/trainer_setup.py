"""The setup half of Trainer (trainer.py): the process group when the caller gives none, this
rank's stage module, optimizer, cost model, memory budget and executor. Methods of a mixin rather
than functions because they fill in the trainer's attributes, which the rest of it reads."""

from __future__ import annotations

import datetime
import logging
import os
import socket
from collections.abc import Callable, Iterable
from typing import Any

import torch
import torch.distributed as dist

from . import _C, alltoall_profile, mixed_precision, profiled_cost
from .cost import cost_model_for, cost_model_name, default_budget, hardware_memory
from .errors import Error
from .layout import Layout
from .models import llama
from .planning_ahead import PlanAhead
from .rendezvous import (
    at_exit,
    before_default_group,
    destroy_default_group,
    join_default_group,
)
from .stage_adapter import head_parameters, protocol_module
from .stage_group import sharded_optimizer

_log = logging.getLogger("infinipipe")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class TrainerSetup:
    """Trainer's setup, called by Trainer.__init__: _default_group before the layout exists,
    _set_up_stage once it does (from config, dtype, master_dtype, device, plan_config,
    spread_head, layers_per_stage, stage_index, layout, world_size, group and timeout_s it sets
    module, protocol, head_parameters, parameters, master, optimizer, cost, cost_model_name,
    memory_budget_bytes and executor), _profile_cost once every rank is set up, _check_profile
    after each step while a cached profile is checked; and describe_rank, which names ranks in
    errors from the start."""

    def describe_rank(self, rank: int) -> str:
        layout = getattr(self, "layout", None)
        if layout is None:  # joining the group: the layout of torchrun's world, when it factors
            try:
                world = int(os.environ["WORLD_SIZE"])
                return Layout(self._parallel, rank, world).describe(rank)
            except (KeyError, ValueError, Error):
                return f"rank {rank}"
        return layout.describe(rank)

    def _set_up_stage(
        self,
        model: Any,
        optimizer_factory: Callable[[Iterable[torch.Tensor]], torch.optim.Optimizer] | None,
        seed: int,
        attention_backend: str,
    ) -> None:
        if isinstance(model, llama.LlamaConfig):
            self.module = llama.build_stage(
                self.config,
                self.layers_per_stage,
                self.stage_index,
                seed=seed,
                device=self.device,
                spread_head=self.spread_head,
            )
        else:
            self.module = model(self.stage_index, list(self.layers_per_stage))
        self.protocol = protocol_module(self.module)
        if int(self.protocol.num_layers) != self.layers_per_stage[self.stage_index]:
            raise Error(
                f"stage {self.stage_index}: the model factory built "
                f"{self.protocol.num_layers} layers, the split gives it "
                f"{self.layers_per_stage[self.stage_index]}"
            )
        self.head_parameters = self._head_replica() if self.spread_head else []
        self.parameters = list(self.protocol.parameters())
        factory = optimizer_factory or (lambda params: torch.optim.AdamW(params, lr=1e-3))
        self.master = (
            mixed_precision.MasterWeights(self.parameters, self.master_dtype)
            if self.master_dtype is not None
            else None
        )
        stepped = self.master.params if self.master else self.parameters
        if self.layout.gradient_group is not None and self.layout.parallel.zero == 1:
            self.optimizer = sharded_optimizer(factory, stepped, self.layout.gradient_group)
        else:
            self.optimizer = factory(stepped)

        self.cost = self._per_rank(
            cost_model_for(self.config, self.layers_per_stage, self.dtype, self.plan_config)
        )
        self.cost_model_name = cost_model_name(self.plan_config)
        stages_on_host = int(os.environ.get("LOCAL_WORLD_SIZE", self.world_size))
        self.memory_budget_bytes = self.plan_config.budget_bytes(
            hardware_memory(self.plan_config), stages_on_host
        )
        if self.memory_budget_bytes != self.memory_budget_bytes:  # NaN: no default known
            self.memory_budget_bytes = default_budget(self.device) / max(1, stages_on_host)

        self.executor = _C.runtime.Executor(
            self.protocol,
            self.group,
            self.stage_index,
            self.num_stages,
            self.dtype,
            self.device,
            self.config.hidden,
            self.config.kv_heads,
            self.config.head_dim,
            timeout_s=self.timeout_s,
            stage_ranks=self.layout.pipeline_ranks,
            attention_backend=attention_backend,
            sequence_group=self.layout.sequence_group,
            head_group=self.layout.head_group,
        )

    def _head_replica(self) -> list[torch.Tensor]:
        """This stage's replica of the final norm and the LM head (spread head)."""
        if not bool(self.protocol.has_head):
            raise Error(
                f"stage {self.stage_index}: spread_head runs LM heads on every stage, but the "
                "model factory built this stage without the final norm and the LM head; build "
                "every stage with them (llama.build_stage(..., spread_head=True), "
                "models.cpp.build_stage(..., spread_head=True))"
            )
        return head_parameters(self.module)

    def _gather_text(self, text: str) -> list[str]:
        # bytes from the executor; a PeerError is named by _failures_named
        return [b.decode() for b in self.executor.all_gather_text(text)]

    def _profile_options(self) -> dict:
        return dict(
            ranks_on_host=int(os.environ.get("LOCAL_WORLD_SIZE", self.world_size)),
            gather=self._gather_text,
            sequence=self.layout.parallel.sequence,
            measure_link=lambda: alltoall_profile.measure(
                self.layout.sequence_group, self.timeout_s
            ),
        )

    def _profile_cost(self) -> None:
        """PlanConfig(cost_model="profile"): rank 0's cached or freshly profiled cost model
        on every rank (profiled_cost.py). One loaded from the cache is checked against the
        measured steps (_check_profile)."""
        self._use_profile(
            profiled_cost.agreed_cost_json(
                self.config, self.layers_per_stage, device=self.device, **self._profile_options()
            )
        )

    def _use_profile(self, agreed: profiled_cost.AgreedCost, again: bool = False) -> None:
        self.cost = self._per_rank(_C.plan.CostModel.from_json(agreed.text))
        self.cost_model_name = agreed.name
        self._profile_path = agreed.path
        steps = self.plan_config.profile_check_steps
        check = agreed.check and steps > 0
        self._profile_check = profiled_cost.StaleProfileCheck(steps, again) if check else None

    def _check_profile(self, measured_s: float, predicted_s: float) -> None:
        """After a step: once the check has its steps, every rank takes rank 0's error (the
        ranks must plan alike). A cached profile beyond STALE_ERROR is profiled again, once,
        and that profile checked in turn (record_check notes whether it missed too)."""
        error = self._profile_check.add(measured_s, predicted_s)
        if error is None:
            return
        again = self._profile_check.profiled_again
        self._profile_check = None
        self._calls += 1  # a collective of its own on the failure board
        with self._failures_named():
            error = float(self._gather_text(repr(error))[0])
            if again:
                profiled_cost.record_check(self._profile_path, error)
                return
            if abs(error) <= profiled_cost.STALE_ERROR:
                return
            _log.info(
                "the cached profile predicts the steps %+.0f%% off: profiling again", error * 100
            )
            agreed = profiled_cost.reprofiled_cost_json(
                self.config, self.layers_per_stage, error=error, **self._profile_options()
            )
        self._use_profile(agreed, again=True)
        # A plan made ahead meanwhile may have read either model, and not alike on every rank.
        self._ahead.close()
        self._ahead = PlanAhead(self._plan_lengths)

    def _per_rank(self, cost: Any) -> Any:
        """`cost` for one rank of the layout: its share of a chunk's work and memory, the
        all-to-alls, the model state ZeRO leaves it (cost/parallel_layout.h). The processes on
        this host share its fast links, as the GPUs of a node do."""
        p = self.layout.parallel
        return cost.with_layout(
            sequence=p.sequence,
            data=p.data,
            zero=p.zero,
            gpus_per_node=int(os.environ.get("LOCAL_WORLD_SIZE", self.world_size)),
        )

    def _default_group(self, use_cuda: bool) -> Any:
        if not dist.is_initialized():
            before_default_group()
            backend = "nccl" if use_cuda else "gloo"
            timeout = datetime.timedelta(seconds=self.timeout_s)
            if "WORLD_SIZE" in os.environ and "RANK" in os.environ:
                join_default_group(backend, self.timeout_s, self.describe_rank)
            else:
                dist.init_process_group(
                    backend,
                    init_method=f"tcp://127.0.0.1:{_free_port()}",
                    rank=0,
                    world_size=1,
                    timeout=timeout,
                )
            at_exit(destroy_default_group)  # made here, so ended here if the caller does not
        return dist.group.WORLD
