"""The C++ LibTorch LLaMA stage (include/infinipipe/models/llama.h) from Python.

It has the Python `llama.LlamaStage`'s numerics and parameter names, so state dicts move
between the two; a Trainer whose factory returns one runs it in C++ without the GIL:

    trainer = infinipipe.Trainer(cpp.stage_factory(config), optimizer_factory)

Its methods follow the executor's stage protocol: `embed(tokens, ctx)`, `layer(local_index,
hidden, ctx)`, `head(hidden, ctx)` with a C++ `_C.runtime.ChunkContext`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import torch

from .. import _C
from . import llama
from .stage_protocol import StageFactory

__all__ = ["stage", "build_stage", "stage_factory", "load_from"]


def stage(
    config: llama.LlamaConfig,
    first_layer: int,
    last_layer: int,
    has_embedding: bool,
    has_head: bool,
    *,
    seed: int | None = 0,
    device: torch.device | str = "cpu",
) -> _C.models.LlamaStage:
    """Layers [first_layer, last_layer) in C++; seed as in llama.LlamaStage (None: zeros)."""
    return _C.models.LlamaStage(
        vocab=config.vocab,
        hidden=config.hidden,
        layers=config.layers,
        heads=config.heads,
        kv_heads=config.kv_heads,
        ffn=config.ffn,
        first_layer=first_layer,
        last_layer=last_layer,
        has_embedding=has_embedding,
        has_head=has_head,
        rope_theta=config.rope_theta,
        rms_eps=config.rms_eps,
        dtype=config.dtype,
        seed=seed,
        device=torch.device(device),
        lean_layer=config.lean_layer,
    )


def build_stage(
    config: llama.LlamaConfig,
    layers_per_stage: int | Sequence[int],
    index: int,
    *,
    seed: int | None = 0,
    device: torch.device | str = "cpu",
    spread_head: bool = False,
) -> _C.models.LlamaStage:
    """Stage `index` of a split, as llama.build_stage but in C++ (spread_head: a replica of the
    final norm and the LM head on every stage)."""
    ranges = llama.layer_ranges(config, layers_per_stage)
    if not 0 <= index < len(ranges):
        raise IndexError(f"stage {index} out of range for {len(ranges)} stages")
    r = ranges[index]
    has_head = spread_head or index == len(ranges) - 1
    return stage(config, r.start, r.stop, index == 0, has_head, seed=seed, device=device)


def stage_factory(
    config: llama.LlamaConfig,
    *,
    seed: int | None = 0,
    device: torch.device | str = "cpu",
    spread_head: bool = False,
) -> StageFactory:
    """The Trainer's model built in C++: each rank's build_stage, and config for the planner."""

    def build(index: int, layers_per_stage: list[int]) -> _C.models.LlamaStage:
        return build_stage(
            config, layers_per_stage, index, seed=seed, device=device, spread_head=spread_head
        )

    return StageFactory(build, config)


def load_from(
    cpp_stage: _C.models.LlamaStage,
    weights: Mapping[str, torch.Tensor] | torch.nn.Module,
    strict: bool = True,
) -> _C.models.LlamaStage:
    """Copies a state dict (or a Python stage's parameters) into the C++ stage."""
    if isinstance(weights, torch.nn.Module):
        weights = weights.state_dict()
    cpp_stage.load_state_dict({k: v.detach() for k, v in weights.items()}, strict)
    return cpp_stage
