"""The collectives of a stage's gradient group (layout.py): every rank holding one stage, its
sequence-parallel ranks in every data replica.

Each rank's gradients cover only its own tokens (its replica's share of the batch, its sequence
rank's rows), and the executor averaged the loss over the whole batch's target tokens, so the
sum over the group is the gradient of the batch's mean loss: one all-reduce per accumulation,
before anything reads the gradients (a norm, the optimizer). With ZeRO-1 each rank keeps the
optimizer state of a shard of the parameters (torch's ZeroRedundancyOptimizer, which steps its
shard and broadcasts the updated parameters over the group).

A Gloo worker thread releases a finished work's tensors after the waiter has moved on, and a
Python-owned tensor released that way once the interpreter finalizes aborts the process
("terminate called without an active exception", seen in 2 of 12 runs of the four-rank ZeRO
checkpoint tests): so every Python collective here is followed by `settle`, a one-element
all-reduce on a tensor only C++ holds. It does not cover a group's other worker thread (Gloo
runs two), which can still hold the collective before; what does is Trainer.close, at the
latest at exit, ending the group's threads while the interpreter is whole (docs/runtime.md,
"Exits").

Every collective here has the trainer's deadline, and a failure becomes a CollectiveFailure
that the trainer turns into the error naming the lost rank (failure_board.py), as it does for
the executor's own waits.
"""

from __future__ import annotations

import datetime
import inspect
import sys
from collections.abc import Callable, Iterable
from typing import Any

import torch
import torch.distributed as dist

from .. import _C


class CollectiveFailure(Exception):
    """A collective of the gradient group that failed or timed out. Shaped like
    _C.runtime.PeerError (rank -1: any rank of the group may be the one missing) for the
    failure board."""

    def __init__(self, what: str, error: BaseException, timed_out: bool) -> None:
        super().__init__(f"{what} did not finish: a rank of the stage's gradient group is lost")
        self.rank = -1
        self.timed_out = timed_out
        self.backend_detail = f"{type(error).__name__}: {error}"


def guarded(what: str, call: Callable[[], Any]) -> Any:
    """call(), its backend errors (raw Gloo/NCCL text, timeouts) as a CollectiveFailure."""
    try:
        return call()
    except (RuntimeError, dist.DistError) as e:
        timed_out = "timed out" in str(e).lower() or "timeout" in str(e).lower()
        raise CollectiveFailure(what, e, timed_out) from e


def settle(group: Any, device: torch.device, timeout_s: float) -> None:
    """Leaves `group`'s last work without a Python-owned tensor (the module's docstring)."""
    _C.runtime.settle_group(group, str(device), timeout_s)


def sum_gradients(
    parameters: list[torch.Tensor],
    group: Any,
    device: torch.device,
    timeout_s: float,
    what: str = "the all-reduce of the stage's gradients",
) -> None:
    """Sums every parameter's gradient over `group`, in one flat buffer (a parameter without a
    gradient counts as zeros, so every rank sends the same shapes); `what` names it in errors."""
    if not parameters:
        return
    grads = [
        p.grad if p.grad is not None else torch.zeros_like(p, memory_format=torch.contiguous_format)
        for p in parameters
    ]
    flat = torch.cat([g.reshape(-1) for g in grads])

    def reduce() -> None:
        work = dist.all_reduce(flat, group=group, async_op=True)
        work.wait(datetime.timedelta(seconds=timeout_s))

    guarded(what, reduce)
    settle(group, device, timeout_s)
    offset = 0
    for p, g in zip(parameters, grads):
        n = g.numel()
        summed = flat[offset : offset + n].view_as(g)
        offset += n
        if p.grad is None:
            p.grad = summed.clone()
        else:
            p.grad.copy_(summed)


def sharded_optimizer(
    factory: Callable[[Iterable[torch.Tensor]], torch.optim.Optimizer],
    params: list[torch.Tensor],
    group: Any,
) -> torch.optim.Optimizer:
    """ZeRO-1 over `group` with the optimizer `factory` makes: its class and its defaults (the
    factory is called once on a probe parameter to learn them; parameter groups it builds are
    not kept, since each rank steps only its shard)."""
    # Imported here: torch.distributed.optim takes about a second to import, which a trainer
    # without replicas or sequence ranks should not pay in its setup.
    from torch.distributed.optim import ZeroRedundancyOptimizer

    probe = factory([torch.zeros(1, requires_grad=True)])
    cls = type(probe)
    # Only the defaults its constructor takes (AdamW's include decoupled_weight_decay, which
    # AdamW's constructor fixes rather than accepts).
    accepted = inspect.signature(cls.__init__).parameters
    takes_any = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in accepted.values())
    defaults = {k: v for k, v in probe.defaults.items() if takes_any or k in accepted}
    return ZeroRedundancyOptimizer(params, optimizer_class=cls, process_group=group, **defaults)


def local_optimizer(optimizer: torch.optim.Optimizer) -> torch.optim.Optimizer:
    """The optimizer whose state this rank holds: with ZeRO its shard's, else the optimizer."""
    zero = sys.modules.get("torch.distributed.optim.zero_redundancy_optimizer")
    if zero is not None and isinstance(optimizer, zero.ZeroRedundancyOptimizer):
        return optimizer.optim
    return optimizer
