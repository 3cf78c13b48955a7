"""A LLaMA-style decoder that InfiniPipe's executor runs in pipeline stages.

Everything works on *packed* token rows: a chunk is a 1-D tensor of T token ids (or a [T, hidden]
activation) holding several segments back to back, with no padding and no batch dimension. A
`ChunkContext` says which rows belong to which sequence and where in that sequence they start.

The numerics follow transformers' `LlamaForCausalLM` (RMSNorm and rotary frequencies computed in
at least float32, SwiGLU MLP, grouped-query attention, untied LM head, no biases), so that weights
convert by name (`to_hf_state_dict`, `from_hf_state_dict`) and logits agree.

Seams for the executor:

- `LlamaStage.embed(tokens)`, `LlamaStage.layer(i, hidden, ctx)`, `LlamaStage.head(hidden)`: a stage
  runs piece by piece, so the executor can checkpoint and recompute layer by layer.
- The attention core is a function `fn(q, k, v, ctx, layer_index) -> out` with q [T, heads, d],
  k/v [T, kv_heads, d] (after rotary) and out [T, heads, d]. The default,
  `varlen_causal_attention`, handles whole sequences only. A chunk attention that also attends to
  earlier slices' keys/values replaces it, either on the stage (`stage.attention_fn = fn`) or per
  chunk (`ChunkContext(..., attention=fn)`), and keeps whatever buffers it needs in `ctx.state`
  (an opaque dict the caller may share between the chunks of a step).
  `reference_chunk_attention` is such a function in plain autograd, for tests.
- Parameter names are the same on every stage as on the full model (layers keep their global
  index), and are transformers' names without the "model." prefix.
"""

from __future__ import annotations

import dataclasses
import zlib
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Mapping, NamedTuple, Sequence

import torch
import torch.nn.functional as F
from torch import nn

__all__ = [
    "IGNORE_INDEX",
    "LlamaConfig",
    "Segment",
    "ChunkContext",
    "AttentionFn",
    "RMSNorm",
    "rotary_inv_freq",
    "rotary_cos_sin",
    "rotate_half",
    "apply_rotary",
    "varlen_causal_attention",
    "reference_chunk_attention",
    "Attention",
    "MLP",
    "DecoderLayer",
    "LlamaStage",
    "even_layer_split",
    "split_stages",
    "build_stage",
    "build_full_model",
    "init_weights",
    "stage_state_dict",
    "to_hf_state_dict",
    "from_hf_state_dict",
    "pack_sequences",
    "count_targets",
    "chunk_targets",
    "chunk_loss",
    "reference_loss",
]

IGNORE_INDEX = -100  # target of a token that has none (the last token of a sequence)


# --------------------------------------------------------------------------------------------
# Configuration


@dataclass(frozen=True)
class LlamaConfig:
    """Shape of the decoder. Field names match the planner's ModelShape (cost/model_shape.h)."""

    vocab: int
    hidden: int
    layers: int
    heads: int
    kv_heads: int
    ffn: int  # SwiGLU intermediate size
    rope_theta: float = 10000.0
    rms_eps: float = 1e-6
    dtype: torch.dtype = torch.float32

    def __post_init__(self) -> None:
        for name in ("vocab", "hidden", "layers", "heads", "kv_heads", "ffn"):
            value = getattr(self, name)
            if not isinstance(value, int) or value <= 0:
                raise ValueError(f"LlamaConfig.{name} must be a positive integer, got {value!r}")
        if self.hidden % self.heads != 0:
            raise ValueError(f"LlamaConfig: heads ({self.heads}) must divide hidden ({self.hidden})")
        if self.heads % self.kv_heads != 0:
            raise ValueError(
                f"LlamaConfig: kv_heads ({self.kv_heads}) must divide heads ({self.heads})")
        if self.head_dim % 2 != 0:
            raise ValueError(f"LlamaConfig: head_dim ({self.head_dim}) must be even for rotary")
        if not isinstance(self.dtype, torch.dtype) or not self.dtype.is_floating_point:
            raise ValueError(f"LlamaConfig.dtype must be a floating torch.dtype, got {self.dtype!r}")

    @property
    def head_dim(self) -> int:
        return self.hidden // self.heads

    @classmethod
    def tiny(cls, **overrides: Any) -> "LlamaConfig":
        """The planner's built-in "tiny" shape: 8 layers, hidden 128, 4 heads (2 KV), ffn 352."""
        fields = dict(vocab=512, hidden=128, layers=8, heads=4, kv_heads=2, ffn=352)
        fields.update(overrides)
        return cls(**fields)

    def replace(self, **changes: Any) -> "LlamaConfig":
        return dataclasses.replace(self, **changes)

    def to_hf(self, attn_implementation: str = "sdpa", max_position_embeddings: int = 4096):
        """The equivalent transformers `LlamaConfig` (imports transformers lazily)."""
        from transformers import LlamaConfig as HFLlamaConfig

        config = HFLlamaConfig(
            vocab_size=self.vocab,
            hidden_size=self.hidden,
            intermediate_size=self.ffn,
            num_hidden_layers=self.layers,
            num_attention_heads=self.heads,
            num_key_value_heads=self.kv_heads,
            head_dim=self.head_dim,
            hidden_act="silu",
            rms_norm_eps=self.rms_eps,
            rope_parameters={"rope_type": "default", "rope_theta": float(self.rope_theta)},
            max_position_embeddings=max_position_embeddings,
            tie_word_embeddings=False,
            attention_bias=False,
            mlp_bias=False,
            attention_dropout=0.0,
            pad_token_id=None,
        )
        config._attn_implementation = attn_implementation
        return config

    @classmethod
    def from_hf(cls, hf_config: Any, dtype: torch.dtype = torch.float32) -> "LlamaConfig":
        """Our config from a transformers `LlamaConfig`; refuses features this decoder lacks."""
        rope = dict(getattr(hf_config, "rope_parameters", None) or {})
        if rope.get("rope_type", "default") != "default":
            raise ValueError(f"unsupported rope_type {rope.get('rope_type')!r}: only 'default'")
        for flag in ("attention_bias", "mlp_bias", "tie_word_embeddings"):
            if getattr(hf_config, flag, False):
                raise ValueError(f"unsupported transformers config: {flag}=True")
        if getattr(hf_config, "hidden_act", "silu") != "silu":
            raise ValueError(f"unsupported hidden_act {hf_config.hidden_act!r}: only 'silu'")
        head_dim = getattr(hf_config, "head_dim", None)
        if head_dim is not None and head_dim * hf_config.num_attention_heads != hf_config.hidden_size:
            raise ValueError("unsupported transformers config: head_dim * heads != hidden_size")
        return cls(
            vocab=hf_config.vocab_size,
            hidden=hf_config.hidden_size,
            layers=hf_config.num_hidden_layers,
            heads=hf_config.num_attention_heads,
            kv_heads=hf_config.num_key_value_heads or hf_config.num_attention_heads,
            ffn=hf_config.intermediate_size,
            rope_theta=float(rope.get("rope_theta", 10000.0)),
            rms_eps=float(hf_config.rms_norm_eps),
            dtype=dtype,
        )


# --------------------------------------------------------------------------------------------
# Chunk context


class Segment(NamedTuple):
    """Rows [row, row + length) of a chunk are tokens [start, start + length) of sequence seq_id."""

    row: int
    start: int
    length: int
    seq_id: int


class ChunkContext:
    """What a chunk's packed rows are, passed down through every layer call.

    segments: (row, start, length, seq_id) tuples tiling rows [0, T) in order.
    state: opaque storage for a substituted attention function (for example layer index ->
        K/V buffers); share one dict between the chunks of a step when the function needs it.
    attention: optional attention function overriding the stage's for this chunk.
    """

    def __init__(self, segments: Iterable[Sequence[int]], state: dict | None = None,
                 attention: "AttentionFn | None" = None) -> None:
        segs = tuple(Segment(*(int(x) for x in s)) for s in segments)
        if not segs:
            raise ValueError("ChunkContext: a chunk needs at least one segment")
        row = 0
        for s in segs:
            if s.row != row:
                raise ValueError(
                    f"ChunkContext: segments must tile the rows in order; segment {s} starts at "
                    f"row {s.row}, expected {row}")
            if s.length <= 0 or s.start < 0:
                raise ValueError(f"ChunkContext: bad segment {s} (length > 0, start >= 0)")
            row += s.length
        self.segments = segs
        self.num_tokens = row
        self.state = state if state is not None else {}
        self.attention = attention
        self._cache: dict = {}

    @classmethod
    def packed(cls, lengths: Iterable[int], seq_ids: Iterable[int] | None = None,
               **kwargs: Any) -> "ChunkContext":
        """Whole sequences of the given lengths packed back to back (seq ids 0.. by default)."""
        lengths = [int(n) for n in lengths]
        ids = list(range(len(lengths))) if seq_ids is None else [int(i) for i in seq_ids]
        if len(ids) != len(lengths):
            raise ValueError("ChunkContext.packed: lengths and seq_ids differ in length")
        return cls.from_slices([(i, 0, n) for i, n in zip(ids, lengths)], **kwargs)

    @classmethod
    def from_slices(cls, slices: Iterable[Sequence[int]], **kwargs: Any) -> "ChunkContext":
        """Slices given as (seq_id, start, length), laid out in rows in that order."""
        segments, row = [], 0
        for seq_id, start, length in slices:
            segments.append((row, start, length, seq_id))
            row += int(length)
        return cls(segments, **kwargs)

    @property
    def whole_sequences(self) -> bool:
        """True when every segment starts its sequence (no earlier context to attend to)."""
        return all(s.start == 0 for s in self.segments)

    def positions(self, device: torch.device | str | None = None) -> torch.Tensor:
        """Each row's position within its own sequence, int64 [T]."""
        key = ("positions", torch.device(device) if device is not None else None)
        if key not in self._cache:
            self._cache[key] = torch.cat([
                torch.arange(s.start, s.start + s.length, dtype=torch.long, device=device)
                for s in self.segments])
        return self._cache[key]

    def cu_seqlens(self, device: torch.device | str | None = None) -> torch.Tensor:
        """Row offsets of the segments, int32 [S + 1] (flash-attention style)."""
        offsets = [s.row for s in self.segments] + [self.num_tokens]
        return torch.tensor(offsets, dtype=torch.int32, device=device)

    def cached(self, key: Any, make: Callable[[], Any]) -> Any:
        """Memoise a per-chunk constant (rotary tables, masks) for the chunk's lifetime."""
        if key not in self._cache:
            self._cache[key] = make()
        return self._cache[key]

    def __repr__(self) -> str:
        return f"ChunkContext(tokens={self.num_tokens}, segments={list(self.segments)})"


# An attention core: (q [T, heads, d], k [T, kv_heads, d], v [T, kv_heads, d], ctx, layer_index)
# -> [T, heads, d]. q and k already carry rotary positions.
AttentionFn = Callable[[torch.Tensor, torch.Tensor, torch.Tensor, ChunkContext, int], torch.Tensor]


# --------------------------------------------------------------------------------------------
# Building blocks


def _compute_dtype(dtype: torch.dtype) -> torch.dtype:
    """At least float32, as transformers does for norms and rotary tables."""
    return torch.promote_types(dtype, torch.float32)


class RMSNorm(nn.Module):
    def __init__(self, size: int, eps: float = 1e-6, dtype: torch.dtype | None = None,
                 device: torch.device | str | None = None) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(size, dtype=dtype, device=device))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        input_dtype = x.dtype
        h = x.to(_compute_dtype(input_dtype))
        variance = h.pow(2).mean(-1, keepdim=True)
        h = h * torch.rsqrt(variance + self.eps)
        return self.weight * h.to(input_dtype)

    def extra_repr(self) -> str:
        return f"{tuple(self.weight.shape)}, eps={self.eps}"


def rotary_inv_freq(head_dim: int, theta: float, dtype: torch.dtype = torch.float32,
                    device: torch.device | str | None = None) -> torch.Tensor:
    """Inverse frequencies [head_dim / 2] in the compute dtype of `dtype` (>= float32)."""
    cdt = _compute_dtype(dtype)
    exponents = torch.arange(0, head_dim, 2, dtype=torch.int64, device=device).to(cdt) / head_dim
    return 1.0 / (theta ** exponents)


def rotary_cos_sin(positions: torch.Tensor, inv_freq: torch.Tensor,
                   dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    """cos, sin tables [T, head_dim] for explicit positions [T]; computed elementwise per row,
    so the table of positions start..end-1 is exactly rows start..end-1 of a full one."""
    freqs = positions[:, None].to(inv_freq.dtype) * inv_freq[None, :]
    emb = torch.cat((freqs, freqs), dim=-1)
    return emb.cos().to(dtype), emb.sin().to(dtype)


def rotate_half(x: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


def apply_rotary(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """x [T, heads, d]; cos/sin [T, d]."""
    cos = cos.unsqueeze(1)
    sin = sin.unsqueeze(1)
    return x * cos + rotate_half(x) * sin


def _sdpa(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *, causal: bool,
          mask: torch.Tensor | None = None) -> torch.Tensor:
    """q [L, H, d], k/v [S, KV, d] -> [L, H, d], scale d^-0.5, GQA by head groups.

    Called with a batch dimension of one: on CPU, torch 2.13 sends 3-D inputs to the math kernel,
    which materialises the L x L probabilities (4-5x slower at 4K tokens than the fused kernel
    that 4-D inputs get)."""
    out = F.scaled_dot_product_attention(
        q.transpose(0, 1)[None], k.transpose(0, 1)[None], v.transpose(0, 1)[None],
        attn_mask=None if mask is None else mask[None], is_causal=causal,
        scale=q.shape[-1] ** -0.5, enable_gqa=q.shape[1] != k.shape[1])
    return out[0].transpose(0, 1)


def varlen_causal_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                            ctx: ChunkContext, layer_index: int | None = None) -> torch.Tensor:
    """Causal attention within each segment (no padding, nothing across segment boundaries).

    Whole sequences only: a segment that starts after its sequence's first token needs the
    earlier slices' keys/values, which only a chunk attention provides.
    """
    for s in ctx.segments:
        if s.start != 0:
            raise ValueError(
                f"varlen_causal_attention handles whole sequences only, but segment {s} starts at "
                f"position {s.start} of sequence {s.seq_id}; use a chunk attention for slices")
    if len(ctx.segments) == 1:
        return _sdpa(q, k, v, causal=True)
    outs = [_sdpa(q[s.row:s.row + s.length], k[s.row:s.row + s.length],
                  v[s.row:s.row + s.length], causal=True) for s in ctx.segments]
    return torch.cat(outs, dim=0)


def reference_chunk_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                              ctx: ChunkContext, layer_index: int) -> torch.Tensor:
    """Chunk attention in plain autograd, for tests and unpipelined references.

    Each segment attends to its own rows and to the keys/values of its sequence's earlier slices
    stored in ctx.state by earlier chunks (same layer): ctx.state[("kv", layer, seq_id)] maps a
    slice start to its (k, v), kept with their autograd graph, so one backward over the summed
    loss of all chunks gives exact gradients. Share one state dict between a step's chunks and
    run them in sequence order; re-running a slice (recompute) overwrites its entry.
    """
    outs = []
    for s in ctx.segments:
        rows = slice(s.row, s.row + s.length)
        qs, ks, vs = q[rows], k[rows], v[rows]
        store = ctx.state.setdefault(("kv", layer_index, s.seq_id), {})
        store[s.start] = (ks, vs)
        if s.start == 0:
            outs.append(_sdpa(qs, ks, vs, causal=True))
            continue
        earlier = sorted(start for start in store if start < s.start)
        covered = 0
        for start in earlier:
            if start != covered:
                break
            covered += store[start][0].shape[0]
        if covered != s.start:
            raise ValueError(
                f"reference_chunk_attention: layer {layer_index}, sequence {s.seq_id}: slice at "
                f"{s.start} needs keys/values of [0, {s.start}) but earlier chunks covered "
                f"[0, {covered}) (run slices in order and share ctx.state)")
        k_all = torch.cat([store[t][0] for t in earlier] + [ks], dim=0)
        v_all = torch.cat([store[t][1] for t in earlier] + [vs], dim=0)
        # Causal mask aligned bottom-right: query i (position start + i) sees keys 0..start + i.
        i = torch.arange(s.length, device=q.device)[:, None]
        j = torch.arange(s.start + s.length, device=q.device)[None, :]
        outs.append(_sdpa(qs, k_all, v_all, causal=False, mask=j <= s.start + i))
    return outs[0] if len(outs) == 1 else torch.cat(outs, dim=0)


class Attention(nn.Module):
    def __init__(self, config: LlamaConfig, device: torch.device | str | None = None) -> None:
        super().__init__()
        kw = dict(bias=False, dtype=config.dtype, device=device)
        self.heads, self.kv_heads, self.head_dim = config.heads, config.kv_heads, config.head_dim
        self.q_proj = nn.Linear(config.hidden, config.heads * config.head_dim, **kw)
        self.k_proj = nn.Linear(config.hidden, config.kv_heads * config.head_dim, **kw)
        self.v_proj = nn.Linear(config.hidden, config.kv_heads * config.head_dim, **kw)
        self.o_proj = nn.Linear(config.heads * config.head_dim, config.hidden, **kw)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, ctx: ChunkContext,
                attention_fn: AttentionFn, layer_index: int) -> torch.Tensor:
        t = x.shape[0]
        q = apply_rotary(self.q_proj(x).view(t, self.heads, self.head_dim), cos, sin)
        k = apply_rotary(self.k_proj(x).view(t, self.kv_heads, self.head_dim), cos, sin)
        v = self.v_proj(x).view(t, self.kv_heads, self.head_dim)
        out = attention_fn(q, k, v, ctx, layer_index)
        return self.o_proj(out.reshape(t, self.heads * self.head_dim))


class MLP(nn.Module):
    """SwiGLU: down(silu(gate(x)) * up(x))."""

    def __init__(self, config: LlamaConfig, device: torch.device | str | None = None) -> None:
        super().__init__()
        kw = dict(bias=False, dtype=config.dtype, device=device)
        self.gate_proj = nn.Linear(config.hidden, config.ffn, **kw)
        self.up_proj = nn.Linear(config.hidden, config.ffn, **kw)
        self.down_proj = nn.Linear(config.ffn, config.hidden, **kw)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class DecoderLayer(nn.Module):
    """Pre-norm attention and SwiGLU MLP, each with a residual connection."""

    def __init__(self, config: LlamaConfig, device: torch.device | str | None = None) -> None:
        super().__init__()
        self.self_attn = Attention(config, device)
        self.mlp = MLP(config, device)
        self.input_layernorm = RMSNorm(config.hidden, config.rms_eps, config.dtype, device)
        self.post_attention_layernorm = RMSNorm(config.hidden, config.rms_eps, config.dtype, device)

    def forward(self, hidden: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor,
                ctx: ChunkContext, attention_fn: AttentionFn, layer_index: int) -> torch.Tensor:
        hidden = hidden + self.self_attn(self.input_layernorm(hidden), cos, sin, ctx,
                                         attention_fn, layer_index)
        return hidden + self.mlp(self.post_attention_layernorm(hidden))


# --------------------------------------------------------------------------------------------
# Stages


class LlamaStage(nn.Module):
    """Layers [first_layer, last_layer) of the decoder (last_layer is exclusive), plus the
    embedding when has_embedding and the final norm and LM head when has_head.

    forward(x, ctx): x is token ids [T] (int64) on a stage with the embedding, else hidden
    states [T, hidden]; returns logits [T, vocab] on a stage with the head, else hidden states.

    Weights are initialised from `seed` parameter by parameter (keyed by name), so any split
    built with the same seed holds exactly the full model's weights; seed=None leaves
    PyTorch's default initialisation (to be overwritten by load_state_dict).
    """

    def __init__(self, config: LlamaConfig, first_layer: int, last_layer: int,
                 has_embedding: bool, has_head: bool, *, seed: int | None = 0,
                 device: torch.device | str | None = None) -> None:
        super().__init__()
        if not (0 <= first_layer < last_layer <= config.layers):
            raise ValueError(
                f"LlamaStage: layer range [{first_layer}, {last_layer}) must be non-empty and "
                f"within [0, {config.layers}) (last_layer is exclusive)")
        self.config = config
        self.first_layer, self.last_layer = first_layer, last_layer
        self.has_embedding, self.has_head = bool(has_embedding), bool(has_head)
        self.embed_tokens = (nn.Embedding(config.vocab, config.hidden, dtype=config.dtype,
                                          device=device) if has_embedding else None)
        self.layers = nn.ModuleDict(
            {str(i): DecoderLayer(config, device) for i in range(first_layer, last_layer)})
        if has_head:
            self.norm = RMSNorm(config.hidden, config.rms_eps, config.dtype, device)
            self.lm_head = nn.Linear(config.hidden, config.vocab, bias=False, dtype=config.dtype,
                                     device=device)
        else:
            self.norm = None
            self.lm_head = None
        self.attention_fn: AttentionFn = varlen_causal_attention
        self._inv_freq: dict = {}
        if seed is not None:
            init_weights(self, seed)

    @property
    def layer_indices(self) -> range:
        return range(self.first_layer, self.last_layer)

    def extra_repr(self) -> str:
        return (f"layers=[{self.first_layer}, {self.last_layer}), "
                f"has_embedding={self.has_embedding}, has_head={self.has_head}")

    def _rotary(self, ctx: ChunkContext, dtype: torch.dtype,
                device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
        def make() -> tuple[torch.Tensor, torch.Tensor]:
            key = (_compute_dtype(dtype), device)
            if key not in self._inv_freq:
                self._inv_freq[key] = rotary_inv_freq(self.config.head_dim,
                                                      self.config.rope_theta, dtype, device)
            return rotary_cos_sin(ctx.positions(device), self._inv_freq[key], dtype)
        return ctx.cached(("rotary", self.config.head_dim, self.config.rope_theta, dtype, device),
                          make)

    def embed(self, tokens: torch.Tensor) -> torch.Tensor:
        if self.embed_tokens is None:
            raise RuntimeError(f"{self.extra_repr()}: this stage has no embedding")
        if tokens.dim() != 1 or tokens.dtype not in (torch.int64, torch.int32):
            raise ValueError(f"embed: expected a 1-D integer token tensor, got {tokens.dtype} "
                             f"{tuple(tokens.shape)}")
        if tokens.numel() > 0:
            lo, hi = int(tokens.min()), int(tokens.max())
            if lo < 0 or hi >= self.config.vocab:
                bad = lo if lo < 0 else hi
                raise ValueError(f"token id {bad} is outside the vocabulary [0, {self.config.vocab})")
        return self.embed_tokens(tokens)

    def layer(self, i: int, hidden: torch.Tensor, ctx: ChunkContext) -> torch.Tensor:
        """Run global layer i (which must be on this stage) on hidden [T, hidden]."""
        if not (self.first_layer <= i < self.last_layer):
            raise IndexError(f"layer {i} is not on this stage ({self.extra_repr()})")
        if hidden.dim() != 2 or hidden.shape[0] != ctx.num_tokens:
            raise ValueError(f"layer {i}: hidden has shape {tuple(hidden.shape)}, expected "
                             f"[{ctx.num_tokens}, {self.config.hidden}] for {ctx!r}")
        cos, sin = self._rotary(ctx, hidden.dtype, hidden.device)
        fn = ctx.attention if ctx.attention is not None else self.attention_fn
        return self.layers[str(i)](hidden, cos, sin, ctx, fn, i)

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
        raise ValueError(f"cannot split {layers} layers over {stages} pipeline stages: every "
                         "stage needs a layer; use fewer stages")
    split = [layers // stages] * stages
    extra = layers % stages
    first = (stages - extra + 1) // 2
    for i in range(extra):
        split[first + i] += 1
    return split


def _layer_ranges(config: LlamaConfig, layers_per_stage: int | Sequence[int]) -> list[range]:
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


def split_stages(config: LlamaConfig, layers_per_stage: int | Sequence[int], *, seed: int | None = 0,
                 device: torch.device | str | None = None) -> list[LlamaStage]:
    """All stages of a pipeline: layers_per_stage is a list of layer counts, or a stage count
    (split as the planner does). With the same seed they hold the full model's weights."""
    ranges = _layer_ranges(config, layers_per_stage)
    return [LlamaStage(config, r.start, r.stop, has_embedding=(s == 0),
                       has_head=(s == len(ranges) - 1), seed=seed, device=device)
            for s, r in enumerate(ranges)]


def build_stage(config: LlamaConfig, layers_per_stage: int | Sequence[int], stage: int, *,
                seed: int | None = 0, device: torch.device | str | None = None) -> LlamaStage:
    """Only stage `stage` of split_stages (what one pipeline rank builds)."""
    ranges = _layer_ranges(config, layers_per_stage)
    if not 0 <= stage < len(ranges):
        raise IndexError(f"stage {stage} out of range for {len(ranges)} stages")
    r = ranges[stage]
    return LlamaStage(config, r.start, r.stop, has_embedding=(stage == 0),
                      has_head=(stage == len(ranges) - 1), seed=seed, device=device)


def build_full_model(config: LlamaConfig, *, seed: int | None = 0,
                     device: torch.device | str | None = None) -> LlamaStage:
    """One stage holding everything: the unpipelined reference."""
    return LlamaStage(config, 0, config.layers, True, True, seed=seed, device=device)


# --------------------------------------------------------------------------------------------
# Weights


def _param_seed(seed: int, name: str) -> int:
    return (int(seed) * 1_000_003 + zlib.crc32(name.encode())) % (2**63 - 1)


@torch.no_grad()
def init_weights(stage: nn.Module, seed: int, std: float = 0.02) -> None:
    """Deterministic init keyed by (seed, parameter name): normal(0, std) drawn in float32 for
    matrices and embeddings, ones for norms. Independent of dtype, device and stage split."""
    for name, p in stage.named_parameters():
        if name == "norm.weight" or name.endswith("layernorm.weight"):
            p.fill_(1.0)
        else:
            g = torch.Generator().manual_seed(_param_seed(seed, name))
            p.copy_(torch.randn(p.shape, generator=g, dtype=torch.float32) * std)


def stage_state_dict(full_state: Mapping[str, torch.Tensor], layer_range: range | Sequence[int],
                     has_embedding: bool | None = None,
                     has_head: bool | None = None) -> dict[str, torch.Tensor]:
    """The entries of a full model's state dict (our names) that a stage holds.

    layer_range: the stage's global layer indices (range(first, last)). has_embedding defaults
    to "the range starts at layer 0", has_head to "the range ends at the last layer present".
    """
    layers = set(int(i) for i in layer_range)
    if has_embedding is None:
        has_embedding = 0 in layers
    if has_head is None:
        present = {int(k.split(".")[1]) for k in full_state if k.startswith("layers.")}
        has_head = bool(present) and max(present) in layers
    out = {}
    for name, value in full_state.items():
        if name.startswith("layers."):
            keep = int(name.split(".")[1]) in layers
        elif name.startswith("embed_tokens."):
            keep = has_embedding
        elif name.startswith(("norm.", "lm_head.")):
            keep = has_head
        else:
            raise KeyError(f"stage_state_dict: unexpected parameter name {name!r}")
        if keep:
            out[name] = value
    return out


def to_hf_state_dict(state: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Our names -> transformers LlamaForCausalLM names (adds "model." except for lm_head)."""
    return {(name if name.startswith("lm_head.") else "model." + name): value
            for name, value in state.items()}


def from_hf_state_dict(hf_state: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """transformers LlamaForCausalLM names -> ours (drops rotary buffers if present)."""
    out = {}
    for name, value in hf_state.items():
        if "rotary_emb" in name:
            continue
        if name.startswith("model."):
            out[name[len("model."):]] = value
        elif name.startswith("lm_head."):
            out[name] = value
        else:
            raise KeyError(f"from_hf_state_dict: unexpected parameter name {name!r}")
    return out


# --------------------------------------------------------------------------------------------
# Loss


def pack_sequences(sequences: Sequence[torch.Tensor | Sequence[int]],
                   device: torch.device | str | None = None) -> tuple[torch.Tensor, ChunkContext]:
    """Whole sequences packed into one chunk: (tokens [T], ctx) with seq ids 0..n-1."""
    seqs = [torch.as_tensor(s, dtype=torch.long, device=device).reshape(-1) for s in sequences]
    return torch.cat(seqs), ChunkContext.packed([s.numel() for s in seqs])


def count_targets(lengths: Iterable[int]) -> int:
    """Number of target tokens of a step: every token except each sequence's last."""
    return sum(max(int(n) - 1, 0) for n in lengths)


def chunk_targets(ctx: ChunkContext | Iterable[Sequence[int]],
                  sequences: Mapping[int, Any] | Sequence[Any],
                  device: torch.device | str | None = None) -> torch.Tensor:
    """Target ids [T] of a chunk's rows: the next token of the same sequence (for a slice's last
    token, the first token of the next slice), IGNORE_INDEX for a sequence's final token.
    sequences[seq_id] is that sequence's full token list or 1-D tensor."""
    segments = ctx.segments if isinstance(ctx, ChunkContext) else [Segment(*s) for s in ctx]
    parts = []
    for s in segments:
        tokens = torch.as_tensor(sequences[s.seq_id], dtype=torch.long).reshape(-1)
        n = tokens.numel()
        end = s.start + s.length
        if end > n:
            raise ValueError(f"chunk_targets: segment {s} ends at {end} but sequence {s.seq_id} "
                             f"has {n} tokens")
        targets = tokens[s.start + 1:end + 1]
        if end == n:
            targets = torch.cat([targets, torch.tensor([IGNORE_INDEX], dtype=torch.long)])
        parts.append(targets)
    return torch.cat(parts).to(device)


def chunk_loss(logits: torch.Tensor, targets: torch.Tensor, normaliser: int | float) -> torch.Tensor:
    """Summed cross-entropy of a chunk's rows divided by the step's target count, so that the
    sum over a step's chunks is the mean loss over all its target tokens."""
    if normaliser <= 0:
        raise ValueError(f"chunk_loss: the normaliser (target tokens in the step) must be "
                         f"positive, got {normaliser}")
    if logits.dtype not in (torch.float32, torch.float64):
        logits = logits.float()
    loss = F.cross_entropy(logits, targets.to(logits.device), ignore_index=IGNORE_INDEX,
                           reduction="sum")
    return loss / normaliser


def reference_loss(model: LlamaStage, sequences: Sequence[torch.Tensor | Sequence[int]]
                   ) -> torch.Tensor:
    """Unpipelined mean next-token loss of whole sequences on a full model."""
    device = next(model.parameters()).device
    tokens, ctx = pack_sequences(sequences, device)
    logits = model(tokens, ctx)
    normaliser = count_targets(s.numel() for s in
                               (torch.as_tensor(q).reshape(-1) for q in sequences))
    return chunk_loss(logits, chunk_targets(ctx, list(sequences), device), normaliser)
