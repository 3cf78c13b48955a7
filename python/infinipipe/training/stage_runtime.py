"""This rank's stage: the module the executor runs, its parameters and the optimizer that steps them
(master weights in mixed precision, a ZeRO-1 shard with a gradient group), and the executor that
runs plans over the pipes (runtime/executor.h)."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import torch

from .. import _C
from ..distributed.gradient_group import guarded, local_optimizer, settle, sharded_optimizer
from ..distributed.layout import Layout, Share
from ..errors import Error
from ..models import llama
from ..models.stage_protocol import head_parameters, protocol_module
from . import mixed_precision
from .memory_meter import MemoryMeter

OptimizerFactory = Callable[[Iterable[torch.Tensor]], torch.optim.Optimizer]


def _default_optimizer(params: Iterable[torch.Tensor]) -> torch.optim.Optimizer:
    return torch.optim.AdamW(params, lr=1e-3)


class StageRuntime:
    """Builds this rank's stage, its optimizer and its executor; runs plans on them."""

    module: Any  # what the model factory built (or the LlamaStage built from a config)
    protocol: Any  # the executor's view of it (models/stage_protocol.py)
    parameters: list[torch.Tensor]
    head_parameters: list[torch.Tensor]  # the spread head's replica; empty without one
    master: mixed_precision.MasterWeights | None
    optimizer: torch.optim.Optimizer
    executor: Any  # _C.runtime.Executor
    device: torch.device
    timeout_s: float  # how long any wait on a peer lasts

    def __init__(
        self,
        model: llama.LlamaConfig | Callable[[int, list[int]], Any],
        optimizer_factory: OptimizerFactory | None,
        *,
        config: llama.LlamaConfig,
        layers_per_stage: list[int],
        layout: Layout,
        group: Any,
        device: torch.device,
        master_dtype: torch.dtype | None,
        seed: int,
        timeout_s: float,
        attention_backend: str,
        spread_head: bool,
    ) -> None:
        stage = layout.stage
        if isinstance(model, llama.LlamaConfig):
            self.module = llama.build_stage(
                config, layers_per_stage, stage, seed=seed, device=device, spread_head=spread_head
            )
        else:
            self.module = model(stage, list(layers_per_stage))
        self.protocol = protocol_module(self.module)
        if int(self.protocol.num_layers) != layers_per_stage[stage]:
            raise Error(
                f"stage {stage}: the model factory built {self.protocol.num_layers} layers, "
                f"the split gives it {layers_per_stage[stage]}"
            )
        self.head_parameters = self._head_replica(stage) if spread_head else []
        self.parameters = list(self.protocol.parameters())
        factory = optimizer_factory or _default_optimizer
        self.master = (
            mixed_precision.MasterWeights(self.parameters, master_dtype)
            if master_dtype is not None
            else None
        )
        stepped = self.master.params if self.master else self.parameters
        if layout.gradient_group is not None and layout.parallel.zero == 1:
            self.optimizer = sharded_optimizer(factory, stepped, layout.gradient_group)
        else:
            self.optimizer = factory(stepped)
        options = _C.runtime.ExecutorOptions(
            stage=stage,
            num_stages=len(layers_per_stage),
            dtype=config.dtype,
            device=device,
            hidden=config.hidden,
            kv_heads=config.kv_heads,
            head_dim=config.head_dim,
            timeout_s=timeout_s,
            stage_ranks=layout.pipeline_ranks,
            attention_backend=attention_backend,
        )
        self.executor = _C.runtime.Executor(
            self.protocol,
            group,
            options,
            sequence_group=layout.sequence_group,
            head_group=layout.head_group,
        )
        self._gradient_group = layout.gradient_group
        self.device = device
        self.timeout_s = timeout_s

    def _head_replica(self, stage: int) -> list[torch.Tensor]:
        """This stage's replica of the final norm and the LM head (spread head)."""
        if not bool(self.protocol.has_head):
            raise Error(
                f"stage {stage}: spread_head runs LM heads on every stage, but the "
                "model factory built this stage without the final norm and the LM head; build "
                "every stage with them (llama.build_stage(..., spread_head=True), "
                "models.cpp.build_stage(..., spread_head=True))"
            )
        return head_parameters(self.module)

    def run(self, plan: Any, share: Share, measure_memory: bool) -> tuple[dict, Any]:
        """This stage's part of a training step: its stats and, with measure_memory, the
        MemoryMeter that watched it."""
        if not measure_memory:
            return self.executor.run(plan, share.sequences, share.loss_tokens), None
        meter = MemoryMeter(self.executor, self.parameters)
        self.executor.set_after_action(meter.sample)
        try:
            with meter.hooks():
                return self.executor.run(plan, share.sequences, share.loss_tokens), meter
        finally:
            self.executor.set_after_action(None)

    def evaluate(self, plan: Any, share: Share) -> dict:
        """This stage's part of a forward-only run."""
        return self.executor.evaluate(plan, share.sequences, share.loss_tokens)

    @property
    def sharded(self) -> bool:
        """Whether the optimizer is a ZeRO shard, whose step is a collective."""
        return local_optimizer(self.optimizer) is not self.optimizer

    def step_optimizer(self) -> None:
        """Steps the optimizer (through the master weights in mixed precision). A sharded
        optimizer's step broadcasts every shard's update over the gradient group: a collective,
        whose failure raises a CollectiveFailure."""

        def step() -> None:
            if self.master is not None:
                self.master.step(self.optimizer)
            else:
                self.optimizer.step()

        if not self.sharded:
            step()
            return
        guarded("the ZeRO optimizer's broadcast of the updated parameters", step)
        settle(self._gradient_group, self.device, self.timeout_s)

    def release(self) -> None:
        """Drops this stage's references to its process groups (a closing trainer's): the
        executor, which holds the default, sequence and head groups in C++, and a ZeRO
        optimizer's gradient group. A Gloo group's threads end only with its last reference,
        and one still running when the interpreter finalizes can abort the process
        (docs/runtime.md, "Exits"). The module and the optimizer's state stay readable."""
        self.executor = None
        self._gradient_group = None
        if self.sharded:
            self.optimizer.process_group = None  # torch's ZeroRedundancyOptimizer attribute

    def gather_text(self, text: str) -> list[str]:
        """Every rank's `text`, in rank order (a PeerError when a peer is lost)."""
        return [b.decode() for b in self.executor.all_gather_text(text)]
