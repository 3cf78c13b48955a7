"""Over 400 lines for a reason: the whole public API of training, each method a few lines that
hand over to the parts (StepPlanner, StageRuntime, GradientSync, state.checkpoint).

The pipeline trainer: one process per stage (and sequence rank, and replica), under torchrun.

    trainer = infinipipe.Trainer(LlamaConfig.tiny(), lambda params: torch.optim.AdamW(params),
                                 plan=infinipipe.PlanConfig(memory_budget_gib=2))
    for batch in batches:               # lists of variable-length token sequences
        result = trainer.step(batch)    # zero_grad, forward_backward, optimizer_step

A step checks the batch, plans it (StepPlanner), checks through one all_gather that every rank
holds the same configuration, batch and plan, runs this rank's stage with the C++ executor
(StageRuntime) and completes the gradients over the layout (GradientSync). Errors are raised on
every rank, naming the ranks at fault; a lost peer ends the step with an error naming it within
the timeout (distributed/failures.py). docs/runtime.md, "Using it", shows a loop that clips,
accumulates and evaluates.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import time
import weakref
from collections.abc import Callable, Iterable
from typing import Any

import torch
import torch.distributed as dist

from ..distributed.agreement import agree, agree_on_setup, digest
from ..distributed.exit_hooks import at_exit, was_peer_lost
from ..distributed.failure_board import FailureBoard
from ..distributed.failures import Failures
from ..distributed.layout import Layout, Parallel, Share
from ..distributed.rendezvous import default_group, local_device
from ..errors import BatchError, Error
from ..models import llama
from ..models.stage_protocol import StageFactory
from ..planning.ahead import Prefetching
from ..planning.config import PlanConfig
from ..profiling import profiled_cost
from ..state import checkpoint
from . import gc_pause, step_input
from .config import RuntimeConfig
from .deprecated import moved_attribute, with_moved_keywords
from .gradient_sync import GradientSync
from .results import EvalResult, StepResult
from .stage_runtime import OptimizerFactory, StageRuntime
from .step_planner import StepPlanner


class Trainer:
    """Pipeline-parallel training of a decoder split into stages.

    model: a llama.LlamaConfig (the trainer builds this rank's stage with the seeded
        initialisation, so every split holds the same weights), or a StageFactory (its build
        returns this rank's stage, its config is the shape the planner's cost model is built
        from: models.hf.stage_factory, models.cpp.stage_factory, or your own).
    optimizer_factory: `factory(parameters) -> torch.optim.Optimizer` (default AdamW, lr 1e-3).
    plan: how steps are planned (PlanConfig): the method, the memory budget, the cost model,
        the spread head.
    parallel: the layout (Parallel): data replicas x pipeline stages x sequence ranks, ZeRO, and
        the layer split; default: every process a pipeline stage, layers split evenly. With
        replicas, every rank passes the whole batch and each replica trains its share.
    runtime: how this rank runs its stage (RuntimeConfig): dtypes, timeout, seed, kernels.
    group: a torch.distributed ProcessGroup; default: the default group, made from torchrun's
        environment (Gloo on CPU, NCCL on GPUs; a world of one without torchrun).
    """

    # What it trains and how: the configs as given, with defaults and the model's dtype resolved.
    config: llama.LlamaConfig
    plan_config: PlanConfig
    runtime: RuntimeConfig
    layout: Layout
    # Where this rank runs.
    group: Any
    rank: int
    world_size: int
    device: torch.device
    stage_index: int
    num_stages: int
    layers_per_stage: list[int]
    # Its parts.
    failures: Failures  # names lost peers on every rank
    planner: StepPlanner  # plans the steps
    stage: StageRuntime  # runs them on this rank's stage
    gradients: GradientSync  # makes the gradients whole over the layout
    config_fingerprint: str  # what every rank must hold alike
    # Training progress (state_dict).
    _steps: int  # optimizer steps taken
    _closed: bool

    def __init__(
        self,
        model: llama.LlamaConfig | StageFactory,
        optimizer_factory: OptimizerFactory | None = None,
        *,
        plan: PlanConfig | None = None,
        parallel: Parallel | None = None,
        runtime: RuntimeConfig | None = None,
        group: Any = None,
        **moved: Any,
    ) -> None:
        model, plan, parallel, runtime = with_moved_keywords(model, plan, parallel, runtime, moved)
        if runtime.flush_denormal:
            torch.set_flush_denormal(True)
        config = model.config if isinstance(model, StageFactory) else model
        self.runtime = runtime.resolved(config.dtype)
        self.config = config.replace(dtype=self.runtime.dtype)
        self.plan_config = plan
        timeout_s = float(self.runtime.timeout_s)

        self.device = local_device(self.runtime.share_gpus)
        self._parallel = parallel  # until the layout exists (describe_rank)
        if group is None:
            # ZeRO is built when a stage has a gradient group (more than one rank holds it).
            sharded = parallel.zero == 1 and (parallel.data != 1 or parallel.sequence != 1)
            group = default_group(self.device, timeout_s, self.describe_rank, sharded)
        self.group = group
        self.rank = dist.get_rank(self.group)
        self.world_size = dist.get_world_size(self.group)

        self.layers_per_stage = parallel.stage_layers(self.config.layers, self.world_size)
        self.num_stages = len(self.layers_per_stage)
        self.layout = Layout(parallel, self.rank, self.world_size)
        self.layout.create_groups(timeout_s, spread_head=plan.spread_head)
        at_exit(self.layout.destroy_groups)  # when the caller neither closes nor destroys
        self.stage_index = self.layout.stage

        # Every rank sets up its stage, then all check that every rank did: a rank whose model
        # factory raised, or that never got here, is named on every rank (docs/design.md,
        # "Failures").
        board = (
            FailureBoard(self.rank, self.world_size, self.describe_rank)
            if self.world_size > 1
            else None
        )
        self.failures = Failures(board)
        error = None
        try:
            self.planner = StepPlanner(
                plan, self.config, self.layers_per_stage, self.layout, self.device, timeout_s
            )
            self.stage = StageRuntime(
                model if isinstance(model, StageFactory) else self.config,
                optimizer_factory,
                config=self.config,
                layers_per_stage=self.layers_per_stage,
                layout=self.layout,
                group=self.group,
                device=self.device,
                master_dtype=self.runtime.master_dtype,
                seed=self.runtime.seed,
                timeout_s=timeout_s,
                attention_backend=self.runtime.attention_backend,
                spread_head=plan.spread_head,
            )
        except Exception as e:  # noqa: BLE001 - raised below, after telling the other ranks
            error = e
        if board is not None:
            addresses = agree_on_setup(
                self.group, board.address, error, timeout_s, self.describe_rank
            )
            board.connect(addresses)
        elif error is not None:
            raise error
        self.gradients = GradientSync(
            self.stage, self.layout, self.group, self.failures, plan.spread_head, self.runtime
        )
        self._steps = 0
        self._closed = False
        if plan.cost_model == profiled_cost.PROFILE:
            self.failures.next_call()  # a collective of its own on the failure board
            with self.failures.named():
                self.planner.profile(self.stage.gather_text)
        self.config_fingerprint = digest(
            dataclasses.asdict(self.config),
            self.layers_per_stage,
            self.plan_config,
            self.planner.memory_budget_bytes,
            str(self.config.dtype),
            str(self.runtime.master_dtype),
            self.world_size,
            self.layout.parallel,
        )
        # Closed at exit when the caller does not (after the line above, which only destroys the
        # groups: a trainer that failed to build has nothing else to close). Held weakly, so the
        # exit hook keeps no trainer alive.
        at_exit(_close_at_exit(weakref.ref(self)))

    # --- training ---

    def step(self, batch: Any, plan: Any = None, measure_memory: bool = False) -> StepResult:
        """One training step on `batch` (a list of token sequences): zero_grad(),
        forward_backward(), optimizer_step() (result.skipped when it skipped). The step's
        gradients stay in .grad."""
        self.zero_grad()
        result = self.forward_backward(batch, plan, measure_memory)
        result.skipped = not self.optimizer_step()
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
        self.failures.next_call()
        plan, share, planning = self._prepare(batch, plan)
        with gc_pause.paused(self.runtime.pause_gc), self.failures.named():
            stats, meter = self.stage.run(plan, share, measure_memory)
        self.gradients.after_backward(stats["loss"])
        if meter is not None:
            stats.update(meter.stats(plan, self.cost, self.stage_index))
        result = StepResult(
            loss=stats["loss"],
            plan=dict(plan.summary(), cost_model=self.planner.cost_model_name),
            stats=stats,
            tokens=share.tokens,
            planning_s=planning[0],
            planning_hidden_s=planning[1],
            step_s=time.perf_counter() - started,
        )
        if self.planner.checks_profile:
            self.planner.check_profile(
                result.step_s, result.predicted_s, self.stage.gather_text, self.failures
            )
        return result

    def zero_grad(self) -> None:
        self.gradients.zero_grad()

    def grad_norm(self, norm_type: float = 2.0) -> float:
        """The norm of all stages' gradients together (a weight tied across stages counted
        once), the same on every rank. A collective: every rank calls it."""
        return self.gradients.norm(norm_type)

    def clip_grad_norm_(self, max_norm: float, norm_type: float = 2.0) -> float:
        """Scales every stage's gradients so that their global norm is at most max_norm, as
        torch.nn.utils.clip_grad_norm_ does on an unpipelined model; returns the norm before
        clipping (inf or nan are returned, and the gradients left as they are, so a loop can
        skip the step). A collective: every rank calls it."""
        return self.gradients.clip_(max_norm, norm_type)

    def optimizer_step(self) -> bool:
        """Steps the optimizer on the accumulated gradients (which stay until zero_grad()) and
        returns True; or, when a loss or gradient is not finite on some rank, every rank skips
        it and returns False (GradientSync.finite: NonfiniteError after too many in a row).
        A skipped step counts in `steps` and in `skipped_steps`."""
        self.check_open()
        self.gradients.complete()
        self._steps += 1
        if not self.gradients.finite(self._steps):
            return False
        scope = self.failures.named() if self.stage.sharded else contextlib.nullcontext()
        with scope:
            self.stage.step_optimizer()
        return True

    def evaluate(self, batches: Iterable[Any]) -> EvalResult:
        """Forward-only loss over `batches` (each a list of token sequences): the mean loss per
        target token over all of them, and its perplexity. No activations are kept for a
        backward and no gradient changes. Every rank passes the same batches."""
        loss_sum, tokens, count = 0.0, 0, 0
        for batch in batches:
            self.failures.next_call()
            plan, share, _ = self._prepare(batch, None)
            with gc_pause.paused(self.runtime.pause_gc), self.failures.named():
                stats = self.stage.evaluate(plan, share)
            loss_sum += stats["loss"] * share.loss_tokens
            tokens += share.loss_tokens
            count += 1
        if count == 0:
            raise BatchError("evaluate: no batches were given")
        return EvalResult(loss=loss_sum / tokens, tokens=tokens, batches=count)

    # --- planning ---

    def check_batch(self, batch: Any) -> list[torch.Tensor]:
        """The batch as 1-D int64 CPU tensors; BatchError when it cannot be trained on."""
        return step_input.check_batch(batch, self.config.vocab)

    def plan(self, batch: Any) -> Any:
        """The plan this trainer would run for `batch` (an _C.plan.Plan): with data replicas,
        the plan of this rank's replica's share of it."""
        return self.planner.plan([t.numel() for t in self.check_batch(batch)])

    def prefetch(self, batch: Any) -> None:
        """Starts planning `batch` on a background thread (planning/ahead.py): the next step
        on a batch of the same lengths takes that plan, so planning overlaps whatever runs
        meanwhile (the current step). A batch that cannot be trained on is left for the step to
        report (on every rank alike)."""
        self.check_open()
        try:
            lengths = [t.numel() for t in self.check_batch(batch)]
        except Error:
            return
        self.planner.prefetch(lengths)

    def prefetching(self, batches: Iterable[Any]) -> Prefetching:
        """`batches`, each handed to prefetch() one batch before the loop gets it:

            for batch in trainer.prefetching(loader):
                trainer.step(batch)

        Its state_dict() is the loader's as of the batch the loop holds (not the one ahead),
        so save that in a checkpoint."""
        return Prefetching(self.prefetch, batches)

    # --- state ---

    @property
    def steps(self) -> int:
        """Optimizer steps taken, skipped ones included (restored by load_checkpoint)."""
        return self._steps

    @property
    def skipped_steps(self) -> int:
        """Optimizer steps skipped for a loss or gradient that was not finite."""
        return self.gradients.skipped_steps

    def state_dict(self) -> dict[str, Any]:
        """The trainer's own training progress. A checkpoint (state/checkpoint.py) holds it
        beside the stage's weights and the optimizer's state, which are theirs."""
        g = self.gradients
        return {"step": self._steps, "skipped": g.skipped_steps, "in_a_row": g.skipped_in_a_row}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self._steps = int(state["step"])
        self.gradients.skipped_steps = int(state.get("skipped", 0))
        self.gradients.skipped_in_a_row = int(state.get("in_a_row", 0))

    def save_checkpoint(self, path: str | os.PathLike, extra: dict | None = None) -> Any:
        """Saves the whole training state (infinipipe.state.checkpoint.save): every rank's stage
        weights and optimizer state, the step, RNG states, and `extra` (for example the data
        loader's state_dict()). A collective: every rank calls it."""
        return checkpoint.save(self, path, extra)

    def load_checkpoint(self, path: str | os.PathLike) -> Any:
        """Restores what save_checkpoint saved; returns its `extra`. A damaged checkpoint is an
        error naming the file, and leaves the trainer as it was. A collective."""
        return checkpoint.load(self, path)

    def resume_checkpoint(self, path: str | os.PathLike) -> tuple[Any, Any] | None:
        """Loads the newest checkpoint under `path` that is whole, falling back past damaged
        ones with a warning (infinipipe.state.checkpoint.resume); returns (its directory, its
        `extra`), or None when there is none. A collective."""
        return checkpoint.resume(self, path)

    def close(self) -> None:
        """Stops planning ahead (its thread joined), shuts down the sequence and gradient groups
        the trainer made and drops every reference the trainer holds to a process group (the
        executor's, ZeRO's, `group`; kept after a lost peer) and to its failure board, so that
        their threads end here, not at the interpreter's finalization, where a thread still
        running can abort the process (docs/runtime.md, "Exits"). The default group stays the
        caller's (one the trainer made is destroyed at exit). The trainer cannot run or save
        after this; its module and optimizer state stay readable. Also `with Trainer(...) as
        trainer:`, and done at exit for a trainer left open."""
        if self._closed:
            return
        self._closed = True
        self.planner.close()
        self.failures.close()
        if not was_peer_lost():
            # The executor's references go first: dropped with the GIL held, they must not be
            # a group's last, whose destructor joins Gloo's threads (torch's Python references,
            # the registry's and ours, destroy a group with the GIL released). After a lost
            # peer they stay, as at exit: the destructor would wait for work stuck on that peer.
            self.stage.release()
            self.gradients.release()
            self.group = None
        self.layout.destroy_groups()

    def check_open(self) -> None:
        """Raises the Error a closed trainer answers every call that would run on its ranks."""
        if self._closed:
            raise Error("this trainer was closed (Trainer.close); create a new Trainer to go on")

    def __enter__(self) -> Trainer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def describe_rank(self, rank: int) -> str:
        """A rank's name in errors: 'rank 5 (stage 1, replica 1)'."""
        layout = getattr(self, "layout", None)
        if layout is None:  # joining the group: the layout of torchrun's world, when it factors
            try:
                world = int(os.environ["WORLD_SIZE"])
                return Layout(self._parallel, rank, world).describe(rank)
            except (KeyError, ValueError, Error):
                return f"rank {rank}"
        return layout.describe(rank)

    # --- the parts' state most callers read ---

    @property
    def module(self) -> Any:
        """This rank's stage module."""
        return self.stage.module

    @property
    def parameters(self) -> list[torch.Tensor]:
        return self.stage.parameters

    @property
    def optimizer(self) -> torch.optim.Optimizer:
        return self.stage.optimizer

    @property
    def cost(self) -> Any:
        """The cost model the planner uses, for one rank of the layout."""
        return self.planner.cost

    def __getattr__(self, name: str) -> Any:
        return moved_attribute(self, name)  # 0.1.0's attributes, in the parts now

    # --- one step's preparation ---

    def _prepare(self, batch: Any, plan: Any) -> tuple[Any, Share, tuple[float, float]]:
        """The checked batch, this replica's share of it and its plan (planned ahead, planned
        here, or given), agreed by every rank; and (planning seconds, the part of them hidden
        by planning ahead)."""
        self.check_open()
        planning = (0.0, 0.0)
        error, share, fingerprint = None, None, None
        try:
            sequences = self.check_batch(batch)
            plan, share, planning = self.planner.prepare(sequences, plan)
            fingerprint = digest(*(t.numpy().tobytes() for t in sequences))
        except Error as e:
            error = e
        except ValueError as e:
            error = BatchError(str(e))
        with self.failures.peers_named():
            agree(
                self.stage.executor,
                error,
                self.config_fingerprint,
                fingerprint,
                None if plan is None or error else plan.hash(),
                replica_of=self.layout.replica_of,
            )
        return plan, share, planning


def _close_at_exit(trainer: weakref.ref[Trainer]) -> Callable[[], None]:
    """Closes the trainer at exit if it is still alive and open (Trainer.close)."""

    def close() -> None:
        alive = trainer()
        if alive is not None:
            alive.close()

    return close
