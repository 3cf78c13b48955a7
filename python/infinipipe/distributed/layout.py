"""The parallel layout: data replicas x pipeline stages x sequence-parallel ranks per stage.

    world = data * pipeline * sequence
    rank  = (replica * pipeline + stage) * sequence + sequence_rank

Sequence-parallel (Ulysses) ranks are innermost, so a stage's group sits on one node and its
all-to-alls stay on the fast links; a replica's stages follow, then the replicas. Pipes join the
same sequence rank of adjacent stages of one replica. A stage's gradient group is every rank
holding that stage (its sequence ranks in every replica): its gradients are summed there once
per step, and with ZeRO its optimizer state is sharded there (docs/design.md, "Parallel
layout").
"""

from __future__ import annotations

import dataclasses
import datetime
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch.distributed as dist

from ..errors import Error


@dataclass(frozen=True)
class Parallel:
    """Degrees of the layout. pipeline: stages per replica (default: what the world leaves);
    sequence: Ulysses sequence-parallel ranks per stage; data: pipeline replicas. zero: 0 keeps
    the optimizer whole on every rank; 1 shards its state over the stage's gradient group
    (torch's ZeroRedundancyOptimizer). layer_split: the model's layers per stage (a sequence,
    one count per stage), or a stage count to split them over evenly; None splits them evenly
    over the pipeline's stages (planning/stage_balance.py finds splits that balance the head)."""

    pipeline: int | None = None
    sequence: int = 1
    data: int = 1
    zero: int = 1
    layer_split: int | Sequence[int] | None = None

    def resolve(self, world_size: int) -> Parallel:
        """The degrees with pipeline filled in; Error when the world does not factor."""
        for name in ("sequence", "data"):
            value = getattr(self, name)
            if not isinstance(value, int) or value < 1:
                raise Error(f"Parallel: {name} must be a positive integer, got {value!r}")
        if self.zero not in (0, 1):
            raise Error(
                f"Parallel: zero must be 0 (no sharding) or 1 (optimizer state sharded over "
                f"the stage's gradient group), got {self.zero!r}; ZeRO-2/3 are not built"
            )
        inner = self.sequence * self.data
        pipeline = self.pipeline
        if pipeline is None:
            if world_size % inner:
                raise Error(
                    f"Parallel: the world of {world_size} processes is not a multiple of "
                    f"sequence {self.sequence} x data {self.data}; launch a multiple of "
                    f"{inner} processes"
                )
            pipeline = world_size // inner
        if not isinstance(pipeline, int) or pipeline < 1 or pipeline * inner != world_size:
            raise Error(
                f"Parallel: the world has {world_size} processes but data {self.data} x "
                f"pipeline {pipeline} x sequence {self.sequence} = {pipeline * inner}; launch "
                f"that many (torchrun --nproc_per_node=...) or change the degrees"
            )
        return dataclasses.replace(self, pipeline=pipeline)

    def stage_layers(self, layers: int, world_size: int) -> list[int]:
        """The layers of each of the pipeline's stages in a world of `world_size` processes:
        layer_split, checked, or an even split (the planner's: the remainder goes to the middle
        stages). Error when the split's stages are not the layout's."""
        from ..models.llama import even_layer_split

        pipeline = self.resolve(world_size).pipeline
        if self.layer_split is None:
            split = even_layer_split(layers, pipeline)
        elif isinstance(self.layer_split, int):
            split = even_layer_split(layers, self.layer_split)
        else:
            split = [int(n) for n in self.layer_split]
            if not split or any(n <= 0 for n in split) or sum(split) != layers:
                raise ValueError(
                    f"layer split {split} must be positive layer counts summing to the "
                    f"model's {layers} layers"
                )
        if len(split) != pipeline:
            processes = len(split) * self.sequence * self.data
            raise Error(
                f"the world has {world_size} processes but the pipeline has {len(split)} "
                f"stages (layer split {split}); launch one process per stage and sequence rank "
                f"of each replica (torchrun --nproc_per_node={processes}) or change the layer "
                "split"
            )
        return split


class Layout:
    """Where a rank sits, and (after create_groups) the process groups it needs."""

    def __init__(self, parallel: Parallel, rank: int, world_size: int) -> None:
        self.parallel = parallel.resolve(world_size)
        p = self.parallel
        self.rank = rank
        self.world_size = world_size
        self.replica, rest = divmod(rank, p.pipeline * p.sequence)
        self.stage, self.sequence_rank = divmod(rest, p.sequence)
        self.pipeline_ranks = [
            self.rank_of(self.replica, s, self.sequence_rank) for s in range(p.pipeline)
        ]
        self.sequence_ranks = [self.rank_of(self.replica, self.stage, j) for j in range(p.sequence)]
        self.gradient_ranks = self.stage_ranks(self.stage)
        self.sequence_group: Any = None
        self.gradient_group: Any = None
        self.head_group: Any = None

    def stage_ranks(self, stage: int) -> list[int]:
        """Every rank holding `stage`: its gradient group."""
        p = self.parallel
        return [self.rank_of(r, stage, j) for r in range(p.data) for j in range(p.sequence)]

    def create_groups(self, timeout_s: float, spread_head: bool = False) -> None:
        """The sequence and gradient groups (when bigger than one rank), and with spread_head
        the head group: every rank again, carrying the spread head's messages apart from the
        pipes' (NCCL orders the messages between two ranks per group; ExecutorOptions::
        head_group). new_group is a collective over the world even for groups a rank is not in:
        every rank creates every group, in one order."""
        p = self.parallel
        timeout = datetime.timedelta(seconds=timeout_s)
        if spread_head and self.world_size > 1:
            self.head_group = dist.new_group(list(range(self.world_size)), timeout=timeout)
        if p.sequence > 1:
            for r in range(p.data):
                for s in range(p.pipeline):
                    ranks = [self.rank_of(r, s, j) for j in range(p.sequence)]
                    group = dist.new_group(ranks, timeout=timeout)
                    if self.rank in ranks:
                        self.sequence_group = group
        if len(self.gradient_ranks) > 1:
            for s in range(p.pipeline):
                ranks = self.stage_ranks(s)
                group = dist.new_group(ranks, timeout=timeout)
                if self.rank in ranks:
                    self.gradient_group = group

    def destroy_groups(self) -> None:
        """Shuts down this rank's sequence, gradient and head groups (local, no collective). The
        default group is the user's and stays."""
        groups = [
            g for g in (self.sequence_group, self.gradient_group, self.head_group) if g is not None
        ]
        self.sequence_group = self.gradient_group = self.head_group = None
        for group in groups:
            if not dist.is_initialized():
                return  # the user destroyed every group already
            try:
                dist.destroy_process_group(group)
            except ValueError:
                pass  # the user destroyed this one already

    def rank_of(self, replica: int, stage: int, sequence_rank: int) -> int:
        p = self.parallel
        return (replica * p.pipeline + stage) * p.sequence + sequence_rank

    def describe(self, rank: int) -> str:
        """A rank's name in errors: 'rank 5 (stage 1, replica 1)'."""
        p = self.parallel
        replica, rest = divmod(rank, p.pipeline * p.sequence)
        stage, sequence_rank = divmod(rest, p.sequence)
        where = [f"stage {stage}"]
        if p.sequence > 1:
            where.append(f"sequence rank {sequence_rank}")
        if p.data > 1:
            where.append(f"replica {replica}")
        return f"rank {rank} ({', '.join(where)})"

    def replica_of(self, rank: int) -> int:
        return rank // (self.parallel.pipeline * self.parallel.sequence)

    @property
    def leads_gradients(self) -> bool:
        """The one rank of the stage's gradient group that counts its gradients in a global
        norm (after the reduction every rank of the group holds the same)."""
        return self.replica == 0 and self.sequence_rank == 0

    def __repr__(self) -> str:
        p = self.parallel
        return (
            f"Layout(data={p.data}, pipeline={p.pipeline}, sequence={p.sequence}, "
            f"zero={p.zero}: {self.describe(self.rank)})"
        )


@dataclass
class Share:
    """A replica's part of a batch: which sequences (indices into the batch, ascending), their
    tokens, and the batch's target tokens (every replica averages its loss over those, so the
    replicas' gradients add up to the batch's)."""

    indices: list[int]
    sequences: list[Any]
    loss_tokens: int  # the whole batch's target tokens
    tokens: int  # the whole batch's tokens


def share_indices(layout: Layout, lengths: list[int], cost: Any) -> list[int]:
    """The sequences of `lengths` this rank's replica trains on: the batch split over the
    replicas by predicted cost (planner/data_split.h), the same on every rank."""
    if layout.parallel.data == 1:
        return list(range(len(lengths)))
    from .. import _C

    return list(_C.plan.split_over_replicas(lengths, cost, layout.parallel.data)[layout.replica])
