"""Measured activation memory of a stage during a step (MemoryMeter)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import torch


class _Saved:
    __slots__ = ("meter", "key", "tensor")

    def __init__(self, meter: MemoryMeter, key: int, tensor: torch.Tensor) -> None:
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
        # storage (by identity: a freed storage's address may be reused) -> [it, references]
        self.saved: dict[int, list[Any]] = {}
        self.peak_bytes = 0
        self.peak_saved_bytes = 0
        self.peak_held_bytes = 0

    def _pack(self, tensor: torch.Tensor) -> Any:
        storage = tensor.untyped_storage()
        if storage.data_ptr() in self.exclude or storage.nbytes() == 0:
            return tensor
        key = storage._cdata
        entry = self.saved.get(key)
        if entry is None:
            entry = self.saved[key] = [storage, 0]
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
            del self.saved[key]

    def sample(self, _action: str | None = None) -> None:
        # Each saved storage's bytes now, not when it was saved: the lean layer frees some from
        # its forward to its backward (models/llama/layers.py, Refill).
        saved_bytes, seen = 0, set()
        for storage, _ in self.saved.values():
            if storage.nbytes():
                saved_bytes += storage.nbytes()
                seen.add(storage.data_ptr())
        held = 0
        for t in self.executor.held_tensors():
            if t is None:  # a dK/dV accumulator not allocated yet
                continue
            storage = t.untyped_storage()
            key = storage.data_ptr()
            if key in seen:
                continue
            seen.add(key)
            held += storage.nbytes()
        total = saved_bytes + held
        if total > self.peak_bytes:
            self.peak_bytes, self.peak_saved_bytes, self.peak_held_bytes = (
                total,
                saved_bytes,
                held,
            )

    def hooks(self) -> torch.autograd.graph.saved_tensors_hooks:
        return torch.autograd.graph.saved_tensors_hooks(self._pack, self._unpack)

    def stats(self, plan: Any, cost: Any, stage: int) -> dict[str, float]:
        """The step's measured peaks beside the predicted one, for its stats."""
        predicted = MemoryMeter.predicted(plan, cost, stage)
        return dict(
            measured_activation_bytes=self.peak_bytes,
            measured_saved_bytes=self.peak_saved_bytes,
            measured_held_bytes=self.peak_held_bytes,
            predicted_activation_bytes=predicted,
            activation_ratio=self.peak_bytes / predicted if predicted > 0 else float("inf"),
        )
