"""What a step accepts: the batch (Trainer.check_batch) and a plan given to step(batch, plan=...).
Each rank checks its own before the agreement (agreement.py), which raises any rank's refusal on
every rank, so nothing of the pipeline has been sent when a batch or a plan is refused."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import torch

from ..errors import BatchError

BATCH_IS = "a batch is a list of token sequences (lists of ints or 1-D integer tensors)"


def check_batch(batch: Any, vocab: int) -> list[torch.Tensor]:
    """The batch as 1-D int64 CPU tensors; BatchError when it cannot be trained on."""
    if isinstance(batch, (str, bytes)):
        raise BatchError(f"{BATCH_IS}, got {_named(batch)}: tokenize text first")
    if isinstance(batch, torch.Tensor) or not isinstance(batch, Sequence):
        raise BatchError(f"{BATCH_IS}, got {_named(batch)}")
    if len(batch) == 0:
        raise BatchError("the batch is empty: give at least one token sequence")
    sequences = []
    for i, seq in enumerate(batch):
        t = _as_tensor(seq, i, vocab)
        if t.layout != torch.strided or t.is_meta:
            raise BatchError(
                f"sequence {i} is a {'meta' if t.is_meta else str(t.layout)} tensor, which "
                "holds no readable token ids: give a dense tensor (.to_dense()) or a list"
            )
        if t.numel() == 0:
            raise BatchError(f"sequence {i} is empty")
        if t.dim() != 1 or t.is_floating_point() or t.is_complex() or t.dtype == torch.bool:
            raise BatchError(
                f"sequence {i} must be a 1-D list or tensor of integer token "
                f"ids, got {t.dtype} of shape {tuple(t.shape)}"
            )
        t = t.to(device="cpu", dtype=torch.long)
        lo, hi = int(t.min()), int(t.max())
        if lo < 0 or hi >= vocab:
            bad = lo if lo < 0 else hi
            pos = int((t == bad).nonzero()[0])
            raise BatchError(
                f"sequence {i}, position {pos}: token id {bad} is outside the "
                f"vocabulary [0, {vocab})"
            )
        sequences.append(t.contiguous())
    if sum(t.numel() - 1 for t in sequences) == 0:
        raise BatchError("the batch has no target tokens (every sequence has one token)")
    return sequences


def _as_tensor(seq: Any, i: int, vocab: int) -> torch.Tensor:
    """Sequence i as a tensor, or BatchError saying what it is instead (torch's own words, such
    as "new(): invalid data type 'str'", name neither the sequence nor the position)."""
    if isinstance(seq, (str, bytes)):
        raise BatchError(f"sequence {i} is {_named(seq)}, not token ids: tokenize text first")
    if isinstance(seq, (int, float)) or seq is None or isinstance(seq, Mapping):
        hint = ": a batch of one sequence is [[id, id, ...]]" if isinstance(seq, int) else ""
        raise BatchError(f"{BATCH_IS}; sequence {i} is {_named(seq)}{hint}")
    if isinstance(seq, Sequence):
        for pos, token in enumerate(seq):
            if isinstance(token, (str, bytes)) or token is None or isinstance(token, Mapping):
                raise BatchError(
                    f"sequence {i}, position {pos}: {_named(token)} is not a token id (an int)"
                )
            if isinstance(token, int) and not 0 <= token < vocab:  # beyond int64 too
                raise BatchError(
                    f"sequence {i}, position {pos}: token id {token} is outside the "
                    f"vocabulary [0, {vocab})"
                )
    try:
        return torch.as_tensor(seq)
    except Exception as e:  # noqa: BLE001 - reported with the sequence's index
        raise BatchError(
            f"sequence {i} is not a token sequence (a list of ints or a 1-D integer tensor): "
            f"{_named(seq)}, which torch could not read ({e})"
        ) from None


def _named(value: Any) -> str:
    """What a user gave, for a message: its type, and its text when short enough to show."""
    if value is None:
        return "None"
    shown = repr(value)
    if isinstance(value, (str, bytes, int, float)):
        if len(shown) > 40:
            shown = shown[:37] + "..."
        return f"the {type(value).__name__} {shown}"
    if isinstance(value, torch.Tensor):
        return f"a {value.dim()}-D tensor"
    return f"a {type(value).__name__}"


def check_given_plan(
    plan: Any,
    lengths: list[int],
    indices: list[int],
    layers_per_stage: list[int],
    spread_head: bool,
) -> None:
    """A plan given for a batch of `lengths` whose replica's share is `indices`: BatchError
    unless it plans that share's lengths with the trainer's layer split and runs no LM head
    where no replica is; whatever plan.validate() finds is raised as it is."""
    mine = [lengths[i] for i in indices]
    if list(plan.lengths) != mine:
        whose = (
            "this replica's share of the batch has" if len(mine) < len(lengths) else "the batch has"
        )
        raise BatchError(
            f"the given plan is for sequence lengths {list(plan.lengths)}, {whose} {mine}"
        )
    if list(plan.layers_per_stage) != list(layers_per_stage):
        raise BatchError(
            f"the given plan splits the layers as {list(plan.layers_per_stage)}, "
            f"the trainer as {list(layers_per_stage)}: plan with this "
            "trainer (trainer.plan(batch))"
        )
    plan.validate()
    check_head_stages(plan, layers_per_stage, spread_head)


def check_head_stages(plan: Any, layers_per_stage: list[int], spread_head: bool) -> None:
    """A given plan that runs LM heads on stages other than the last needs their replicas:
    refused on every rank alike, before any stage waits for one that cannot run it."""
    if spread_head:
        return
    last = len(layers_per_stage) - 1
    spread = sorted(
        {
            stage
            for stage, actions in enumerate(plan.schedule)
            if stage != last and any(a.startswith("H") for a in actions)
        }
    )
    if spread:
        raise BatchError(
            f"the given plan runs LM heads on stages {spread}, which hold no head replica: "
            "build the trainer with spread_head=True"
        )
