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
import hashlib
import json
import os
import socket
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Sequence

import torch
import torch.distributed as dist

from . import _C
from .models import llama

__all__ = ["Error", "BatchError", "PlanConfig", "StepResult", "Trainer", "LlamaStageAdapter",
           "MemoryMeter", "model_shape_json", "cost_model_for"]

Error = _C.Error  # every InfiniPipe failure (a RuntimeError)


class BatchError(Error, ValueError):
    """A batch the trainer cannot run (empty, malformed, token ids outside the vocabulary)."""


METHODS = ("epp", "batch", "seq1f1b", "chunkflow")
GIB = 1 << 30


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
    hardware: built-in hardware of the analytic cost model ("cpu", "a800"), or cost_model: a
        cost JSON file (for example from the profiler) whose layer split must be the trainer's.
    """

    method: str = "epp"
    memory_budget_gib: float | None = None
    memory_budget_bytes: int | None = None
    k: int = 1
    token_cap: int = 0
    chunk_tokens: int = 0
    uniform_recompute: int = -1
    max_k: int = 32
    # 0: no CBC, so every rank's independent plan is the same whatever its load (see planner.h)
    checkpoint_time_limit_s: float = 0.0
    baseline_chunkings: bool = True
    overlap_waves: bool = True  # EPP: may start a wave during the previous one's cool-down
    hardware: str = "cpu"
    cost_model: str | None = None

    def __post_init__(self) -> None:
        if self.method not in METHODS:
            raise ValueError(f"PlanConfig.method must be one of {', '.join(METHODS)}, "
                             f"got {self.method!r}")
        if self.memory_budget_gib is not None and self.memory_budget_bytes is not None:
            raise ValueError("PlanConfig: give memory_budget_gib or memory_budget_bytes, not both")
        for name in ("memory_budget_gib", "memory_budget_bytes"):
            value = getattr(self, name)
            if value is not None and not value > 0:
                raise ValueError(f"PlanConfig.{name} must be positive, got {value!r}")
        if self.k < 1 or self.max_k < 1:
            raise ValueError("PlanConfig: k and max_k must be at least 1")
        if self.method == "chunkflow" and self.chunk_tokens <= 0:
            raise ValueError("PlanConfig: method 'chunkflow' needs chunk_tokens > 0")

    def budget_bytes(self, hardware_memory_bytes: float, stages_on_host: int) -> float:
        if self.memory_budget_bytes is not None:
            return float(self.memory_budget_bytes)
        if self.memory_budget_gib is not None:
            return float(self.memory_budget_gib) * GIB
        return hardware_memory_bytes / max(1, stages_on_host)


@dataclass
class StepResult:
    loss: float  # mean next-token loss over the step's target tokens (the same on every rank)
    plan: dict   # the plan's summary: method, setting, hash, chunks, waves, predictions
    stats: dict = field(default_factory=dict)  # this stage's measured times, bytes, memory
    tokens: int = 0


# --------------------------------------------------------------------------------------------
# Stage modules


class LlamaStageAdapter:
    """The executor's stage protocol over a llama.LlamaStage (or anything with its methods:
    first_layer, last_layer, has_embedding, has_head, embed(tokens), layer(global_index, hidden,
    ctx), head(hidden), parameters()). Local layer i is the stage's layer first_layer + i, and
    each chunk gets a llama.ChunkContext whose attention calls the executor's chunk attention
    (the stage's K/V buffers for slices of split sequences)."""

    def __init__(self, stage: torch.nn.Module) -> None:
        self.stage = stage
        self.first_layer = int(stage.first_layer)
        self.num_layers = int(stage.last_layer) - self.first_layer
        self.has_embedding = bool(stage.has_embedding)
        self.has_head = bool(stage.has_head)

    def make_context(self, chunk_context: Any) -> llama.ChunkContext:
        first = self.first_layer

        def attention(q, k, v, ctx, layer_index):
            return chunk_context.attention(layer_index - first, q, k, v)

        return llama.ChunkContext(chunk_context.segments, attention=attention)

    def embed(self, tokens: torch.Tensor, ctx: llama.ChunkContext) -> torch.Tensor:
        return self.stage.embed(tokens)

    def layer(self, i: int, hidden: torch.Tensor, ctx: llama.ChunkContext) -> torch.Tensor:
        return self.stage.layer(self.first_layer + i, hidden, ctx)

    def head(self, hidden: torch.Tensor, ctx: llama.ChunkContext) -> torch.Tensor:
        return self.stage.head(hidden)

    def parameters(self) -> list[torch.Tensor]:
        return list(self.stage.parameters())


def _protocol_module(module: Any) -> Any:
    if isinstance(module, _C.runtime.StageModule):
        return module  # a C++ stage module (e.g. _C.models.LlamaStage): the executor runs it as is
    if all(hasattr(module, a) for a in ("first_layer", "last_layer", "layer", "embed", "head")):
        return LlamaStageAdapter(module)
    return module  # assumed to implement the protocol itself (num_layers, layer(local, ...), ...)


# --------------------------------------------------------------------------------------------
# Cost model


def model_shape_json(config: llama.LlamaConfig, dtype: torch.dtype, name: str = "model") -> str:
    """The planner's ModelShape of a LlamaConfig, as JSON text."""
    return json.dumps(dict(name=name, layers=config.layers, hidden=config.hidden,
                           heads=config.heads, kv_heads=config.kv_heads, ffn=config.ffn,
                           vocab=config.vocab,
                           bytes_per_element=torch.empty((), dtype=dtype).element_size()))


def cost_model_for(config: llama.LlamaConfig, layers_per_stage: Sequence[int], dtype: torch.dtype,
                   plan: PlanConfig) -> Any:
    """The cost model the planner uses: the plan config's JSON file, or the analytic model of
    the config's shape on plan.hardware."""
    if plan.cost_model is not None:
        cost = _C.plan.CostModel.load(str(plan.cost_model))
        if list(cost.layers_per_stage) != list(layers_per_stage):
            raise Error(f"the cost model {plan.cost_model} splits the layers as "
                        f"{list(cost.layers_per_stage)} but the trainer as "
                        f"{list(layers_per_stage)}; profile for the trainer's split")
        return cost
    return _C.plan.CostModel.analytic(model_shape_json(config, dtype), plan.hardware,
                                      list(layers_per_stage))


def _hardware_memory(plan: PlanConfig) -> float:
    """Memory of the plan config's hardware description (NaN with a cost JSON file)."""
    if plan.cost_model is not None:
        return float("nan")
    return float(json.loads(_C.plan.hardware_json(plan.hardware))["memory_bytes"])


# --------------------------------------------------------------------------------------------
# Memory measurement


class _Saved:
    __slots__ = ("meter", "key", "tensor")

    def __init__(self, meter: "MemoryMeter", key: int, tensor: torch.Tensor) -> None:
        self.meter, self.key, self.tensor = meter, key, tensor

    def __del__(self) -> None:
        self.meter._release(self.key)


class MemoryMeter:
    """Activation bytes a stage holds during a step: tensors autograd saves (seen through
    saved-tensor hooks, each storage counted once, parameters excluded) plus what the executor
    holds outside autograd (K/V buffers with their dK/dV accumulators once a backward allocated
    them, checkpointed layers' inputs). Sampled at every saved tensor and after every action;
    `peak_bytes` is the largest sum.

    It is compared with `predicted(plan, cost, stage)`: the plan's predicted peak for the stage
    without what the meter cannot see (model state; gradients in the backward workspace). See
    docs/runtime.md, "Memory"."""

    @staticmethod
    def predicted(plan: Any, cost: Any, stage: int) -> float:
        return float(plan.predicted_activation_peaks(cost)[stage])

    def __init__(self, executor: Any, parameters: Iterable[torch.Tensor]) -> None:
        self.executor = executor
        self.exclude = {p.untyped_storage().data_ptr() for p in parameters}
        self.saved: dict[int, list[int]] = {}  # storage pointer -> [bytes, references]
        self.saved_bytes = 0
        self.peak_bytes = 0
        self.peak_saved_bytes = 0
        self.peak_held_bytes = 0

    def _pack(self, tensor: torch.Tensor) -> Any:
        storage = tensor.untyped_storage()
        key = storage.data_ptr()
        if key in self.exclude or storage.nbytes() == 0:
            return tensor
        entry = self.saved.get(key)
        if entry is None:
            entry = self.saved[key] = [storage.nbytes(), 0]
            self.saved_bytes += entry[0]
        entry[1] += 1
        handle = _Saved(self, key, tensor)
        self.sample()
        return handle

    @staticmethod
    def _unpack(packed: Any) -> torch.Tensor:
        return packed.tensor if isinstance(packed, _Saved) else packed

    def _release(self, key: int) -> None:
        entry = self.saved.get(key)
        if entry is None:
            return
        entry[1] -= 1
        if entry[1] == 0:
            self.saved_bytes -= entry[0]
            del self.saved[key]

    def sample(self, _action: str | None = None) -> None:
        held, seen = 0, set()
        for t in self.executor.held_tensors():
            if t is None:  # a dK/dV accumulator not allocated yet
                continue
            storage = t.untyped_storage()
            key = storage.data_ptr()
            if key in seen or key in self.saved:
                continue
            seen.add(key)
            held += storage.nbytes()
        total = self.saved_bytes + held
        if total > self.peak_bytes:
            self.peak_bytes, self.peak_saved_bytes, self.peak_held_bytes = (
                total, self.saved_bytes, held)

    def hooks(self) -> torch.autograd.graph.saved_tensors_hooks:
        return torch.autograd.graph.saved_tensors_hooks(self._pack, self._unpack)


# --------------------------------------------------------------------------------------------
# Trainer


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _digest(*parts: Any) -> str:
    h = hashlib.sha256()
    for p in parts:
        h.update(p if isinstance(p, bytes) else repr(p).encode())
    return h.hexdigest()[:16]


def _split_of(config: llama.LlamaConfig, layer_split: int | Sequence[int] | None,
              world_size: int) -> list[int]:
    if layer_split is None:
        return llama.even_layer_split(config.layers, world_size)
    if isinstance(layer_split, int):
        return llama.even_layer_split(config.layers, layer_split)
    split = [int(n) for n in layer_split]
    if not split or any(n <= 0 for n in split) or sum(split) != config.layers:
        raise ValueError(f"layer split {split} must be positive layer counts summing to the "
                         f"model's {config.layers} layers")
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

    def __init__(self, model: llama.LlamaConfig | Callable[[int, list[int]], Any],
                 optimizer_factory: Callable[[Iterable[torch.Tensor]], torch.optim.Optimizer]
                 | None = None, *, layer_split: int | Sequence[int] | None = None,
                 plan: PlanConfig | None = None, dtype: torch.dtype | None = None,
                 model_config: llama.LlamaConfig | None = None, timeout_s: float = 300.0,
                 seed: int = 0, group: Any = None, attention_backend: str = "auto") -> None:
        self.plan_config = plan if plan is not None else PlanConfig()
        self.timeout_s = float(timeout_s)
        if not self.timeout_s > 0:
            raise ValueError(f"timeout_s must be positive, got {timeout_s!r}")
        if isinstance(model, llama.LlamaConfig):
            config = model
        elif callable(model):
            if model_config is None:
                raise ValueError("Trainer: with a model factory, give model_config (the "
                                 "LlamaConfig the planner's cost model is built from)")
            config = model_config
        else:
            raise TypeError(f"Trainer: model must be a LlamaConfig or a factory, got {model!r}")
        self.dtype = dtype if dtype is not None else config.dtype
        self.config = config.replace(dtype=self.dtype)

        use_cuda = torch.cuda.is_available()
        self.device = (torch.device("cuda", int(os.environ.get("LOCAL_RANK", 0))) if use_cuda
                       else torch.device("cpu"))
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
                f"the layer split")
        self.stage_index = self.rank

        if isinstance(model, llama.LlamaConfig):
            self.module = llama.build_stage(self.config, self.layers_per_stage, self.stage_index,
                                            seed=seed, device=self.device)
        else:
            self.module = model(self.stage_index, list(self.layers_per_stage))
        self.protocol = _protocol_module(self.module)
        if int(self.protocol.num_layers) != self.layers_per_stage[self.stage_index]:
            raise Error(f"stage {self.stage_index}: the model factory built "
                        f"{self.protocol.num_layers} layers, the split gives it "
                        f"{self.layers_per_stage[self.stage_index]}")
        self.parameters = list(self.protocol.parameters())
        factory = optimizer_factory or (lambda params: torch.optim.AdamW(params, lr=1e-3))
        self.optimizer = factory(self.parameters)

        self.cost = cost_model_for(self.config, self.layers_per_stage, self.dtype,
                                   self.plan_config)
        stages_on_host = int(os.environ.get("LOCAL_WORLD_SIZE", self.world_size))
        self.memory_budget_bytes = self.plan_config.budget_bytes(
            _hardware_memory(self.plan_config), stages_on_host)
        if self.memory_budget_bytes != self.memory_budget_bytes:  # NaN: no default known
            self.memory_budget_bytes = _default_budget(self.device) / max(1, stages_on_host)

        self.executor = _C.runtime.Executor(
            self.protocol, self.group, self.stage_index, self.num_stages, self.dtype,
            self.device, self.config.hidden, self.config.kv_heads, self.config.head_dim,
            timeout_s=self.timeout_s, attention_backend=attention_backend)
        self._steps = 0
        self.config_fingerprint = _digest(
            dataclasses.asdict(self.config), self.layers_per_stage, self.plan_config,
            self.memory_budget_bytes, str(self.dtype), self.world_size)

    # --- setup ---

    def _default_group(self, use_cuda: bool) -> Any:
        if not dist.is_initialized():
            backend = "nccl" if use_cuda else "gloo"
            timeout = datetime.timedelta(seconds=self.timeout_s)
            if "WORLD_SIZE" in os.environ and "RANK" in os.environ:
                dist.init_process_group(backend, timeout=timeout)
            else:
                dist.init_process_group(backend, init_method=f"tcp://127.0.0.1:{_free_port()}",
                                        rank=0, world_size=1, timeout=timeout)
        return dist.group.WORLD

    # --- a step ---

    def check_batch(self, batch: Any) -> list[torch.Tensor]:
        """The batch as 1-D int64 CPU tensors; BatchError when it cannot be trained on."""
        if isinstance(batch, torch.Tensor) or not isinstance(batch, Sequence) or len(batch) == 0:
            if isinstance(batch, Sequence) and not isinstance(batch, torch.Tensor):
                raise BatchError("the batch is empty: give at least one token sequence")
            raise BatchError("a batch must be a list of token sequences (lists of ints or 1-D "
                             f"integer tensors), got {type(batch).__name__}")
        sequences = []
        for i, seq in enumerate(batch):
            try:
                t = torch.as_tensor(seq)
            except Exception as e:  # noqa: BLE001 - reported with the sequence's index
                raise BatchError(f"sequence {i} is not a token sequence: {e}") from None
            if t.numel() == 0:
                raise BatchError(f"sequence {i} is empty")
            if t.dim() != 1 or t.is_floating_point() or t.is_complex() or t.dtype == torch.bool:
                raise BatchError(f"sequence {i} must be a 1-D list or tensor of integer token "
                                 f"ids, got {t.dtype} of shape {tuple(t.shape)}")
            t = t.to(device="cpu", dtype=torch.long)
            lo, hi = int(t.min()), int(t.max())
            if lo < 0 or hi >= self.config.vocab:
                bad = lo if lo < 0 else hi
                pos = int((t == bad).nonzero()[0])
                raise BatchError(f"sequence {i}, position {pos}: token id {bad} is outside the "
                                 f"vocabulary [0, {self.config.vocab})")
            sequences.append(t.contiguous())
        if sum(t.numel() - 1 for t in sequences) == 0:
            raise BatchError("the batch has no target tokens (every sequence has one token)")
        return sequences

    def plan(self, batch: Any) -> Any:
        """The plan this trainer would run for `batch` (an _C.plan.Plan)."""
        return self._plan_lengths([t.numel() for t in self.check_batch(batch)])

    def _plan_lengths(self, lengths: list[int]) -> Any:
        p = self.plan_config
        cap = p.token_cap or max(lengths)
        return _C.plan.plan_step(
            lengths, self.cost, float(self.memory_budget_bytes), p.method, k=p.k, token_cap=cap,
            chunk_tokens=p.chunk_tokens, uniform_recompute=p.uniform_recompute, max_k=p.max_k,
            checkpoint_time_limit_s=p.checkpoint_time_limit_s,
            baseline_chunkings=p.baseline_chunkings, overlap_waves=p.overlap_waves)

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
                plan = self._plan_lengths(lengths)
            elif list(plan.lengths) != lengths:
                raise BatchError(f"the given plan is for sequence lengths {list(plan.lengths)}, "
                                 f"the batch has {lengths}")
            plan.validate()
            fingerprint = _digest(*(t.numpy().tobytes() for t in sequences))
        except Error as e:
            error = e
        except ValueError as e:
            error = BatchError(str(e))
        self._agree(error, fingerprint, None if plan is None or error else plan.hash())

        for p in self.parameters:
            p.grad = None
        meter = None
        try:
            if measure_memory:
                meter = MemoryMeter(self.executor, self.parameters)
                self.executor.set_after_action(meter.sample)
                try:
                    with meter.hooks():
                        stats = self.executor.run(plan, sequences)
                finally:
                    self.executor.set_after_action(None)
            else:
                stats = self.executor.run(plan, sequences)
        except Error as e:
            raise Error(self._report_failure(str(e))) from None
        self.optimizer.step()

        if meter is not None:
            predicted = MemoryMeter.predicted(plan, self.cost, self.stage_index)
            stats.update(measured_activation_bytes=meter.peak_bytes,
                         measured_saved_bytes=meter.peak_saved_bytes,
                         measured_held_bytes=meter.peak_held_bytes,
                         predicted_activation_bytes=predicted,
                         activation_ratio=meter.peak_bytes / predicted if predicted > 0
                         else float("inf"))
        return StepResult(loss=stats["loss"], plan=plan.summary(), stats=stats,
                          tokens=sum(plan.lengths))

    def _report_failure(self, message: str) -> str:
        """Publishes this rank's failure in the group's store and adds what other ranks
        published: when a lost rank makes its neighbour fail and exit, the ranks further away
        lose that neighbour, and the store tells them which rank was lost first."""
        try:
            store = dist.distributed_c10d._get_default_store()
            previous_timeout = store.timeout
        except Exception:  # noqa: BLE001 - no store (a group made without one)
            return message
        try:
            store.set_timeout(datetime.timedelta(seconds=2))
            prefix = f"infinipipe/failure/step{self._steps}/rank"
            store.set(f"{prefix}{self.rank}", message)
            reports = [(r, store.get(f"{prefix}{r}").decode())
                       for r in range(self.world_size)
                       if r != self.rank and store.check([f"{prefix}{r}"])]
        except Exception:  # noqa: BLE001 - the store may be gone with the lost rank
            return message
        finally:
            try:
                store.set_timeout(previous_timeout)
            except Exception:  # noqa: BLE001
                pass
        for r, report in reports:
            message += f"\n  (rank {r} reported before: {report})"
        return message

    def _agree(self, error: Exception | None, batch_fingerprint: str | None,
               plan_hash: str | None) -> None:
        """One all_gather: every rank learns whether any rank rejected the step and whether
        all hold the same configuration, batch and plan; on any difference every rank raises."""
        mine = (None if error is None else f"{type(error).__name__}: {error}",
                self.config_fingerprint, batch_fingerprint, plan_hash)
        # Through the executor, not dist.all_gather_object: Gloo keeps its last finished work
        # (and its tensors) alive, and a Python-owned tensor released at interpreter shutdown
        # aborts the process after a successful run.
        everyone = [json.loads(b) for b in self.executor.all_gather_text(json.dumps(mine))]
        if error is not None:
            raise error
        failed = [(r, e[0]) for r, e in enumerate(everyone) if e[0] is not None]
        if failed:
            raise Error("rank(s) " + ", ".join(str(r) for r, _ in failed) + " rejected the step, "
                        "so no rank runs it: " + "; ".join(f"rank {r}: {m}" for r, m in failed))
        for index, what in ((1, "trainer configurations (model, layer split, plan config, "
                                "dtype)"),
                            (2, "batches"), (3, "plans")):
            values = [e[index] for e in everyone]
            if len(set(values)) > 1:
                groups: dict[str, list[int]] = {}
                for r, v in enumerate(values):
                    groups.setdefault(v, []).append(r)
                detail = "; ".join(f"ranks {rs} have {v}" for v, rs in groups.items())
                raise Error(f"the ranks hold different {what}, so the step cannot run: "
                            f"{detail}. Every rank must run the same script with the same "
                            f"configuration on the same data")


def _default_budget(device: torch.device) -> float:
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
