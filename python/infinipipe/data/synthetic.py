"""Batches for examples and benchmarks: token sequences of given lengths.

Lengths come from the planning core's built-in samplers (`_C.plan.sample_lengths`, e.g. the
Wikipedia length distribution); the tokens here are synthetic but learnable: each sequence
counts up from a random start modulo the vocabulary with a random stride, so a model's loss
visibly falls within a few dozen steps, and every rank that uses the same generator seed draws
the same batch.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch


def synthetic_batch(
    lengths: Sequence[int], vocab: int, generator: torch.Generator
) -> list[torch.Tensor]:
    batch = []
    for n in lengths:
        start = int(torch.randint(vocab, (1,), generator=generator))
        stride = int(torch.randint(1, 4, (1,), generator=generator))
        batch.append((start + stride * torch.arange(int(n))) % vocab)
    return batch
