"""The gradient half of Trainer (trainer.py): completing the step's gradients across ranks (tied
weights, each stage's gradient group, the head replicas), their global norm and clipping. Each
sum is pending from forward_backward until it runs or zero_grad drops it: once per accumulation,
so a norm and the optimizer step after it see the same gradients."""

from __future__ import annotations

import math

import torch

from . import _C
from .errors import Error
from .stage_group import sum_gradients


class TrainerGradients:
    """Trainer's gradient methods. They use the trainer's parameters, head_parameters, module,
    layout, executor, group, device, timeout_s, stage_index and num_stages, its pending flags
    (_tied_pending, _reduce_pending, _head_pending) and its _failures_named and _lost_peer."""

    def zero_grad(self) -> None:
        for p in self.parameters:
            p.grad = None
        self._tied_pending = False
        self._reduce_pending = False
        self._head_pending = False

    def grad_norm(self, norm_type: float = 2.0) -> float:
        """The norm of all stages' gradients together (a weight tied across stages counted
        once), the same on every rank. A collective: every rank calls it."""
        norm_type = float(norm_type)
        self._gather_gradients()
        # After the reduction every rank of a stage's gradient group holds its gradients: one of
        # them counts them.
        owned = self._owned_parameters() if self.layout.leads_gradients else []
        local = [p.grad.detach() for p in owned if p.grad is not None]
        if math.isinf(norm_type):
            mine = max((float(g.abs().max()) for g in local), default=0.0)
            try:
                everyone = self.executor.all_gather_text(repr(mine))
            except _C.runtime.PeerError as e:
                raise self._lost_peer(e) from None
            return max(float(v) for v in everyone)
        if norm_type <= 0:
            raise ValueError(f"grad_norm: norm_type must be positive, got {norm_type!r}")
        mine = sum(
            float(torch.linalg.vector_norm(g, norm_type, dtype=torch.float64)) ** norm_type
            for g in local
        )
        total = self._all_reduce_sum(mine, "all-reduce of the gradient norm")
        return total ** (1.0 / norm_type)

    def clip_grad_norm_(self, max_norm: float, norm_type: float = 2.0) -> float:
        """Scales every stage's gradients so that their global norm is at most max_norm, as
        torch.nn.utils.clip_grad_norm_ does on an unpipelined model; returns the norm before
        clipping (inf or nan are returned, and the gradients left as they are, so a loop can
        skip the step). A collective: every rank calls it."""
        if not (isinstance(max_norm, (int, float)) and math.isfinite(max_norm) and max_norm > 0):
            raise ValueError(
                f"clip_grad_norm_: max_norm must be finite and positive, got {max_norm!r}"
            )
        total = self.grad_norm(norm_type)
        if math.isfinite(total):
            coefficient = min(1.0, max_norm / (total + 1e-6))
            if coefficient < 1.0:
                for p in self.parameters:
                    if p.grad is not None:
                        p.grad.detach().mul_(coefficient)
        return total

    def _all_reduce_sum(self, value: float, what: str) -> float:
        try:
            return self.executor.all_reduce_sum(value, what)
        except _C.runtime.PeerError as e:
            raise self._lost_peer(e) from None

    def _tied(self) -> list[tuple[torch.Tensor, int]]:
        """(parameter, the stage holding its twin) of each weight tied across stages."""
        tied = getattr(self.module, "tied_parameters", None)
        return list(tied()) if tied is not None else []

    def _owned_parameters(self) -> list[torch.Tensor]:
        """This stage's parameters, less the twins of tied weights that an earlier stage holds
        and the head's replica except on the last stage (so a global norm counts each weight
        once)."""
        twins = {id(p) for p, peer in self._tied() if peer < self.stage_index}
        if self.stage_index != self.num_stages - 1:
            twins |= {id(p) for p in self.head_parameters}
        return [p for p in self.parameters if id(p) not in twins]

    def _gather_gradients(self) -> None:
        """The step's gradients complete on every rank: tied weights summed across their
        stages, then every stage's summed over its gradient group (stage_group.py), then the
        head replicas' over every rank. Once per accumulation, so a norm and the optimizer see
        the same."""
        self._sum_tied_gradients()
        heads = {id(p) for p in self.head_parameters}
        if self._reduce_pending:
            self._reduce_pending = False
            # The head replicas are left to the all-reduce over every rank below, which covers
            # the replicas and sequence ranks of each stage as well as the stages.
            with self._failures_named():
                sum_gradients(
                    [p for p in self.parameters if id(p) not in heads],
                    self.layout.gradient_group,
                    self.device,
                    self.timeout_s,
                )
        if self._head_pending:
            self._head_pending = False
            with self._failures_named():
                sum_gradients(
                    self.head_parameters,
                    self.group,
                    self.device,
                    self.timeout_s,
                    what="the all-reduce of the head replicas' gradients",
                )

    def _sum_tied_gradients(self) -> None:
        """Once per accumulation (before the norm or the optimizer step), so that the twins of
        a tied weight hold the same summed gradient."""
        if not self._tied_pending:
            return
        self._tied_pending = False
        for index, (param, peer) in enumerate(self._tied()):
            if param.grad is None:
                raise Error(
                    f"stage {self.stage_index}: tied weight {index} got no gradient this step"
                )
            try:
                self.executor.add_peer_tensor(param.grad, peer, index)
            except _C.runtime.PeerError as e:
                raise self._lost_peer(e) from None
