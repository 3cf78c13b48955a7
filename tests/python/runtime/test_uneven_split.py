"""Pipelined steps on uneven layer splits (real processes, CPU, Gloo) against the unpipelined
model: what `infinipipe-plan --layers-per-stage balanced` and infinipipe.balanced_layer_split
hand the trainer (docs/cluster_study.md, "Balanced stages"). The last stage, which also runs the
LM head and the loss, holds fewer layers; on 2 ranks the first stage holds one layer too. Loss
and every gradient within 1e-9 (float64) of build_full_model's, as test_pipeline.py checks on
the even split, whose helpers this reuses.
"""

from __future__ import annotations

import bodies
import pytest
import test_pipeline
from launcher import check_all_ok, run_ranks
from test_pipeline import (
    HYBRID,
    MIX,
    OVERLAPPED_WAVES,
    OWN,
    TOLERANCE,
    WAVES,
    gathered_grads,
)

# The tiny model's 8 layers (bodies.MODEL).
SPLITS = {2: [[5, 3], [1, 7]], 4: [[3, 2, 2, 1]]}

CASES = [
    dict(name="mix-epp", dtype="float64", lengths=MIX, seed=7, plan=dict(method="epp")),
    dict(
        name="hybrid-recompute",
        dtype="float64",
        lengths=HYBRID,
        seed=0,
        plan=dict(OWN, recompute="pattern"),
    ),
    dict(
        name="mix-seq1f1b-k4",
        dtype="float64",
        lengths=MIX,
        seed=7,
        plan=dict(method="seq1f1b", k=4),
    ),
    dict(
        name="given-waves-overlapped",
        dtype="float64",
        lengths=WAVES,
        seed=0,
        plan=OVERLAPPED_WAVES,
    ),
]
RUNS = [(world, split) for world, splits in SPLITS.items() for split in splits]


@pytest.fixture(scope="module")
def runs():
    cache = {}

    def get(world: int, split: list[int]) -> list[list[dict]]:
        key = (world, tuple(split))
        if key not in cache:
            results = run_ranks(
                "uneven_bodies:parity",
                world,
                dict(cases=CASES, layer_split=split),
                timeout_s=300,
            )
            cache[key] = check_all_ok(results)
        return cache[key]

    return get


# Per case, the unpipelined model's loss and gradients: test_pipeline's fixture.
references = test_pipeline.references


# The 4-stage split is the slow tier's: the 2-stage ones check the same code on fewer processes.
@pytest.mark.parametrize(
    "world,split",
    [pytest.param(w, s, marks=pytest.mark.slow) if w > 2 else (w, s) for w, s in RUNS],
    ids=[f"{w}-{s}" for w, s in RUNS],
)
@pytest.mark.parametrize("index", range(len(CASES)), ids=[c["name"] for c in CASES])
def test_uneven_split_matches_unpipelined_model(runs, references, world, split, index):
    c = CASES[index]
    per_rank = [rank_results[index] for rank_results in runs(world, split)]
    # The stages really hold the uneven split, and the plan was made for it.
    assert sorted((r["stage"], r["layers"]) for r in per_rank) == list(enumerate(split))
    assert all(r["split"] == split for r in per_rank)
    assert len({r["summary"]["hash"] for r in per_rank}) == 1
    if c["plan"].get("recompute") == "pattern":
        assert any(n > 0 for row in per_rank[0]["recompute"] for n in row)
    bodies.assert_matches_unpipelined(
        {r["stage"]: r["loss"] for r in per_rank},
        gathered_grads(per_rank),
        *references(c),
        TOLERANCE[c["dtype"]],
    )
