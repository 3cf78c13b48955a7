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

import re

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
# The planner's own spread plans (PlannerOptions::spread_head), which it keeps where its
# simulator finds them faster: on this batch Seq1F1B's put heads on other stages than the last.
PLANNED = [
    case(
        "planner-seq1f1b",
        SHORT,
        dict(method="seq1f1b", k=2, spread_head=True),
    ),
    case("planner-trainer-mix", test_pipeline.MIX, dict(trainer_plan=True), seed=7),
    # The same spread plan with its backwards split into B and W (docs/design.md, "Zero bubble").
    case(
        "planner-seq1f1b-zero-bubble",
        SHORT,
        dict(method="seq1f1b", k=2, spread_head=True, zero_bubble="h1"),
        zero_bubble=True,
    ),
]
CASES += PLANNED
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
    if c["plan"].get("trainer_plan"):
        pass  # whatever the trainer's planner chose: spread or not, the step must match
    elif c["plan"].get("heads") != "last":
        assert any(0 <= h < world - 1 for h in heads), heads
    else:
        assert set(heads) == {world - 1}, heads
    if expect.get("zero_bubble"):
        for r in per_rank:
            assert r["stats"]["unsplit_graphs"] == 0, r["stage"]
            assert (r["stats"]["split_graphs"] > 0) == (r["stage"] > 0), r["stage"]
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
        check_bytes(r)


def check_bytes(record: dict) -> None:
    """The stage's bytes sent and received are its schedule's messages, head transfers
    included: [chunk tokens, hidden] in float64 each."""
    row_bytes = bodies.MODEL["hidden"] * 8

    def message_bytes(direction: str) -> int:
        messages = (
            re.fullmatch(direction + r"_(?:F|B|H|HG)(\d+)(@\d+)?", a) for a in record["schedule"]
        )
        return sum(record["chunk_tokens"][int(m[1])] * row_bytes for m in messages if m)

    stats = record["stats"]
    assert stats["bytes_sent"] == message_bytes("SEND"), record["stage"]
    assert stats["bytes_received"] == message_bytes("RECV"), record["stage"]


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
    """Three AdamW steps with clipping (clip_grad_norm_: the head counted once in the norm)."""
    per_rank = check_all_ok(
        run_ranks("spread_bodies:training", 2, dict(steps=TRAINING), timeout_s=300)
    )
    ref_losses, ref_norms, ref_params, ref_held_out = spread_bodies.reference_training(TRAINING)
    # Every step clipped, by the norm of the whole model counting the head once.
    assert all(n > spread_bodies.MAX_NORM for n in ref_norms), ref_norms
    for r in per_rank:
        for got, want in zip(r["losses"], ref_losses):
            assert abs(got - want) <= TOLERANCE * abs(want), (r["stage"], got, want)
        for got, want in zip(r["norms"], ref_norms):
            assert abs(got - want) <= TOLERANCE * want, (r["stage"], got, want)
        # Trainer.evaluate on the trainer's own plans (PlanConfig.spread_head) of new batches.
        error = abs(r["held_out_loss"] - ref_held_out)
        assert error <= TOLERANCE * ref_held_out, (r["stage"], r["held_out_loss"], ref_held_out)
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
    initial = spread_bodies.reference_training([])[2]
    assert all(not torch.equal(ref_params[n], initial[n]) for n in HEAD_NAMES)


# Two stages run by two sequence-parallel ranks each, or by two data replicas (each planning and
# spreading its share of the batch): the head's gradient is summed over all four ranks.
LAYOUTS = {"sequence": dict(sequence=2), "data": dict(data=2)}
LAYOUT_CASES = [
    case(
        "split-round-robin-recompute",
        [700, 300, 40],
        dict(CHUNKFLOW, heads="round-robin", recompute="pattern"),
    ),
    case("mix-first", test_pipeline.MIX, dict(method="epp", heads="first"), seed=7),
]


@pytest.mark.parametrize("layout", sorted(LAYOUTS))
def test_spread_head_on_sequence_ranks_and_replicas(references, layout):
    per_rank = check_all_ok(
        run_ranks(
            "spread_bodies:layout_parity",
            4,
            dict(cases=LAYOUT_CASES, parallel=LAYOUTS[layout]),
            timeout_s=300,
        )
    )
    for index, c in enumerate(LAYOUT_CASES):
        records = [r[index] for r in per_rank]
        assert any(0 <= h < 1 for r in records for h in r["heads"]), c["name"]
        ref_loss, ref_grads = references(c)
        by_name: dict[str, list[torch.Tensor]] = {}
        for r in records:
            assert abs(r["loss"] - ref_loss) <= TOLERANCE * abs(ref_loss), (c["name"], r["stage"])
            for n, g in r["grads"].items():
                by_name.setdefault(n, []).append(g)
        assert set(by_name) == set(ref_grads)
        for n, grads in by_name.items():
            # Every rank holding a parameter holds the same summed gradient: the head's on all
            # four ranks, a layer's on its stage's two.
            assert len(grads) == (4 if n in HEAD_NAMES else 2), n
            assert all(torch.equal(g, grads[0]) for g in grads), (c["name"], n)
            error = bodies.relative_error(grads[0], ref_grads[n])
            assert error < TOLERANCE, (c["name"], n, error)


def test_spread_head_with_cpp_stages(references):
    """The C++ LlamaStage's head replica on the first stage (models.cpp.build_stage)."""
    cases = [
        CASES[CASE_INDEX["split-round-robin"]],
        CASES[CASE_INDEX["packed-round-robin"]],
        CASES[CASE_INDEX["planner-seq1f1b-zero-bubble"]],
    ]
    body_cases = [{k: v for k, v in c.items() if k != "expect"} for c in cases]
    per_rank = check_all_ok(
        run_ranks("spread_bodies:parity", 2, dict(cases=body_cases, cpp_stages=True), 300)
    )
    for index, c in enumerate(cases):
        records = [r[index] for r in per_rank]
        check_expectations(c, records, 2)
        bodies.assert_matches_unpipelined(
            {r["stage"]: r["loss"] for r in records},
            spread_grads(records),
            *references(c),
            TOLERANCE,
        )


def test_a_stage_without_the_head_is_named():
    per_rank = check_all_ok(run_ranks("spread_bodies:missing_head", 2, {}, timeout_s=120))
    first, last = per_rank
    for r in per_rank:
        kind, message = r["trainer_refuses"]
        assert kind == "BatchError" and "stages [0]" in message and "spread_head=True" in message
        kind, message = r["factory_without_head"]
        assert "stage 0" in message and "without the final norm and the LM head" in message
    assert first["good_loss"] == last["good_loss"]
    # The executor on its own: stage 0 names itself, the chunk and the fix; the last stage,
    # waiting for stage 0's activation, names it once its timeout runs out.
    kind, message = first["executor_refuses"]
    assert kind == "Error" and "stage 0" in message and "chunk 0" in message, message
    assert "no head" in message and "spread_head=True" in message, message
    kind, message = last["executor_refuses"]
    assert kind == "PeerError" and "rank 0 (stage 0)" in message, message


def same_state(a: dict, b: dict, names=None) -> bool:
    """Weights and optimizer state (by parameter name) bitwise equal, over `names` or all."""
    for part in ("weights", "optimizer"):
        keys = set(a[part]) if names is None else set(names)
        if not keys <= set(b[part]) or not keys <= set(a[part]):
            return False
        for n in keys:
            x, y = a[part][n], b[part][n]
            if part == "weights":
                if not torch.equal(x, y):
                    return False
            elif set(x) != set(y) or not all(torch.equal(x[k], y[k]) for k in x):
                return False
    return True


def test_checkpoint_keeps_one_head(tmp_path):
    """Every replica saves the head under the same names (model/norm.weight, ...), which DCP
    writes once; any stage loading it reads that one copy, with or without spread head."""
    first, last = check_all_ok(
        run_ranks(
            "spread_bodies:checkpoint_round_trip", 2, dict(directory=str(tmp_path)), timeout_s=300
        )
    )
    assert first["stage"] == 0 and last["stage"] == 1
    for r in (first, last):
        assert same_state(r["saved"], r["spread_loaded"])
    # The replicas were equal when saved, and each key was written once.
    assert same_state(first["saved"], last["saved"], HEAD_NAMES)
    # A trainer without spread head: the head on the last stage only, loaded from that copy.
    assert not set(HEAD_NAMES) & set(first["plain_loaded"]["weights"])
    assert same_state(last["saved"], last["plain_loaded"])
    # A spread-head trainer from a plain checkpoint: every stage's replica is the last stage's.
    for r in (first, last):
        assert same_state(last["plain_saved"], r["from_plain"], HEAD_NAMES)
    assert same_state(first["plain_saved"], first["from_plain"])


@pytest.mark.parametrize("world", [2, 4])
def test_measured_activation_memory_within_the_prediction(runs, world, capsys):
    """The simulator's prediction with the heads where the plan puts them (an H's logits on its
    stage while it runs; the last stage keeps counting every chunk's logits) bounds each
    stage's measured peak, within test_pipeline's bounds. Printed per case and stage."""
    rows = [
        (c["name"], r[CASE_INDEX[c["name"]]]["stage"], r[CASE_INDEX[c["name"]]]["stats"])
        for c in CASES
        for r in runs(world)
    ]
    with capsys.disabled():
        print(f"\n{world} stages, spread head: measured / predicted activation memory")
        for name, stage, stats in rows:
            print(f"  {name:40s} stage {stage}: {stats['activation_ratio']:.3f}")
    ratios = [stats["activation_ratio"] for _, _, stats in rows]
    assert max(ratios) <= test_pipeline.UPPER, max(ratios)
    assert min(ratios) >= test_pipeline.FLOOR, min(ratios)


def test_head_messages_keep_their_order_on_a_group_of_their_own():
    """NCCL matches the messages between two ranks in issue order, whatever their tags. With
    the spread head, the last stage and the one before it exchange two kinds of [rows, hidden]
    messages each way, which a schedule need not send in the order they are received: on one
    group that would swap them, which the executor refuses on NCCL. The trainer puts the head's
    messages on a group of their own (Layout.head_group), where every (sender, receiver) carries
    one kind and the validated schedules are always in order."""
    from infinipipe import _C
    from infinipipe.planning.cost_model import model_shape_json

    config = bodies.model_config("float64")
    conflicts, plans = [], 0
    for split in ([4, 4], [2, 2, 2, 2]):
        cost = _C.plan.CostModel.analytic(model_shape_json(config, config.dtype), "cpu", split)
        given = _C.plan.build_plan(
            WAVES, OVERLAPPED_WAVES["chunks"], OVERLAPPED_WAVES["waves"], cost, overlap_waves=True
        )
        candidates = [given] + [spread_bodies.spread(given, h) for h in ("first", "none-odd")]
        for lengths in (SHORT, test_pipeline.MIX):
            for method in ("epp", "seq1f1b", "batch", "chunkflow"):
                for spread_head in (False, True):
                    candidates.append(
                        _C.plan.plan_step(
                            lengths,
                            cost,
                            2**30,
                            method,
                            k=2,
                            token_cap=max(lengths),
                            chunk_tokens=128,
                            spread_head=spread_head,
                        )
                    )
        for plan in candidates:
            plans += 1
            assert _C.runtime.message_order_conflict(plan, heads_apart=True) == "", plan
            heads = spread_bodies.planned_heads(plan)
            conflict = _C.runtime.message_order_conflict(plan)
            if all(h < 0 for h in heads):
                assert conflict == "", plan  # one kind per pair and direction
            elif conflict:
                conflicts.append(conflict)
    # On one group some spread schedules would exchange a head message with a pipe message.
    assert any("SEND_H" in c and "RECV_B" in c for c in conflicts), conflicts
    assert plans >= 30
