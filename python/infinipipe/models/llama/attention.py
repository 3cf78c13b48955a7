"""Attention cores a stage may run instead of the chunk's own (`LlamaStage.attention_fn`).

An attention core is `fn(q, k, v, ctx, layer_index) -> out` with q [T, heads, d], k/v
[T, kv_heads, d] (rotary applied), out [T, heads, d], and the stage's global layer index. By
default a stage calls the chunk context's attention (the executor's chunk attention, with K/V
buffers for slices of split sequences). `varlen_causal_attention` is plain SDPA per whole
sequence (what an unpipelined model runs); `reference_chunk_attention` is chunk attention in
plain autograd, for tests.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F

from .context import ChunkContext, slice_rows

AttentionFn = Callable[[torch.Tensor, torch.Tensor, torch.Tensor, ChunkContext, int], torch.Tensor]


def _sdpa(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    *,
    causal: bool,
    mask: torch.Tensor | None = None,
) -> torch.Tensor:
    """q [L, H, d], k/v [S, KV, d] -> [L, H, d], scale d^-0.5, GQA by head groups.

    Called with a batch dimension of one: on CPU, torch 2.13 sends 3-D inputs to the math kernel,
    which materialises the L x L probabilities (4-5x slower at 4K tokens than the fused kernel
    that 4-D inputs get)."""
    out = F.scaled_dot_product_attention(
        q.transpose(0, 1)[None],
        k.transpose(0, 1)[None],
        v.transpose(0, 1)[None],
        attn_mask=None if mask is None else mask[None],
        is_causal=causal,
        scale=q.shape[-1] ** -0.5,
        enable_gqa=q.shape[1] != k.shape[1],
    )
    return out[0].transpose(0, 1)


def varlen_causal_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    ctx: ChunkContext,
    layer_index: int | None = None,
) -> torch.Tensor:
    """Causal attention within each slice (no padding, nothing across slice boundaries).

    Whole sequences only: a slice that starts after its sequence's first token needs the
    earlier slices' keys/values, which only a chunk attention provides.
    """
    for s in ctx.slices:
        if s.start != 0:
            raise ValueError(
                f"varlen_causal_attention handles whole sequences only, but {s} starts at "
                f"position {s.start} of sequence {s.seq}; use a chunk attention for slices"
            )
    if len(ctx.slices) == 1:
        return _sdpa(q, k, v, causal=True)
    outs = [
        _sdpa(
            q[row : row + s.length], k[row : row + s.length], v[row : row + s.length], causal=True
        )
        for row, s in slice_rows(ctx)
    ]
    return torch.cat(outs, dim=0)


def reference_chunk_attention(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, ctx: ChunkContext, layer_index: int
) -> torch.Tensor:
    """Chunk attention in plain autograd, for tests and unpipelined references.

    Each slice attends to its own rows and to the keys/values of its sequence's earlier slices
    stored in ctx.state by earlier chunks (same layer): ctx.state[("kv", layer, seq)] maps a
    slice start to its (k, v), kept with their autograd graph, so one backward over the summed
    loss of all chunks gives exact gradients. Give every chunk of a step the same dict
    (`ctx.state = shared`) and run them in sequence order; re-running a slice (recompute)
    overwrites its entry.
    """
    state = getattr(ctx, "state", None)
    if state is None:
        raise ValueError(
            "reference_chunk_attention keeps earlier slices' keys/values in "
            "ctx.state: set ctx.state to a dict shared by the step's chunks"
        )
    outs = []
    for row, s in slice_rows(ctx):
        rows = slice(row, row + s.length)
        qs, ks, vs = q[rows], k[rows], v[rows]
        store = state.setdefault(("kv", layer_index, s.seq), {})
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
                f"reference_chunk_attention: layer {layer_index}, sequence {s.seq}: slice at "
                f"{s.start} needs keys/values of [0, {s.start}) but earlier chunks covered "
                f"[0, {covered}) (run slices in order and share ctx.state)"
            )
        k_all = torch.cat([store[t][0] for t in earlier] + [ks], dim=0)
        v_all = torch.cat([store[t][1] for t in earlier] + [vs], dim=0)
        # Causal mask aligned bottom-right: query i (position start + i) sees keys 0..start + i.
        i = torch.arange(s.length, device=q.device)[:, None]
        j = torch.arange(s.start + s.length, device=q.device)[None, :]
        outs.append(_sdpa(qs, k_all, v_all, causal=False, mask=j <= s.start + i))
    return outs[0] if len(outs) == 1 else torch.cat(outs, dim=0)
