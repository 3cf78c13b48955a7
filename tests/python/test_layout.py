"""The parallel layout's rank arithmetic and its errors (no processes needed)."""

from __future__ import annotations

import pytest

from infinipipe import Error
from infinipipe.distributed.layout import Layout, Parallel


def test_pipeline_defaults_to_what_the_world_leaves():
    assert Parallel().resolve(4).pipeline == 4
    assert Parallel(sequence=2).resolve(8).pipeline == 4
    assert Parallel(sequence=2, data=2).resolve(8).pipeline == 2


@pytest.mark.parametrize(
    "parallel, world, says",
    [
        (Parallel(sequence=3), 4, "not a multiple of sequence 3"),
        (Parallel(pipeline=2, data=2), 6, "data 2 x pipeline 2 x sequence 1 = 4"),
        (Parallel(sequence=0), 4, "sequence must be a positive integer"),
        (Parallel(data=-1), 4, "data must be a positive integer"),
        (Parallel(zero=2), 4, "ZeRO-2/3 are not built"),
    ],
)
def test_worlds_that_do_not_factor_are_named(parallel, world, says):
    with pytest.raises(Error, match=says.replace("(", r"\(")):
        parallel.resolve(world)


def test_sequence_ranks_are_innermost_then_stages_then_replicas():
    parallel = Parallel(pipeline=2, sequence=2, data=2)
    layouts = [Layout(parallel, rank, 8) for rank in range(8)]
    assert [(x.replica, x.stage, x.sequence_rank) for x in layouts] == [
        (r, s, j) for r in range(2) for s in range(2) for j in range(2)
    ]
    five = layouts[5]  # replica 1, stage 0, sequence rank 1
    assert five.pipeline_ranks == [5, 7]  # the same sequence rank of each stage
    assert five.sequence_ranks == [4, 5]
    assert five.gradient_ranks == [0, 1, 4, 5]  # stage 0 in both replicas
    assert five.describe(6) == "rank 6 (stage 1, sequence rank 0, replica 1)"
    assert [x.rank for x in layouts if x.leads_gradients] == [0, 2]
    assert [five.replica_of(r) for r in range(8)] == [0] * 4 + [1] * 4


def test_every_rank_is_in_exactly_one_pipeline_and_one_gradient_group():
    parallel = Parallel(pipeline=3, sequence=2, data=2)
    layouts = [Layout(parallel, rank, 12) for rank in range(12)]
    pipelines = {tuple(x.pipeline_ranks) for x in layouts}
    gradient_groups = {tuple(x.gradient_ranks) for x in layouts}
    assert sorted(r for p in pipelines for r in p) == list(range(12))
    assert sorted(r for g in gradient_groups for r in g) == list(range(12))
    for x in layouts:
        assert x.pipeline_ranks[x.stage] == x.rank and x.rank in x.gradient_ranks
