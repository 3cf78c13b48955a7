"""What the peers of the measured comparison run (lib/torch_pipelining.py, lib/torch_packed.py,
lib/peers.py): the batch check, and a stage's decoder layers, the first ones checkpointed with
their recompute in sight of the memory meter."""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from typing import Any

import torch
from torch.utils.checkpoint import checkpoint

from infinipipe.models import llama


def check_batch(batch: Any, vocab: int) -> list[torch.Tensor]:
    """The batch as 1-D int64 tensors; ValueError naming the problem otherwise."""
    if isinstance(batch, torch.Tensor) or not isinstance(batch, Sequence):
        raise ValueError(f"a batch must be a list of 1-D token tensors, got {type(batch).__name__}")
    if len(batch) == 0:
        raise ValueError("the batch is empty: give at least one token sequence")
    out = []
    for i, seq in enumerate(batch):
        t = torch.as_tensor(seq)
        if t.dim() != 1 or t.numel() == 0 or t.is_floating_point() or t.dtype == torch.bool:
            raise ValueError(
                f"sequence {i} must be a non-empty 1-D integer tensor, got "
                f"{t.dtype} of shape {tuple(t.shape)}"
            )
        if int(t.min()) < 0 or int(t.max()) >= vocab:
            raise ValueError(f"sequence {i} has token ids outside the vocabulary [0, {vocab})")
        out.append(t.to(torch.long))
    if llama.count_targets(t.numel() for t in out) == 0:
        raise ValueError("the batch has no target tokens (every sequence has one token)")
    return out


class _MeteredRecompute:
    """Recompute context for torch.utils.checkpoint. Checkpoint recomputes a layer under its own
    saved-tensor hooks, which hide the recomputed activations from an outer MemoryMeter (whereas
    InfiniPipe's executor recomputes where its meter sees them). This puts the meter in front of
    checkpoint's hooks during recomputation, so the peak includes the recomputed layer."""

    def __init__(self, meter: Any) -> None:
        self.meter = meter
        self.hooks = None

    def __enter__(self) -> None:
        inner = torch._C._autograd._top_saved_tensors_default_hooks(False)
        meter = self.meter
        if inner is None:  # not inside checkpoint's recomputation: nothing to chain
            self.hooks = meter.hooks()
        else:
            inner_pack, inner_unpack = inner
            self.hooks = torch.autograd.graph.saved_tensors_hooks(
                lambda x: meter._pack(inner_pack(x)), lambda h: inner_unpack(meter._unpack(h))
            )
        self.hooks.__enter__()

    def __exit__(self, *exc: Any) -> None:
        self.hooks.__exit__(*exc)


class _NothingHeld:
    """MemoryMeter's executor. Only what autograd saves is counted (the comparison's measure):
    not the schedule's receive buffers, nor the stage outputs it keeps until their backward."""

    @staticmethod
    def held_tensors() -> list:
        return []


def memory_meter(parameters: Sequence[torch.Tensor]) -> Any:
    try:
        from infinipipe.training.memory_meter import MemoryMeter
    except ImportError as e:
        raise RuntimeError(
            "measure_memory reuses infinipipe.MemoryMeter, which needs the "
            f"compiled module infinipipe._C: {e}"
        ) from None
    return MemoryMeter(_NothingHeld(), parameters)


class Layers:
    """Runs a LlamaStage's decoder layers, the first `checkpoint_layers` of them checkpointed."""

    def __init__(self, stage: llama.LlamaStage, checkpoint_layers: int) -> None:
        if checkpoint_layers < 0:
            raise ValueError(f"checkpoint_layers must be >= 0, got {checkpoint_layers}")
        self.stage = stage
        self.checkpointed = set(list(stage.layer_indices)[:checkpoint_layers])
        self.meter = None  # set while a step measures memory

    def __call__(self, hidden: torch.Tensor, ctx: llama.ChunkContext) -> torch.Tensor:
        for i in self.stage.layer_indices:
            if i in self.checkpointed:
                meter, kwargs = self.meter, {}
                if meter is not None:
                    kwargs["context_fn"] = lambda: (
                        contextlib.nullcontext(),
                        _MeteredRecompute(meter),
                    )
                hidden = checkpoint(self.stage.layer, i, hidden, ctx, use_reentrant=False, **kwargs)
            else:
                hidden = self.stage.layer(i, hidden, ctx)
        return hidden
