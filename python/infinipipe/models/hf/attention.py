"""The attention function transformers' attention modules call inside an InfiniPipe stage.

Registered in transformers' attention registry as "infinipipe" (`AttentionInterface`); a stage
sets its config's `_attn_implementation` to it, so the unmodified attention module projects,
applies rotary and calls `infinipipe_attention(module, q, k, v, mask, ...)` with q [1, heads,
T, d] and k, v [1, kv_heads, T, d]. It runs the chunk's attention, `ctx.attention(local_layer,
q, k, v)` on [T, heads, d] (the executor's kernel, with the K/V buffers of earlier slices of a
split sequence), and returns [1, T, heads, d] as transformers' own functions do. The stage
passes the chunk's context and the local layer index through the decoder layer's **kwargs.
"""

from __future__ import annotations

import math
from typing import Any

import torch

from ...errors import Error

NAME = "infinipipe"
CONTEXT_KWARG = "infinipipe_ctx"
LAYER_KWARG = "infinipipe_layer"


def _refuse(module: Any, what: str) -> Error:
    layer = getattr(module, "layer_idx", "?")
    return Error(f"transformers layer {layer}: {what} is not supported by InfiniPipe's attention")


def _check_window(module: Any, ctx: Any, sliding_window: int | None) -> None:
    """Sliding-window attention is full causal attention while every position is inside the
    window (a query at position p sees keys j with p - j < window)."""
    if sliding_window is None:
        return
    end = max(s.end for s in ctx.slices)
    if end > int(sliding_window):
        raise _refuse(
            module,
            f"sliding-window attention over a sequence longer than its window ({end} tokens, "
            f"window {sliding_window})",
        )


def infinipipe_attention(
    module: torch.nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    dropout: float = 0.0,
    scaling: float | None = None,
    sliding_window: int | None = None,
    softcap: float | None = None,
    **kwargs: Any,
) -> tuple[torch.Tensor, None]:
    ctx = kwargs.get(CONTEXT_KWARG)
    if ctx is None:
        raise Error(
            f"attention implementation {NAME!r} runs only inside an InfiniPipe stage "
            "(infinipipe.models.hf.HFStage.layer), which passes the chunk's context"
        )
    if attention_mask is not None:
        raise _refuse(module, "an attention mask (rows are packed; the chunk knows its slices)")
    if dropout:
        raise _refuse(module, f"attention dropout {dropout}")
    if softcap:
        raise _refuse(module, f"attention logit softcapping {softcap}")
    head_dim = query.shape[-1]
    if scaling is not None and not math.isclose(scaling, head_dim**-0.5, rel_tol=1e-12):
        raise _refuse(module, f"attention scaling {scaling} (other than head_dim ** -0.5)")
    _check_window(module, ctx, sliding_window)
    if query.shape[0] != 1:
        raise _refuse(module, f"a batch dimension of {query.shape[0]}")
    q, k, v = (t[0].transpose(0, 1) for t in (query, key, value))
    out = ctx.attention(kwargs[LAYER_KWARG], q, k, v)
    return out[None], None


def register() -> None:
    """Adds the function to transformers' global attention registry (idempotent)."""
    from transformers import AttentionInterface

    AttentionInterface.register(NAME, infinipipe_attention)
