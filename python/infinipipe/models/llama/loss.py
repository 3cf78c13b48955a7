"""The training objective as the executor computes it: next-token targets of a chunk's rows and
the summed cross-entropy over the step's target count, both the C++ runtime's own
(runtime/next_token_loss.h), so the unpipelined reference and the pipeline share one loss."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import torch

from ... import _C
from .context import ChunkContext, Slice

IGNORE_INDEX = _C.runtime.IGNORE_INDEX  # target of a token that has none (a sequence's last)


def pack_sequences(
    sequences: Sequence[torch.Tensor | Sequence[int]], device: torch.device | str | None = None
) -> tuple[torch.Tensor, ChunkContext]:
    """Whole sequences packed into one chunk: (tokens [T], ctx) with sequence ids 0..n-1."""
    seqs = [torch.as_tensor(s, dtype=torch.long, device=device).reshape(-1) for s in sequences]
    ctx = ChunkContext.packed([s.numel() for s in seqs], device=torch.device(device or "cpu"))
    return torch.cat(seqs), ctx


def count_targets(lengths: Iterable[int]) -> int:
    """Number of target tokens of a step: every token except each sequence's last."""
    return sum(max(int(n) - 1, 0) for n in lengths)


def chunk_targets(
    ctx: ChunkContext | Iterable[Slice | tuple[int, int, int]],
    sequences: Mapping[int, Any] | Sequence[Any],
    device: torch.device | str | None = None,
) -> torch.Tensor:
    """Target ids [T] of a chunk's rows (a context, or its slices as (seq, start, end)): the next
    token of the same sequence (for a slice's last token, the first token of the next slice),
    IGNORE_INDEX for a sequence's final token. sequences[seq] is that sequence's full token list
    or 1-D tensor."""
    slices = ctx.slices if isinstance(ctx, ChunkContext) else list(ctx)
    if isinstance(sequences, Mapping):
        count = max(sequences, default=-1) + 1
        empty = torch.empty(0, dtype=torch.long)
        sequences = [sequences.get(i, empty) for i in range(count)]
    tokens = [torch.as_tensor(s, dtype=torch.long).reshape(-1) for s in sequences]
    return _C.runtime.next_token_targets(slices, tokens).to(device)


def chunk_loss(
    logits: torch.Tensor, targets: torch.Tensor, normaliser: int | float
) -> torch.Tensor:
    """Summed cross-entropy of a chunk's rows divided by the step's target count, so that the
    sum over a step's chunks is the mean loss over all its target tokens."""
    return _C.runtime.next_token_loss(logits, targets, float(normaliser))


def reference_loss(model: Any, sequences: Sequence[torch.Tensor | Sequence[int]]) -> torch.Tensor:
    """Unpipelined mean next-token loss of whole sequences on a full model (a LlamaStage)."""
    device = next(model.parameters()).device
    tokens, ctx = pack_sequences(sequences, device)
    logits = model(tokens, ctx)
    normaliser = count_targets(
        s.numel() for s in (torch.as_tensor(q).reshape(-1) for q in sequences)
    )
    return chunk_loss(logits, chunk_targets(ctx, list(sequences), device), normaliser)
