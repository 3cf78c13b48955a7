"""Spread head (docs/design.md, "Spread head") on real processes (CPU, Gloo) against the
unpipelined model, in float64 within 1e-9.

Every case runs one step of a Trainer(spread_head=True), whose every stage holds a replica of
the final norm and the LM head, on a plan whose chunks' heads run on other stages than the last
(spread_bodies.spread_schedule writes the H, SEND_H/RECV_H and SEND_HG/RECV_HG actions into a
validated plan's schedule): heads on every stage in turn (the last stage's local H included), all
on the first stage, all on the last, or some left in the last stage's forward; packed, hybrid
and split chunks (K/V buffers carried between a sequence's slices), checkpointed layers, waves.
The loss every rank returns, the evaluation loss of the same plan and every parameter's gradient
equal the unpipelined model's; the head replicas' gradients, summed over the stages, equal the
unpipelined head's, and after the trainer's all-reduce every replica holds exactly that sum. A
multi-step AdamW run keeps the replicas identical and equal to the unpipelined model's training.
"""

from __future__ import annotations

import bodies
import pytest
import spread_bodies
import test_pipeline
import torch
from launcher import check_all_ok, run_ranks, runs_by_world
from spread_bodies import HEAD_NAMES
from test_pipeline import HYBRID, LONG, OVERLAPPED_WAVES, OWN, SHORT, WAVES

TOLERANCE = 1e-9
CHUNKFLOW = dict(method="chunkflow", chunk_tokens=128)  # LONG in 6 slices: K/V carried


def case(name, lengths, plan, seed=0, **expect):
    return dict(name=name, dtype="float64", lengths=lengths, plan=plan, seed=seed, expect=expect)


CASES = [
    case("packed-round-robin", SHORT, dict(OWN, heads="round-robin"), every_stage=True),
    case("split-first", LONG, dict(CHUNKFLOW, heads="first"), kind="split"),
    case("split-round-robin", LONG, dict(CHUNKFLOW, heads="round-robin"), every_stage=True),
    case(
        "split-recompute-some",
        LONG,
        dict(CHUNKFLOW, heads="none-odd", recompute="pattern"),
        kind="split",
        recompute=True,
    ),
    case(
        "hybrid-recompute-round-robin",
        HYBRID,
        dict(OWN, heads="round-robin", recompute="pattern"),
        kind="hybrid",
        recompute=True,
    ),
    case("waves-overlapped-last", WAVES, dict(OVERLAPPED_WAVES, heads="last"), kind="hybrid"),
    case(
        "waves-overlapped-round-robin-recompute",
        WAVES,
        dict(OVERLAPPED_WAVES, heads="round-robin", recompute="pattern"),
        recompute=True,
    ),
]
CASE_INDEX = {c["name"]: i for i, c in enumerate(CASES)}


@pytest.fixture(scope="module")
def runs():
    """Per world size, every rank's records of every case (one launch per world size)."""
    return runs_by_world("spread_bodies:parity", CASES)


references = test_pipeline.references


def spread_grads(per_rank: list[dict]) -> dict[str, torch.Tensor]:
    """Every parameter's gradient as the executor left it: each layer's from the one stage
    holding it, the head's summed over the stages whose replica ran heads."""
    grads: dict[str, torch.Tensor] = {}
    for r in per_rank:
        for name, g in r["grads"].items():
            if name in HEAD_NAMES and name in grads:
                grads[name] = grads[name] + g
            else:
                assert name not in grads, f"parameter {name} is on two stages"
                grads[name] = g
    return grads


def check_expectations(c: dict, per_rank: list[dict], world: int) -> None:
    """The case really runs what its name says."""
    expect, first = c["expect"], per_rank[0]
    heads = first["heads"]
    assert all(r["heads"] == heads for r in per_rank)
    assert any(h >= 0 for h in heads), heads
    assert any(0 <= h < world - 1 for h in heads) or c["plan"]["heads"] == "last", heads
    if expect.get("every_stage"):
        assert set(heads) == set(range(world)), heads
    if "kind" in expect:
        assert expect["kind"] in first["kinds"], first["kinds"]
    if expect.get("recompute"):
        flat = [n for row in first["recompute"] for n in row]
        assert any(n > 0 for n in flat)
        assert sum(r["stats"]["recomputed_layers"] for r in per_rank) == sum(flat)
    # The heads ran where the plan put them: only those stages' replicas have gradients.
    for r in per_rank:
        ran_heads = r["stage"] in heads or (r["stage"] == world - 1 and -1 in heads)
        assert ("lm_head.weight" in r["grads"]) == ran_heads, (r["stage"], heads)


@pytest.mark.parametrize("world", [2, 4])
@pytest.mark.parametrize("name", [c["name"] for c in CASES])
def test_spread_head_step_matches_unpipelined_model(runs, references, world, name):
    c = CASES[CASE_INDEX[name]]
    per_rank = [rank_results[CASE_INDEX[name]] for rank_results in runs(world)]
    check_expectations(c, per_rank, world)
    ref_loss, ref_grads = references(c)
    bodies.assert_matches_unpipelined(
        {r["stage"]: r["loss"] for r in per_rank},
        spread_grads(per_rank),
        ref_loss,
        ref_grads,
        TOLERANCE,
    )
    for r in per_rank:  # evaluating the same plan: the loss alone, heads where the plan says
        assert abs(r["eval_loss"] - ref_loss) <= TOLERANCE * abs(ref_loss), r["stage"]


@pytest.mark.parametrize("world", [2, 4])
@pytest.mark.parametrize("name", [c["name"] for c in CASES])
def test_head_replicas_hold_the_summed_gradient(runs, references, world, name):
    c = CASES[CASE_INDEX[name]]
    per_rank = [rank_results[CASE_INDEX[name]] for rank_results in runs(world)]
    _, ref_grads = references(c)
    first = per_rank[0]["summed_head"]
    assert set(first) == set(HEAD_NAMES)
    for r in per_rank:
        for n in HEAD_NAMES:
            assert torch.equal(r["summed_head"][n], first[n]), (r["stage"], n)
    for n in HEAD_NAMES:
        assert bodies.relative_error(first[n], ref_grads[n]) < TOLERANCE, n


# Three AdamW steps, each on its own batch and head placement.
TRAINING = [
    dict(lengths=LONG, seed=1, plan=dict(CHUNKFLOW, heads="round-robin")),
    dict(lengths=SHORT, seed=2, plan=dict(OWN, heads="first")),
    dict(lengths=HYBRID, seed=3, plan=dict(OWN, heads="none-odd", recompute="pattern")),
]


def test_training_keeps_head_replicas_equal_to_the_unpipelined_model():
    per_rank = check_all_ok(
        run_ranks("spread_bodies:training", 2, dict(steps=TRAINING), timeout_s=300)
    )
    ref_losses, ref_params = spread_bodies.reference_training(TRAINING)
    for r in per_rank:
        for got, want in zip(r["losses"], ref_losses):
            assert abs(got - want) <= TOLERANCE * abs(want), (r["stage"], got, want)
    for n in HEAD_NAMES:  # bitwise the same replica on every stage
        assert all(torch.equal(r["params"][n], per_rank[0]["params"][n]) for r in per_rank), n
    params = {}
    for r in per_rank:
        params.update(r["params"])
    assert set(params) == set(ref_params)
    errors = {n: bodies.relative_error(params[n], ref_params[n]) for n in ref_params}
    worst = max(errors, key=errors.get)
    assert errors[worst] < TOLERANCE, f"{worst}: relative error {errors[worst]:.3g}"
    # The steps moved the weights: the comparison is not of the initial ones.
    initial = spread_bodies.reference_training([])[1]
    assert all(not torch.equal(ref_params[n], initial[n]) for n in HEAD_NAMES)
