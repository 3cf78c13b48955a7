"""Completing the step's gradients across ranks (tied weights, each stage's gradient group, the head
replicas), their global norm and clipping, and the check that they are finite. Each sum is pending
from a run's backward until it runs or zero_grad drops it: once per accumulation, so a norm and the
optimizer step after it see the same gradients.

A loss or gradient that is NaN or infinite on any rank makes every rank skip the optimizer step
(`finite`), so that no weight and no optimizer state is updated from it; after
RuntimeConfig.max_nonfinite_skips such steps in a row the trainer raises NonfiniteError naming
the step (docs/runtime.md, "Non-finite steps").
"""

from __future__ import annotations

import json
import logging
import math
from typing import Any

import torch

from ..distributed.failures import Failures
from ..distributed.gradient_group import sum_gradients
from ..distributed.layout import Layout
from ..errors import Error, NonfiniteError
from .config import RuntimeConfig
from .stage_runtime import StageRuntime

_log = logging.getLogger("infinipipe")


class GradientSync:
    """The gradients of one stage's parameters, made whole over the layout."""

    def __init__(
        self,
        stage: StageRuntime,
        layout: Layout,
        group: Any,
        failures: Failures,
        spread_head: bool,
        runtime: RuntimeConfig,
    ) -> None:
        self._stage = stage
        self._layout = layout
        self._group = group
        self._device = stage.device
        self._timeout_s = stage.timeout_s
        self._failures = failures
        self._spread_head = spread_head
        self._tied_pending = False
        self._reduce_pending = False
        self._head_pending = False
        self._max_skips = runtime.max_nonfinite_skips
        self._losses: list[float] = []  # of the runs accumulated since zero_grad
        self.skipped_steps = 0  # optimizer steps skipped for non-finite values, in all
        self.skipped_in_a_row = 0

    def release(self) -> None:
        """Drops the reference to the trainer's group (StageRuntime.release says why)."""
        self._group = None

    def after_backward(self, loss: float) -> None:
        """A run added to the gradients (its loss `loss`): every sum is due before anything
        reads them."""
        self._losses.append(float(loss))
        self._tied_pending = bool(self._tied())
        self._reduce_pending = self._layout.gradient_group is not None
        # Every rank, every step, head work or not: the collectives stay the same everywhere.
        self._head_pending = self._spread_head and self._layout.world_size > 1

    def zero_grad(self) -> None:
        for p in self._stage.parameters:
            p.grad = None
        self._losses.clear()
        self._tied_pending = False
        self._reduce_pending = False
        self._head_pending = False

    def norm(self, norm_type: float = 2.0) -> float:
        """The norm of all stages' gradients together (a weight tied across stages counted
        once), the same on every rank. A collective: every rank calls it."""
        norm_type = float(norm_type)
        self.complete()
        # After the reduction every rank of a stage's gradient group holds its gradients: one of
        # them counts them.
        owned = self._owned_parameters() if self._layout.leads_gradients else []
        local = [p.grad.detach() for p in owned if p.grad is not None]
        executor = self._stage.executor
        if math.isinf(norm_type):
            mine = max((float(g.abs().max()) for g in local), default=0.0)
            with self._failures.peers_named():
                everyone = executor.all_gather_text(repr(mine))
            return max(float(v) for v in everyone)
        if norm_type <= 0:
            raise ValueError(f"grad_norm: norm_type must be positive, got {norm_type!r}")
        mine = sum(
            float(torch.linalg.vector_norm(g, norm_type, dtype=torch.float64)) ** norm_type
            for g in local
        )
        with self._failures.peers_named():
            total = executor.all_reduce_sum(mine, "all-reduce of the gradient norm")
        return total ** (1.0 / norm_type)

    def clip_(self, max_norm: float, norm_type: float = 2.0) -> float:
        """Scales every stage's gradients so that their global norm is at most max_norm, as
        torch.nn.utils.clip_grad_norm_ does on an unpipelined model; returns the norm before
        clipping (inf or nan are returned, and the gradients left as they are, so a loop can
        skip the step). A collective: every rank calls it."""
        if not (isinstance(max_norm, (int, float)) and math.isfinite(max_norm) and max_norm > 0):
            raise ValueError(
                f"clip_grad_norm_: max_norm must be finite and positive, got {max_norm!r}"
            )
        total = self.norm(norm_type)
        if math.isfinite(total):
            coefficient = min(1.0, max_norm / (total + 1e-6))
            if coefficient < 1.0:
                for p in self._stage.parameters:
                    if p.grad is not None:
                        p.grad.detach().mul_(coefficient)
        return total

    def complete(self) -> None:
        """The step's gradients complete on every rank: tied weights summed across their
        stages, then every stage's summed over its gradient group (distributed/gradient_group.py),
        then the head replicas' over every rank. Once per accumulation, so a norm and the
        optimizer see the same."""
        self._sum_tied_gradients()
        head = self._stage.head_parameters
        heads = {id(p) for p in head}
        if self._reduce_pending:
            self._reduce_pending = False
            # The head replicas are left to the all-reduce over every rank below, which covers
            # the replicas and sequence ranks of each stage as well as the stages.
            with self._failures.named():
                sum_gradients(
                    [p for p in self._stage.parameters if id(p) not in heads],
                    self._layout.gradient_group,
                    self._device,
                    self._timeout_s,
                )
        if self._head_pending:
            self._head_pending = False
            with self._failures.named():
                sum_gradients(
                    head,
                    self._group,
                    self._device,
                    self._timeout_s,
                    what="the all-reduce of the head replicas' gradients",
                )

    def finite(self, step: int) -> bool:
        """Whether every rank's loss and gradients are finite (one all-gather): False on every
        rank when any is not, with a warning naming the ranks; NonfiniteError once more than
        max_nonfinite_skips steps in a row were not. `step`: the step's number, for messages.
        Call after complete()."""
        grads = [p.grad.detach() for p in self._stage.parameters if p.grad is not None]
        # Inf-norms are NaN for a NaN and inf for an inf: one small tensor to look at. float64,
        # so that a float64 gradient's large finite values stay finite.
        bad_grad = bool(grads) and not bool(
            torch.isfinite(
                torch.stack([n.double() for n in torch._foreach_norm(grads, math.inf)])
            ).all()
        )
        bad_loss = [x for x in self._losses if not math.isfinite(x)]
        mine = json.dumps([bad_grad, repr(bad_loss[0]) if bad_loss else None])
        with self._failures.peers_named():
            everyone = [json.loads(t) for t in self._stage.executor.all_gather_text(mine)]
        if not any(g or x for g, x in everyone):
            self.skipped_in_a_row = 0
            return True
        self.skipped_steps += 1
        self.skipped_in_a_row += 1
        losses = sorted({x for _, x in everyone if x})
        grad_ranks = [self._layout.describe(r) for r, (g, _) in enumerate(everyone) if g]
        what = "; ".join(
            ([f"loss {', '.join(losses)}"] if losses else [])
            + ([f"non-finite gradients on {', '.join(grad_ranks)}"] if grad_ranks else [])
        )
        if self.skipped_in_a_row > self._max_skips:
            first = step - self.skipped_in_a_row + 1
            steps = f"step {step}" if first == step else f"steps {first} to {step}"
            raise NonfiniteError(
                f"step {step}: the loss or the gradients were not finite in {steps} ({what}); "
                f"the optimizer stepped none of them, and max_nonfinite_skips "
                f"(RuntimeConfig) is {self._max_skips}. Lower the learning rate, look at the "
                "batches of those steps, or resume from an earlier checkpoint",
                step=step,
            )
        _log.warning(
            "step %d: %s; every rank skipped the optimizer step (%d in a row, %d in all; "
            "max_nonfinite_skips %d)",
            step,
            what,
            self.skipped_in_a_row,
            self.skipped_steps,
            self._max_skips,
        )
        return False

    def _tied(self) -> list[tuple[torch.Tensor, int]]:
        """(parameter, the stage holding its twin) of each weight tied across stages."""
        tied = getattr(self._stage.module, "tied_parameters", None)
        return list(tied()) if tied is not None else []

    def _owned_parameters(self) -> list[torch.Tensor]:
        """This stage's parameters, less the twins of tied weights that an earlier stage holds
        and the head's replica except on the last stage (so a global norm counts each weight
        once)."""
        stage, last = self._layout.stage, self._layout.parallel.pipeline - 1
        twins = {id(p) for p, peer in self._tied() if peer < stage}
        if stage != last:
            twins |= {id(p) for p in self._stage.head_parameters}
        return [p for p in self._stage.parameters if id(p) not in twins]

    def _sum_tied_gradients(self) -> None:
        """Once per accumulation (before the norm or the optimizer step), so that the twins of
        a tied weight hold the same summed gradient."""
        if not self._tied_pending:
            return
        self._tied_pending = False
        for index, (param, peer) in enumerate(self._tied()):
            if param.grad is None:
                raise Error(
                    f"stage {self._layout.stage}: tied weight {index} got no gradient this step"
                )
            with self._failures.peers_named():
                self._stage.executor.add_peer_tensor(param.grad, peer, index)
