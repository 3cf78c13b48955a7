"""A pipeline stage of the decoder (LlamaStage) and how the layers split over stages."""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import nn

from .attention import AttentionFn
from .config import LlamaConfig
from .context import ChunkContext
from .layers import DecoderLayer, RMSNorm, _compute_dtype, rotary_cos_sin, rotary_inv_freq
from .weights import init_weights


class LlamaStage(nn.Module):
    """Layers [first_layer, last_layer) of the decoder (last_layer is exclusive), plus the
    embedding when has_embedding and the final norm and LM head when has_head.

    forward(x, ctx): x is token ids [T] (int64) on a stage with the embedding, else hidden
    states [T, hidden]; returns logits [T, vocab] on a stage with the head, else hidden states.

    Weights are initialised from `seed` parameter by parameter (keyed by name), so any split
    built with the same seed holds exactly the full model's weights; seed=None leaves
    PyTorch's default initialisation (to be overwritten by load_state_dict).
    """

    def __init__(
        self,
        config: LlamaConfig,
        first_layer: int,
        last_layer: int,
        has_embedding: bool,
        has_head: bool,
        *,
        seed: int | None = 0,
        device: torch.device | str | None = None,
    ) -> None:
        super().__init__()
        if not (0 <= first_layer < last_layer <= config.layers):
            raise ValueError(
                f"LlamaStage: layer range [{first_layer}, {last_layer}) must be non-empty and "
                f"within [0, {config.layers}) (last_layer is exclusive)"
            )
        self.config = config
        self.first_layer, self.last_layer = first_layer, last_layer
        self.has_embedding, self.has_head = bool(has_embedding), bool(has_head)
        self.embed_tokens = (
            nn.Embedding(config.vocab, config.hidden, dtype=config.dtype, device=device)
            if has_embedding
            else None
        )
        self.layers = nn.ModuleDict(
            {str(i): DecoderLayer(config, device) for i in range(first_layer, last_layer)}
        )
        if has_head:
            self.norm = RMSNorm(
                config.hidden, config.rms_eps, config.dtype, device, config.lean_layer
            )
            self.lm_head = nn.Linear(
                config.hidden, config.vocab, bias=False, dtype=config.dtype, device=device
            )
        else:
            self.norm = None
            self.lm_head = None
        # None: the chunk context's attention (the executor's chunk attention); else an
        # attention core (attention.py) for every chunk.
        self.attention_fn: AttentionFn | None = None
        self._inv_freq: dict = {}
        if seed is not None:
            init_weights(self, seed)

    @property
    def layer_indices(self) -> range:
        return range(self.first_layer, self.last_layer)

    def extra_repr(self) -> str:
        return (
            f"layers=[{self.first_layer}, {self.last_layer}), "
            f"has_embedding={self.has_embedding}, has_head={self.has_head}"
        )

    def _rotary(
        self, ctx: ChunkContext, dtype: torch.dtype, device: torch.device
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """cos, sin of the chunk's positions, made once per chunk and kept on its context."""
        cache = getattr(ctx, "rotary_cache", None)
        if cache is None:
            cache = ctx.rotary_cache = {}
        key = (self.config.head_dim, self.config.rope_theta, dtype, device)
        if key not in cache:
            freq_key = (_compute_dtype(dtype), device)
            if freq_key not in self._inv_freq:
                self._inv_freq[freq_key] = rotary_inv_freq(
                    self.config.head_dim, self.config.rope_theta, dtype, device
                )
            cache[key] = rotary_cos_sin(ctx.positions.to(device), self._inv_freq[freq_key], dtype)
        return cache[key]

    def _chunk_attention(
        self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, ctx: ChunkContext, layer_index: int
    ) -> torch.Tensor:
        return ctx.attention(layer_index - self.first_layer, q, k, v)

    def embed(self, tokens: torch.Tensor) -> torch.Tensor:
        if self.embed_tokens is None:
            raise RuntimeError(f"{self.extra_repr()}: this stage has no embedding")
        if tokens.dim() != 1 or tokens.dtype not in (torch.int64, torch.int32):
            raise ValueError(
                f"embed: expected a 1-D integer token tensor, got {tokens.dtype} "
                f"{tuple(tokens.shape)}"
            )
        if tokens.numel() > 0:
            lo, hi = int(tokens.min()), int(tokens.max())
            if lo < 0 or hi >= self.config.vocab:
                bad = lo if lo < 0 else hi
                raise ValueError(
                    f"token id {bad} is outside the vocabulary [0, {self.config.vocab})"
                )
        return self.embed_tokens(tokens)

    def layer(self, i: int, hidden: torch.Tensor, ctx: ChunkContext) -> torch.Tensor:
        """Run global layer i (which must be on this stage) on hidden [T, hidden]."""
        if not (self.first_layer <= i < self.last_layer):
            raise IndexError(f"layer {i} is not on this stage ({self.extra_repr()})")
        if hidden.dim() != 2 or hidden.shape[0] != ctx.num_tokens:
            raise ValueError(
                f"layer {i}: hidden has shape {tuple(hidden.shape)}, expected "
                f"[{ctx.num_tokens}, {self.config.hidden}] for {ctx!r}"
            )
        rotary = self._rotary(ctx, hidden.dtype, hidden.device)
        fn = self.attention_fn or self._chunk_attention
        return self.layers[str(i)](hidden, rotary, lambda q, k, v: fn(q, k, v, ctx, i))

    def head_parameters(self) -> list[nn.Parameter]:
        """The final norm's and the LM head's parameters (empty without the head): with a spread
        head (docs/design.md, "Spread head") every stage holds a replica of them."""
        if self.lm_head is None:
            return []
        return [*self.norm.parameters(), *self.lm_head.parameters()]

    def head(self, hidden: torch.Tensor) -> torch.Tensor:
        if self.lm_head is None:
            raise RuntimeError(f"{self.extra_repr()}: this stage has no LM head")
        return self.lm_head(self.norm(hidden))

    def forward(self, x: torch.Tensor, ctx: ChunkContext) -> torch.Tensor:
        if self.has_embedding:
            if x.shape[0] != ctx.num_tokens:
                raise ValueError(f"forward: {x.shape[0]} tokens but {ctx!r}")
            hidden = self.embed(x)
        else:
            hidden = x
        for i in self.layer_indices:
            hidden = self.layer(i, hidden, ctx)
        return self.head(hidden) if self.has_head else hidden


def even_layer_split(layers: int, stages: int) -> list[int]:
    """Same split as the planner's even_layer_split: remainder layers go to the middle stages."""
    if stages < 1:
        raise ValueError(f"pipeline stages must be at least 1, got {stages}")
    if layers < stages:
        raise ValueError(
            f"cannot split {layers} layers over {stages} pipeline stages: every "
            "stage needs a layer; use fewer stages"
        )
    split = [layers // stages] * stages
    extra = layers % stages
    first = (stages - extra + 1) // 2
    for i in range(extra):
        split[first + i] += 1
    return split


def layer_ranges(config: LlamaConfig, layers_per_stage: int | Sequence[int]) -> list[range]:
    """Global layer indices of each stage: layers_per_stage is a list of layer counts, or a stage
    count (split as the planner does)."""
    if isinstance(layers_per_stage, int):
        layers_per_stage = even_layer_split(config.layers, layers_per_stage)
    counts = [int(n) for n in layers_per_stage]
    if not counts or any(n <= 0 for n in counts) or sum(counts) != config.layers:
        raise ValueError(f"layers per stage {counts} must be positive and sum to {config.layers}")
    ranges, first = [], 0
    for n in counts:
        ranges.append(range(first, first + n))
        first += n
    return ranges


def split_stages(
    config: LlamaConfig,
    layers_per_stage: int | Sequence[int],
    *,
    seed: int | None = 0,
    device: torch.device | str | None = None,
) -> list[LlamaStage]:
    """All stages of a pipeline: layers_per_stage is a list of layer counts, or a stage count
    (split as the planner does). With the same seed they hold the full model's weights."""
    count = len(layer_ranges(config, layers_per_stage))
    return [
        build_stage(config, layers_per_stage, s, seed=seed, device=device) for s in range(count)
    ]


def build_stage(
    config: LlamaConfig,
    layers_per_stage: int | Sequence[int],
    stage: int,
    *,
    seed: int | None = 0,
    device: torch.device | str | None = None,
    spread_head: bool = False,
) -> LlamaStage:
    """Only stage `stage` of split_stages (what one pipeline rank builds). spread_head: every
    stage holds a replica of the final norm and the LM head (docs/design.md, "Spread head"); the
    seeded initialisation, keyed by name, gives every replica the same weights."""
    ranges = layer_ranges(config, layers_per_stage)
    if not 0 <= stage < len(ranges):
        raise IndexError(f"stage {stage} out of range for {len(ranges)} stages")
    r = ranges[stage]
    return LlamaStage(
        config,
        r.start,
        r.stop,
        has_embedding=(stage == 0),
        has_head=spread_head or stage == len(ranges) - 1,
        seed=seed,
        device=device,
    )


def build_full_model(
    config: LlamaConfig, *, seed: int | None = 0, device: torch.device | str | None = None
) -> LlamaStage:
    """One stage holding everything: the unpipelined reference."""
    return LlamaStage(config, 0, config.layers, True, True, seed=seed, device=device)
