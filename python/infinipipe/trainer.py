"""The pipeline trainer: one process per stage, launched with torchrun.

    trainer = infinipipe.Trainer(LlamaConfig.tiny(), lambda params: torch.optim.AdamW(params),
                                 plan=infinipipe.PlanConfig(memory_budget_gib=2))
    for batch in batches:               # lists of variable-length token sequences
        result = trainer.step(batch)    # result.loss, result.plan (summary dict), result.stats

Every rank runs the same code on the same batch. A step validates the batch, plans it with the
C++ planner, checks through one all_gather that every rank holds the same configuration, batch
and plan (and that none rejected the batch), runs this rank's stage of the plan with the C++
executor (point-to-point pipes over the torch.distributed process group, Gloo on CPU, NCCL on
GPU), and steps the optimizer once. Errors are raised on every rank, naming the ranks at fault;
a lost peer ends the step with an error naming it within `timeout_s`. See docs/runtime.md.
"""

from __future__ import annotations

import dataclasses
import datetime
import logging
import os
import socket
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.distributed as dist

from . import _C
from .agreement import agree, agree_on_setup, digest
from .cost import cost_model_for, default_budget, hardware_memory
from .errors import BatchError, Error
from .failure_board import FailureBoard
from .memory_meter import MemoryMeter
from .models import llama
from .plan_config import PlanConfig
from .rendezvous import join_default_group
from .stage_adapter import protocol_module

_log = logging.getLogger("infinipipe")


@dataclass
class StepResult:
    loss: float  # mean next-token loss over the step's target tokens (the same on every rank)
    plan: dict  # the plan's summary: method, setting, hash, chunks, waves, predictions
    stats: dict = field(default_factory=dict)  # this stage's measured times, bytes, memory
    tokens: int = 0


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _split_of(
    config: llama.LlamaConfig, layer_split: int | Sequence[int] | None, world_size: int
) -> list[int]:
    if layer_split is None:
        return llama.even_layer_split(config.layers, world_size)
    if isinstance(layer_split, int):
        return llama.even_layer_split(config.layers, layer_split)
    split = [int(n) for n in layer_split]
    if not split or any(n <= 0 for n in split) or sum(split) != config.layers:
        raise ValueError(
            f"layer split {split} must be positive layer counts summing to the "
            f"model's {config.layers} layers"
        )
    return split


class Trainer:
    """Pipeline-parallel training of a decoder split into stages, one process per stage.

    model: a llama.LlamaConfig (the trainer builds this rank's stage with the seeded
        initialisation, so every split holds the same weights), or a factory
        `factory(stage, layers_per_stage) -> module` returning this rank's stage (a LlamaStage,
        a C++ stage module such as infinipipe.models.cpp.build_stage's, or any object
        implementing the executor's stage protocol); then give `model_config` for the cost
        model.
    optimizer_factory: `factory(parameters) -> torch.optim.Optimizer` (default AdamW, lr 1e-3).
    layer_split: layers per stage (a list), or a stage count split evenly; default: one stage
        per process, split evenly.
    plan: a PlanConfig. dtype: the model's (default: the config's). timeout_s: how long any
        rank waits for a peer before declaring it lost.
    group: a torch.distributed ProcessGroup; default: the default group, initialised here from
        torchrun's environment (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT, LOCAL_RANK), Gloo
        on CPU and NCCL when CUDA is available; a single process without that environment
        gets a world of one.
    """

    def __init__(
        self,
        model: llama.LlamaConfig | Callable[[int, list[int]], Any],
        optimizer_factory: Callable[[Iterable[torch.Tensor]], torch.optim.Optimizer] | None = None,
        *,
        layer_split: int | Sequence[int] | None = None,
        plan: PlanConfig | None = None,
        dtype: torch.dtype | None = None,
        model_config: llama.LlamaConfig | None = None,
        timeout_s: float = 300.0,
        seed: int = 0,
        group: Any = None,
        attention_backend: str = "auto",
    ) -> None:
        self.plan_config = plan if plan is not None else PlanConfig()
        self.timeout_s = float(timeout_s)
        if not self.timeout_s > 0:
            raise ValueError(f"timeout_s must be positive, got {timeout_s!r}")
        if isinstance(model, llama.LlamaConfig):
            config = model
        elif callable(model):
            if model_config is None:
                raise ValueError(
                    "Trainer: with a model factory, give model_config (the "
                    "LlamaConfig the planner's cost model is built from)"
                )
            config = model_config
        else:
            raise TypeError(f"Trainer: model must be a LlamaConfig or a factory, got {model!r}")
        self.dtype = dtype if dtype is not None else config.dtype
        self.config = config.replace(dtype=self.dtype)

        use_cuda = torch.cuda.is_available()
        self.device = (
            torch.device("cuda", int(os.environ.get("LOCAL_RANK", 0)))
            if use_cuda
            else torch.device("cpu")
        )
        if use_cuda:
            torch.cuda.set_device(self.device)
        self.group = group if group is not None else self._default_group(use_cuda)
        self.rank = dist.get_rank(self.group)
        self.world_size = dist.get_world_size(self.group)

        self.layers_per_stage = _split_of(self.config, layer_split, self.world_size)
        self.num_stages = len(self.layers_per_stage)
        if self.num_stages != self.world_size:
            raise Error(
                f"the world has {self.world_size} processes but the pipeline has "
                f"{self.num_stages} stages (layer split {self.layers_per_stage}); launch one "
                f"process per stage (torchrun --nproc_per_node={self.num_stages}) or change "
                f"the layer split"
            )
        self.stage_index = self.rank

        # Every rank sets up its stage, then all check that every rank did: a rank whose model
        # factory raised, or that never got here, is named on every rank (docs/design.md,
        # "Failures").
        self.board = (
            FailureBoard(self.rank, self.world_size, self.describe_rank)
            if self.world_size > 1
            else None
        )
        error = None
        try:
            self._set_up_stage(model, optimizer_factory, seed, attention_backend)
        except Exception as e:  # noqa: BLE001 - raised below, after telling the other ranks
            error = e
        if self.board is not None:
            addresses = agree_on_setup(
                self.group, self.board.address, error, self.timeout_s, self.describe_rank
            )
            self.board.connect(addresses)
        elif error is not None:
            raise error
        self._steps = 0
        self.config_fingerprint = digest(
            dataclasses.asdict(self.config),
            self.layers_per_stage,
            self.plan_config,
            self.memory_budget_bytes,
            str(self.dtype),
            self.world_size,
        )

    # --- setup ---

    def describe_rank(self, rank: int) -> str:
        return f"rank {rank} (stage {rank})"

    def _set_up_stage(
        self,
        model: Any,
        optimizer_factory: Callable[[Iterable[torch.Tensor]], torch.optim.Optimizer] | None,
        seed: int,
        attention_backend: str,
    ) -> None:
        if isinstance(model, llama.LlamaConfig):
            self.module = llama.build_stage(
                self.config, self.layers_per_stage, self.stage_index, seed=seed, device=self.device
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
        self.parameters = list(self.protocol.parameters())
        factory = optimizer_factory or (lambda params: torch.optim.AdamW(params, lr=1e-3))
        self.optimizer = factory(self.parameters)

        self.cost = cost_model_for(self.config, self.layers_per_stage, self.dtype, self.plan_config)
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
            attention_backend=attention_backend,
        )

    def _default_group(self, use_cuda: bool) -> Any:
        if not dist.is_initialized():
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
        return dist.group.WORLD

    # --- a step ---

    def _lost_peer(self, error: Any) -> Exception:
        """The error naming the rank lost first, for a wait on peers that failed."""
        _log.debug("step %d: the backend said: %s", self._steps, error.backend_detail)
        if self.board is None:
            return error
        return self.board.diagnose(self._steps, error)

    def _run(self, plan: Any, sequences: list[torch.Tensor], measure_memory: bool) -> Any:
        for p in self.parameters:
            p.grad = None
        if not measure_memory:
            return self.executor.run(plan, sequences), None
        meter = MemoryMeter(self.executor, self.parameters)
        self.executor.set_after_action(meter.sample)
        try:
            with meter.hooks():
                return self.executor.run(plan, sequences), meter
        finally:
            self.executor.set_after_action(None)

    def check_batch(self, batch: Any) -> list[torch.Tensor]:
        """The batch as 1-D int64 CPU tensors; BatchError when it cannot be trained on."""
        if isinstance(batch, torch.Tensor) or not isinstance(batch, Sequence) or len(batch) == 0:
            if isinstance(batch, Sequence) and not isinstance(batch, torch.Tensor):
                raise BatchError("the batch is empty: give at least one token sequence")
            raise BatchError(
                "a batch must be a list of token sequences (lists of ints or 1-D "
                f"integer tensors), got {type(batch).__name__}"
            )
        sequences = []
        for i, seq in enumerate(batch):
            try:
                t = torch.as_tensor(seq)
            except Exception as e:  # noqa: BLE001 - reported with the sequence's index
                raise BatchError(f"sequence {i} is not a token sequence: {e}") from None
            if t.layout != torch.strided or t.is_meta:
                raise BatchError(
                    f"sequence {i} is a {'meta' if t.is_meta else str(t.layout)} tensor, which "
                    "holds no readable token ids: give a dense tensor (.to_dense()) or a list"
                )
            if t.numel() == 0:
                raise BatchError(f"sequence {i} is empty")
            if t.dim() != 1 or t.is_floating_point() or t.is_complex() or t.dtype == torch.bool:
                raise BatchError(
                    f"sequence {i} must be a 1-D list or tensor of integer token "
                    f"ids, got {t.dtype} of shape {tuple(t.shape)}"
                )
            t = t.to(device="cpu", dtype=torch.long)
            lo, hi = int(t.min()), int(t.max())
            if lo < 0 or hi >= self.config.vocab:
                bad = lo if lo < 0 else hi
                pos = int((t == bad).nonzero()[0])
                raise BatchError(
                    f"sequence {i}, position {pos}: token id {bad} is outside the "
                    f"vocabulary [0, {self.config.vocab})"
                )
            sequences.append(t.contiguous())
        if sum(t.numel() - 1 for t in sequences) == 0:
            raise BatchError("the batch has no target tokens (every sequence has one token)")
        return sequences

    def plan(self, batch: Any) -> Any:
        """The plan this trainer would run for `batch` (an _C.plan.Plan)."""
        return self._plan_lengths([t.numel() for t in self.check_batch(batch)])

    def _plan_lengths(self, lengths: list[int]) -> Any:
        p = self.plan_config
        return _C.plan.plan_step(
            lengths,
            self.cost,
            float(self.memory_budget_bytes),
            p.method,
            k=p.k,
            token_cap=p.token_cap,
            chunk_tokens=p.chunk_tokens,
            uniform_recompute=p.uniform_recompute,
            max_k=p.max_k,
            checkpoint_time_limit_s=p.checkpoint_time_limit_s,
            baseline_chunkings=p.baseline_chunkings,
            overlap_waves=p.overlap_waves,
        )

    def step(self, batch: Any, plan: Any = None, measure_memory: bool = False) -> StepResult:
        """One training step on `batch` (a list of token sequences): plan, check agreement with
        the other ranks, run this stage, step the optimizer. `plan` overrides the planner (it
        must be a plan of this batch's lengths). measure_memory adds measured and predicted
        activation memory of this stage to the stats."""
        self._steps += 1
        error, sequences, fingerprint = None, None, None
        try:
            sequences = self.check_batch(batch)
            lengths = [t.numel() for t in sequences]
            if plan is None:
                plan = self._plan_lengths(lengths)  # validated by the planner
            else:
                if list(plan.lengths) != lengths:
                    raise BatchError(
                        f"the given plan is for sequence lengths "
                        f"{list(plan.lengths)}, the batch has {lengths}"
                    )
                if list(plan.layers_per_stage) != list(self.layers_per_stage):
                    raise BatchError(
                        f"the given plan splits the layers as {list(plan.layers_per_stage)}, "
                        f"the trainer as {list(self.layers_per_stage)}: plan with this "
                        "trainer (trainer.plan(batch))"
                    )
                plan.validate()
            fingerprint = digest(*(t.numpy().tobytes() for t in sequences))
        except Error as e:
            error = e
        except ValueError as e:
            error = BatchError(str(e))
        try:
            agree(
                self.executor,
                error,
                self.config_fingerprint,
                fingerprint,
                None if plan is None or error else plan.hash(),
            )
        except _C.runtime.PeerError as e:
            raise self._lost_peer(e) from None
        try:
            stats, meter = self._run(plan, sequences, measure_memory)
        except _C.runtime.PeerError as e:
            raise self._lost_peer(e) from None
        except Exception as e:
            # This rank failed by itself (its model raised): tell the ranks waiting for it.
            if self.board is not None:
                self.board.report_own_failure(self._steps, e)
            raise
        self.optimizer.step()

        if meter is not None:
            predicted = MemoryMeter.predicted(plan, self.cost, self.stage_index)
            stats.update(
                measured_activation_bytes=meter.peak_bytes,
                measured_saved_bytes=meter.peak_saved_bytes,
                measured_held_bytes=meter.peak_held_bytes,
                predicted_activation_bytes=predicted,
                activation_ratio=meter.peak_bytes / predicted if predicted > 0 else float("inf"),
            )
        return StepResult(
            loss=stats["loss"], plan=plan.summary(), stats=stats, tokens=sum(plan.lengths)
        )
