"""What the executor runs: a stage module (C++, or Python through its protocol), and how each rank
builds its own (StageFactory)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from .. import _C
from ..errors import Error
from .llama import ChunkContext, LlamaConfig

# Parameter names of the final norm and the LM head in the built-in stages (Python and C++).
HEAD_PREFIXES = ("norm.", "lm_head.")


@dataclass(frozen=True)
class StageFactory:
    """A model the Trainer builds stage by stage: build(stage, layers_per_stage) returns this
    rank's stage (a LlamaStage, a C++ stage module such as models.cpp.build_stage's, a
    transformers stage from models.hf, or any object implementing the executor's stage
    protocol); config is the model's shape, from which the planner's cost model is built."""

    build: Callable[[int, list[int]], Any]
    config: LlamaConfig

    def __call__(self, stage: int, layers_per_stage: list[int]) -> Any:
        return self.build(stage, list(layers_per_stage))


class LlamaStageAdapter:
    """The executor's stage protocol over a llama.LlamaStage (or anything with its methods:
    first_layer, last_layer, has_embedding, has_head, embed(tokens), layer(global_index, hidden,
    ctx), head(hidden), parameters()). Local layer i is the stage's layer first_layer + i; the
    chunk's context is the executor's ChunkContext, whose attention the stage calls."""

    def __init__(self, stage: torch.nn.Module) -> None:
        self.stage = stage
        self.first_layer = int(stage.first_layer)
        self.num_layers = int(stage.last_layer) - self.first_layer
        self.has_embedding = bool(stage.has_embedding)
        self.has_head = bool(stage.has_head)

    def embed(self, tokens: torch.Tensor, ctx: ChunkContext) -> torch.Tensor:
        return self.stage.embed(tokens)

    def layer(self, i: int, hidden: torch.Tensor, ctx: ChunkContext) -> torch.Tensor:
        return self.stage.layer(self.first_layer + i, hidden, ctx)

    def head(self, hidden: torch.Tensor, ctx: ChunkContext) -> torch.Tensor:
        return self.stage.head(hidden)

    def parameters(self) -> list[torch.Tensor]:
        return list(self.stage.parameters())


def protocol_module(module: Any) -> Any:
    if isinstance(module, _C.runtime.StageModule):
        return module  # a C++ stage module (e.g. _C.models.LlamaStage): the executor runs it as is
    if all(hasattr(module, a) for a in ("first_layer", "last_layer", "layer", "embed", "head")):
        return LlamaStageAdapter(module)
    return module  # assumed to implement the protocol itself (num_layers, layer(local, ...), ...)


def head_parameters(module: Any) -> list[torch.Tensor]:
    """The module's final norm and LM head parameters (a spread head's replica): its own
    head_parameters(), else the named parameters under HEAD_PREFIXES. Error when it has none."""
    own = getattr(module, "head_parameters", None)
    if callable(own):
        found = list(own())
    elif hasattr(module, "named_parameters"):
        found = [p for name, p in module.named_parameters() if name.startswith(HEAD_PREFIXES)]
    else:
        found = []
    if not found:
        raise Error(
            f"{type(module).__name__} names no head parameters: a stage module with a spread "
            "head needs head_parameters() (or parameters named norm.* and lm_head.*)"
        )
    return found
