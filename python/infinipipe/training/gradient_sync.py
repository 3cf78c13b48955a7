"""Completing the step's gradients across ranks (tied weights, each stage's gradient group, the head
replicas), their global norm and clipping. Each sum is pending from a run's backward until it runs
or zero_grad drops it: once per accumulation, so a norm and the optimizer step after it see the
same gradients."""

from __future__ import annotations

import math
from typing import Any

import torch

from ..distributed.failures import Failures
from ..distributed.gradient_group import sum_gradients
from ..distributed.layout import Layout
from ..errors import Error
from .stage_runtime import StageRuntime


class GradientSync:
    """The gradients of one stage's parameters, made whole over the layout."""

    def __init__(
        self,
        stage: StageRuntime,
        layout: Layout,
        group: Any,
        failures: Failures,
        spread_head: bool,
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

    def release(self) -> None:
        """Drops the reference to the trainer's group (StageRuntime.release says why)."""
        self._group = None

    def after_backward(self) -> None:
        """A run added to the gradients: every sum is due before anything reads them."""
        self._tied_pending = bool(self._tied())
        self._reduce_pending = self._layout.gradient_group is not None
        # Every rank, every step, head work or not: the collectives stay the same everywhere.
        self._head_pending = self._spread_head and self._layout.world_size > 1

    def zero_grad(self) -> None:
        for p in self._stage.parameters:
            p.grad = None
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
