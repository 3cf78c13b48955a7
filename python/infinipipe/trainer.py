"""The pipeline trainer: one process per stage, launched with torchrun.

    trainer = infinipipe.Trainer(LlamaConfig.tiny(), lambda params: torch.optim.AdamW(params),
                                 plan=infinipipe.PlanConfig(memory_budget_gib=2))
    for batch in batches:               # lists of variable-length token sequences
        result = trainer.step(batch)    # result.loss, result.plan (summary dict), result.stats

or, shaping the loop (every rank makes the same calls, in the same order):

    trainer.zero_grad()
    result = trainer.forward_backward(batch)   # adds to the gradients (accumulate: call again)
    norm = trainer.clip_grad_norm_(1.0)        # global over all stages
    if math.isfinite(norm):
        trainer.optimizer_step()
    held_out = trainer.evaluate(eval_batches)  # loss, perplexity; forward only

Every rank runs the same code on the same batch. A step validates the batch, plans it with the
C++ planner, checks through one all_gather that every rank holds the same configuration, batch
and plan (and that none rejected the batch), runs this rank's stage of the plan with the C++
executor (point-to-point pipes over the torch.distributed process group, Gloo on CPU, NCCL on
GPU). Errors are raised on every rank, naming the ranks at fault; a lost peer ends the step with
an error naming it within `timeout_s`. See docs/runtime.md.

Trainer's setup and its gradient plumbing (sums across ranks, norm, clipping) are its bases in
trainer_setup.py and trainer_gradients.py; the checks of a step's batch and of a given plan are in
step_input.py, the results it returns in results.py.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import os
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any

import torch
import torch.distributed as dist

from . import _C, collector, mixed_precision, profiled_cost, step_input
from .agreement import agree, agree_on_setup, digest
from .errors import BatchError, Error
from .failure_board import FailureBoard
from .layout import Layout, Parallel, Share, share_indices
from .memory_meter import MemoryMeter
from .models import llama
from .plan_config import PlanConfig
from .planning_ahead import PlanAhead, Prefetching
from .rendezvous import at_exit, peer_lost
from .results import EvalResult, StepResult
from .stage_group import CollectiveFailure, guarded, local_optimizer, settle
from .trainer_gradients import TrainerGradients
from .trainer_setup import TrainerSetup

_log = logging.getLogger("infinipipe")


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


class Trainer(TrainerSetup, TrainerGradients):
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
    plan: a PlanConfig. dtype: the model's (default: the config's). master_dtype: the dtype of
        the master weights the optimizer steps (mixed_precision.py); default float32 for a
        bfloat16/float16 model, none (the optimizer steps the model's own parameters) otherwise.
        timeout_s: how long any rank waits for a peer before declaring it lost.
    group: a torch.distributed ProcessGroup; default: the default group, initialised here from
        torchrun's environment (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT, LOCAL_RANK), Gloo
        on CPU and NCCL when CUDA is available; a single process without that environment
        gets a world of one.
    parallel: the layout (layout.Parallel): data replicas x pipeline stages x sequence ranks;
        default: every process a pipeline stage. With replicas, every rank passes the whole
        batch; it is split over the replicas by predicted cost, each replica plans its share,
        and the gradients are summed over each stage's replicas once per step.
    spread_head: run chunks' LM heads and losses on the stages the planner assigns
        (docs/design.md, "Spread head"; sets PlanConfig.spread_head, None keeps the plan
        config's). Every stage then holds a replica of the final norm and the LM head (a model
        factory must build it: llama.build_stage(..., spread_head=True)); once per step their
        gradients are summed over every rank, so each replica takes the same optimizer step.
    flush_denormal: True sets torch.set_flush_denormal(True) for this process: on the CPU,
        numbers below the normal range (1.2e-38 in float32) become zero. Recommended for
        training on a CPU (the example and the benchmarks set it): without it, an Intel Xeon ran
        the README example's steps up to 6x slower once training had made some values denormal
        (from about step 23 of 40). Off by default because the setting is the whole process's,
        Python's own float arithmetic included (docs/runtime.md, "Denormal numbers on the CPU").
    pause_gc: True turns Python's garbage collector off while the pipeline runs (a step's
        forwards and backwards, an evaluation) and back on when the run ends, so that what is
        due is collected outside the pipeline: a collection in the middle of an action stalls
        every rank waiting for this one (torchtitan's gc_freq and Megatron-LM's --manual-gc take
        it out of the step for that reason). Off by default: on a 2-core CPU it changed the
        step by 0.99-1.04x (docs/runtime.md, "Python's garbage collector"). A collector the
        caller turned off stays off.
    """

    def __init__(
        self,
        model: llama.LlamaConfig | Callable[[int, list[int]], Any],
        optimizer_factory: Callable[[Iterable[torch.Tensor]], torch.optim.Optimizer] | None = None,
        *,
        layer_split: int | Sequence[int] | None = None,
        plan: PlanConfig | None = None,
        dtype: torch.dtype | None = None,
        master_dtype: torch.dtype | None | str = "default",
        model_config: llama.LlamaConfig | None = None,
        timeout_s: float = 300.0,
        seed: int = 0,
        group: Any = None,
        attention_backend: str = "auto",
        parallel: Parallel | None = None,
        spread_head: bool | None = None,
        flush_denormal: bool = False,
        pause_gc: bool = False,
    ) -> None:
        self.pause_gc = bool(pause_gc)
        if flush_denormal:
            torch.set_flush_denormal(True)
        self.plan_config = plan if plan is not None else PlanConfig()
        if spread_head is not None:
            self.plan_config = dataclasses.replace(self.plan_config, spread_head=bool(spread_head))
        self.spread_head = self.plan_config.spread_head
        self._parallel = parallel if parallel is not None else Parallel()
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
        self.master_dtype = (
            mixed_precision.default_master_dtype(self.dtype)
            if master_dtype == "default"
            else master_dtype
        )

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

        parallel = self._parallel
        pipeline = parallel.resolve(self.world_size).pipeline
        self.layers_per_stage = _split_of(self.config, layer_split, pipeline)
        self.num_stages = len(self.layers_per_stage)
        if self.num_stages != pipeline:
            processes = self.num_stages * parallel.sequence * parallel.data
            raise Error(
                f"the world has {self.world_size} processes but the pipeline has "
                f"{self.num_stages} stages (layer split {self.layers_per_stage}); launch one "
                f"process per stage and sequence rank of each replica (torchrun "
                f"--nproc_per_node={processes}) or change the layer split"
            )
        self.layout = Layout(parallel, self.rank, self.world_size)
        self.layout.create_groups(self.timeout_s, spread_head=self.spread_head)
        at_exit(self.layout.destroy_groups)  # when the caller neither closes nor destroys
        self.stage_index = self.layout.stage

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
        self._steps = 0  # optimizer steps taken (a checkpoint's step)
        self._calls = 0  # runs on the pipeline (training and evaluation): the failure board's key
        self._tied_pending = False
        self._reduce_pending = False
        self._head_pending = False
        self._ahead = PlanAhead(self._plan_lengths)
        self._closed = False
        self._profile_check = None  # a cached profile's check (_profile_cost)
        if self.plan_config.cost_model == profiled_cost.PROFILE:
            self._calls += 1  # a collective of its own on the failure board
            with self._failures_named():
                self._profile_cost()
        self.config_fingerprint = digest(
            dataclasses.asdict(self.config),
            self.layers_per_stage,
            self.plan_config,
            self.memory_budget_bytes,
            str(self.dtype),
            str(self.master_dtype),
            self.world_size,
            self.layout.parallel,
        )

    def _lost_peer(self, error: Any) -> Exception:
        """The error naming the rank lost first, for a wait on peers that failed."""
        peer_lost()  # the groups are left to the process's end (rendezvous.at_exit)
        _log.debug("call %d: the backend said: %s", self._calls, error.backend_detail)
        if self.board is None:
            return error
        return self.board.diagnose(self._calls, error)

    @contextlib.contextmanager
    def _failures_named(self) -> Iterator[None]:
        """Around a run on the pipeline: a lost peer becomes the error naming the rank lost
        first; a failure of this rank's own (its model raised) is told to the ranks waiting."""
        try:
            yield
        except (_C.runtime.PeerError, CollectiveFailure) as e:
            raise self._lost_peer(e) from None
        except Exception as e:
            if self.board is not None:
                self.board.report_own_failure(self._calls, e)
            raise

    def _run(self, plan: Any, share: Share, measure_memory: bool) -> Any:
        if not measure_memory:
            return self.executor.run(plan, share.sequences, share.loss_tokens), None
        meter = MemoryMeter(self.executor, self.parameters)
        self.executor.set_after_action(meter.sample)
        try:
            with meter.hooks():
                return self.executor.run(plan, share.sequences, share.loss_tokens), meter
        finally:
            self.executor.set_after_action(None)

    def check_batch(self, batch: Any) -> list[torch.Tensor]:
        """The batch as 1-D int64 CPU tensors; BatchError when it cannot be trained on."""
        return step_input.check_batch(batch, self.config.vocab)

    def plan(self, batch: Any) -> Any:
        """The plan this trainer would run for `batch` (an _C.plan.Plan): with data replicas,
        the plan of this rank's replica's share of it."""
        return self._plan_lengths([t.numel() for t in self.check_batch(batch)])

    def _plan_lengths(self, lengths: list[int]) -> Any:
        p = self.plan_config
        share = share_indices(self.layout, lengths, self.cost)
        return _C.plan.plan_step(
            [lengths[i] for i in share],
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
            spread_head=p.spread_head,
            search_work_limit=p.search_work_limit,
        )

    def prefetch(self, batch: Any) -> None:
        """Starts planning `batch` on a background thread (planning_ahead.py): the next
        step on a batch of the same lengths takes that plan, so planning overlaps whatever runs
        meanwhile (the current step). A batch that cannot be trained on is left for the step to
        report (on every rank alike)."""
        try:
            lengths = [t.numel() for t in self.check_batch(batch)]
        except Error:
            return
        self._ahead.submit(lengths)

    def prefetching(self, batches: Iterable[Any]) -> Prefetching:
        """`batches`, each handed to prefetch() one batch before the loop gets it:

            for batch in trainer.prefetching(loader):
                trainer.step(batch)

        Its state_dict() is the loader's as of the batch the loop holds (not the one ahead),
        so save that in a checkpoint."""
        return Prefetching(self.prefetch, batches)

    def step(self, batch: Any, plan: Any = None, measure_memory: bool = False) -> StepResult:
        """One training step on `batch` (a list of token sequences): zero_grad(),
        forward_backward(), optimizer_step(). The step's gradients stay in .grad."""
        self.zero_grad()
        result = self.forward_backward(batch, plan, measure_memory)
        self.optimizer_step()
        return result

    def forward_backward(
        self, batch: Any, plan: Any = None, measure_memory: bool = False
    ) -> StepResult:
        """Forward and backward of `batch` (a list of token sequences): plan, check agreement
        with the other ranks, run this stage. The gradients of the batch's mean loss are added
        to the parameters' .grad (accumulating over calls until zero_grad()). `plan` overrides
        the planner (it must be a plan of this batch's lengths). measure_memory adds measured
        and predicted activation memory of this stage to the stats."""
        started = time.perf_counter()
        self._calls += 1
        plan, share, planning = self._prepare(batch, plan)
        with collector.paused(self.pause_gc), self._failures_named():
            stats, meter = self._run(plan, share, measure_memory)
        self._tied_pending = bool(self._tied())
        self._reduce_pending = self.layout.gradient_group is not None
        # Every rank, every step, head work or not: the collectives stay the same everywhere.
        self._head_pending = self.spread_head and self.world_size > 1

        if meter is not None:
            predicted = MemoryMeter.predicted(plan, self.cost, self.stage_index)
            stats.update(
                measured_activation_bytes=meter.peak_bytes,
                measured_saved_bytes=meter.peak_saved_bytes,
                measured_held_bytes=meter.peak_held_bytes,
                predicted_activation_bytes=predicted,
                activation_ratio=meter.peak_bytes / predicted if predicted > 0 else float("inf"),
            )
        result = StepResult(
            loss=stats["loss"],
            plan=dict(plan.summary(), cost_model=self.cost_model_name),
            stats=stats,
            tokens=share.tokens,
            planning_s=planning[0],
            planning_hidden_s=planning[1],
            step_s=time.perf_counter() - started,
        )
        if self._profile_check is not None:
            self._check_profile(result.step_s, result.predicted_s)
        return result

    def optimizer_step(self) -> None:
        """Steps the optimizer on the accumulated gradients (which stay until zero_grad())."""
        self._gather_gradients()

        def step() -> None:
            if self.master is not None:
                self.master.step(self.optimizer)
            else:
                self.optimizer.step()

        if local_optimizer(self.optimizer) is not self.optimizer:
            # Its step() broadcasts every shard's update over the gradient group.
            with self._failures_named():
                guarded("the ZeRO optimizer's broadcast of the updated parameters", step)
                settle(self.layout.gradient_group, self.device, self.timeout_s)
        else:
            step()
        self._steps += 1

    @property
    def steps(self) -> int:
        """Optimizer steps taken (restored by load_checkpoint)."""
        return self._steps

    def close(self) -> None:
        """Stops planning ahead and shuts down the sequence and gradient groups the trainer
        made; the default group stays the caller's. The trainer cannot run after this. Also
        `with Trainer(...) as trainer:`."""
        self._ahead.close()
        self.layout.destroy_groups()
        self._closed = True

    def __enter__(self) -> Trainer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def save_checkpoint(self, path: str | os.PathLike, extra: dict | None = None) -> Any:
        """Saves the whole training state (infinipipe.checkpoint.save): every rank's stage
        weights and optimizer state, the step, RNG states, and `extra` (for example the data
        loader's state_dict()). A collective: every rank calls it."""
        from . import checkpoint

        return checkpoint.save(self, path, extra)

    def load_checkpoint(self, path: str | os.PathLike) -> Any:
        """Restores what save_checkpoint saved; returns its `extra`. A collective."""
        from . import checkpoint

        return checkpoint.load(self, path)

    def evaluate(self, batches: Iterable[Any]) -> EvalResult:
        """Forward-only loss over `batches` (each a list of token sequences): the mean loss per
        target token over all of them, and its perplexity. No activations are kept for a
        backward and no gradient changes. Every rank passes the same batches."""
        loss_sum, tokens, count = 0.0, 0, 0
        for batch in batches:
            self._calls += 1
            plan, share, _ = self._prepare(batch, None)
            with collector.paused(self.pause_gc), self._failures_named():
                stats = self.executor.evaluate(plan, share.sequences, share.loss_tokens)
            loss_sum += stats["loss"] * share.loss_tokens
            tokens += share.loss_tokens
            count += 1
        if count == 0:
            raise BatchError("evaluate: no batches were given")
        return EvalResult(loss=loss_sum / tokens, tokens=tokens, batches=count)

    def _prepare(self, batch: Any, plan: Any) -> tuple[Any, Share, tuple[float, float]]:
        """The checked batch, this replica's share of it and its plan (planned ahead, planned
        here, or given), agreed by every rank; and (planning seconds, the part of them hidden
        by planning ahead)."""
        if self._closed:
            raise Error("this trainer was closed (Trainer.close); create a new Trainer to go on")
        planning = (0.0, 0.0)
        error, share, fingerprint = None, None, None
        try:
            sequences = self.check_batch(batch)
            lengths = [t.numel() for t in sequences]
            indices = share_indices(self.layout, lengths, self.cost)
            share = Share(
                indices=indices,
                sequences=[sequences[i] for i in indices],
                loss_tokens=sum(n - 1 for n in lengths),
                tokens=sum(lengths),
            )
            if plan is None:
                plan, planning = self._planned(lengths)  # validated by the planner
            else:
                step_input.check_given_plan(
                    plan, lengths, indices, self.layers_per_stage, self.spread_head
                )
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
                replica_of=self.layout.replica_of,
            )
        except _C.runtime.PeerError as e:
            raise self._lost_peer(e) from None
        return plan, share, planning

    def _planned(self, lengths: list[int]) -> tuple[Any, tuple[float, float]]:
        ahead = self._ahead.take(lengths)
        if ahead is not None:
            plan, planning_s, waited_s = ahead
            return plan, (planning_s, max(0.0, planning_s - waited_s))
        started = time.perf_counter()
        plan = self._plan_lengths(lengths)
        return plan, (time.perf_counter() - started, 0.0)
