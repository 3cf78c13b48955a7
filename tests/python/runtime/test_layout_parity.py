"""The parallel layout through the trainer, on real processes (CPU, Gloo), against the
unpipelined model: pipeline 2 x data 2 and pipeline 2 x sequence 2 (4 processes), and
pipeline 2 x sequence 2 x data 2 (8 processes).

The batch is split over the replicas by predicted cost, each replica plans and runs its share,
sequence ranks run their rows of every chunk, and every stage's gradients are summed over its
gradient group. The step's loss and every parameter's gradient must equal the unpipelined
model's on the whole batch (float64 within 1e-9, float32 within 1e-4, relative to the largest
reference value) on every replica and sequence rank; after AdamW steps (without and with
ZeRO-1) every replica holds the same parameters, equal to the unpipelined model's after the
same steps, and ZeRO-1 halves each rank's optimizer state.
"""

from __future__ import annotations

import bodies
import pytest
import torch
from launcher import check_all_ok, run_ranks

from infinipipe.models import llama

TOLERANCE = {"float64": 1e-9, "float32": 1e-4}
MIX = [600, 300, 40, 30, 20, 10]  # one long sequence, which one replica gets alone
PRESSURE = [700, 300, 260, 30, 20]


def case(name, dtype, lengths, plan, seed=0):
    return dict(name=f"{name}-{dtype}", dtype=dtype, lengths=lengths, plan=plan, seed=seed)


CASES = [
    case("epp", "float64", MIX, dict(method="epp", baseline_chunkings=False), seed=7),
    # The long sequence in slices carrying K/V across chunks, every recompute count.
    case("sliced-checkpoint", "float64", MIX, dict(epp_k=4, recompute="pattern"), seed=7),
    case("chunkflow", "float64", PRESSURE, dict(method="chunkflow", chunk_tokens=128)),
    # EPP's chunks at K = 2, one wave per group of chunks sharing a sequence: two waves on the
    # replica holding [300, 260, 20], each carrying a split sequence's K/V.
    case("waves", "float64", PRESSURE, dict(epp_k=2, wave_per_group=True)),
    case("planner-checkpoint", "float64", PRESSURE, dict(search="recompute")),
    case("sliced-checkpoint", "float32", MIX, dict(epp_k=4, recompute="pattern"), seed=7),
    # Zero bubble: each backward split into B and W (the all-to-alls run once, in B).
    case(
        "zero-bubble-sliced-checkpoint",
        "float64",
        MIX,
        dict(epp_k=4, recompute="pattern", zero_bubble="h1"),
        seed=7,
    ),
]

DATA2 = dict(pipeline=2, data=2)
LAYOUTS = {  # name: (degrees, processes)
    "pipeline2-data2": (DATA2, 4),
    "pipeline2-sequence2": (dict(pipeline=2, sequence=2), 4),
    "pipeline2-sequence2-data2": (dict(pipeline=2, sequence=2, data=2), 8),
}
# The 8-process layout is the slow tier's: each of its parts runs in the 4-process ones.
LAYOUT_PARAMS = [
    pytest.param(name, marks=pytest.mark.slow) if processes > 4 else name
    for name, (_, processes) in LAYOUTS.items()
]


def reference(dtype: str, lengths: list[int], seed: int) -> tuple[float, dict[str, torch.Tensor]]:
    model = llama.build_full_model(bodies.model_config(dtype))
    loss = llama.reference_loss(model, bodies.make_batch(lengths, seed))
    loss.backward()
    return loss.item(), {n: p.grad.clone() for n, p in model.named_parameters()}


def relative_error(value: torch.Tensor, ref: torch.Tensor) -> float:
    return float((value - ref).abs().max() / ref.abs().max())


@pytest.fixture(scope="module")
def layout_runs():
    """Per layout, every rank's records of every case (one launch per layout)."""
    cache = {}

    def get(name: str) -> list[list[dict]]:
        if name not in cache:
            degrees, processes = LAYOUTS[name]
            args = dict(parallel=degrees, cases=[dict(c) for c in CASES])
            cache[name] = check_all_ok(
                run_ranks("layout_bodies:parity", processes, args, timeout_s=600)
            )
        return cache[name]

    return get


@pytest.mark.parametrize("layout", LAYOUT_PARAMS)
def test_every_rank_matches_the_unpipelined_model(layout, layout_runs):
    """Loss on every rank; every parameter's gradient on every (replica, sequence rank): each
    holds the whole gradient after the step's reduction."""
    runs = layout_runs(layout)
    data = LAYOUTS[layout][0].get("data", 1)
    for index, c in enumerate(CASES):
        records = [rank[index] for rank in runs]
        ref_loss, ref_grads = reference(c["dtype"], c["lengths"], c["seed"])
        tol = TOLERANCE[c["dtype"]]
        # The replicas' shares are the batch, each sequence once.
        shares = {r["replica"]: r["lengths"] for r in records}
        assert len(shares) == data and all(shares.values()), (c["name"], shares)
        assert sorted(n for share in shares.values() for n in share) == sorted(c["lengths"])
        for r in records:
            assert r["tokens"] == sum(c["lengths"])
            assert abs(r["loss"] - ref_loss) <= tol * abs(ref_loss), (c["name"], r["loss"])
        holders = {(r["replica"], r["sequence_rank"]) for r in records}
        for holder in holders:
            grads = {}
            for r in records:
                if (r["replica"], r["sequence_rank"]) == holder:
                    grads.update(r["grads"])
            assert grads.keys() == ref_grads.keys()
            for name, ref in ref_grads.items():
                err = relative_error(grads[name], ref)
                assert err <= tol, f"{layout}, {c['name']}, {holder}, {name}: {err:.3g}"


def test_the_cases_exercise_what_they_name(layout_runs):
    by_name = {}
    for rank in layout_runs("pipeline2-data2"):
        for r in rank:
            by_name.setdefault(r["name"], []).append(r)
    sliced = by_name["sliced-checkpoint-float64"]
    assert any("split" in r["kinds"] for r in sliced)
    assert all(r["recomputes"] for r in sliced if r["stage"] == 0)
    assert any(r["waves"] >= 2 for r in by_name["waves-float64"])
    assert any(r["recomputes"] for r in by_name["planner-checkpoint-float64"])
    # Every stage but the first ran its B and W apart; no case without zero bubble did.
    for r in by_name["zero-bubble-sliced-checkpoint-float64"]:
        assert r["unsplit_graphs"] == 0 and (r["split_graphs"] > 0) == (r["stage"] > 0), r
    assert all(r["split_graphs"] == 0 for n, rs in by_name.items() if "zero" not in n for r in rs)


def reference_steps(batches: list[list[int]], lr: float) -> dict[str, torch.Tensor]:
    model = llama.build_full_model(bodies.model_config("float64"))
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr)
    for seed, lengths in enumerate(batches):
        optimizer.zero_grad()
        llama.reference_loss(model, bodies.make_batch(lengths, seed)).backward()
        optimizer.step()
    return {n: p.detach().clone() for n, p in model.named_parameters()}


def test_optimizer_steps_keep_every_replica_equal_to_the_unpipelined_model():
    """Without and with ZeRO-1: the same parameters as the unpipelined model after three AdamW
    steps, bitwise the same on both replicas; ZeRO-1 splits each stage's state in two. Then
    closed, every rank's trainer refuses to run."""
    batches, lr = [MIX, PRESSURE, [90, 80, 70, 5]], 1e-2
    expected = reference_steps(batches, lr)
    state_bytes = {}
    for zero in (0, 1):
        ranks = check_all_ok(
            run_ranks(
                "layout_bodies:optimizer_steps",
                4,
                dict(parallel=DATA2, zero=zero, batches=batches, lr=lr),
                timeout_s=300,
            )
        )
        for replica in (0, 1):
            params = {}
            for r in ranks:
                if r["replica"] == replica:
                    params.update(r["params"])
            for name, ref in expected.items():
                err = relative_error(params[name], ref)
                assert err <= 1e-9, f"zero {zero}, replica {replica}, {name}: {err:.3g}"
        for stage in (0, 1):
            a, b = [r["params"] for r in ranks if r["stage"] == stage]
            assert all(torch.equal(a[n], b[n]) for n in a), f"zero {zero}, stage {stage}"
        state_bytes[zero] = [r["state_bytes"] for r in ranks]
        # Closed, a trainer shuts its groups down and refuses to run (it would skip the
        # gradient sum over replicas), on every rank, without a hang.
        assert all(not r["groups_left"] for r in ranks)
        # ... and leaves no thread of its own (Gloo's, the failure board's, planning ahead):
        # closed but not deleted, once the default group it made is destroyed, each rank runs
        # the threads it ran before the trainer (docs/runtime.md, "Exits").
        for r in ranks:
            before, running, after = r["threads"]
            assert running > before and after == before, f"zero {zero}: {r['threads']}"
        assert all("trainer was closed" in r["after_close"] for r in ranks), ranks
    # Per stage (ranks s and 2 + s: the stage in each replica), the two shards hold the whole
    # state between them, and neither more than three quarters of it.
    whole, sharded = state_bytes[0], state_bytes[1]
    for stage in (0, 1):
        ranks = [stage, 2 + stage]
        assert whole[ranks[0]] == whole[ranks[1]] > 0
        assert sum(sharded[r] for r in ranks) == whole[ranks[0]], (whole, sharded)
        assert max(sharded[r] for r in ranks) < 0.75 * whole[ranks[0]], (whole, sharded)


@pytest.mark.parametrize("layout", LAYOUT_PARAMS)
def test_measured_activation_memory_per_rank_against_prediction(layout, layout_runs, capsys):
    """Each rank's peak activation bytes (MemoryMeter, as tests/python/runtime/test_pipeline.py
    measures them) over the plan's per-rank prediction (the cost model of the layout: a chunk's
    activations and K/V buffers over the sequence ranks)."""
    rows = [
        (r["name"], r["stage"], r["replica"], r["sequence_rank"], r["memory"])
        for rank in layout_runs(layout)
        for r in rank
    ]
    ratios = [m["activation_ratio"] for *_, m in rows]
    with capsys.disabled():
        print(f"\n{layout}: measured / predicted activation bytes per (case, rank)")
        for name, stage, replica, seq, m in rows:
            print(
                f"  {name:26s} stage {stage} replica {replica} sequence rank {seq}: "
                f"{m['measured_activation_bytes']:>9d} / {m['predicted_activation_bytes']:>11.0f}"
                f" = {m['activation_ratio']:.3f}"
            )
        print(
            f"  min {min(ratios):.3f}, median {sorted(ratios)[len(ratios) // 2]:.3f}, "
            f"max {max(ratios):.3f}"
        )
    assert all(r <= 1.02 for r in ratios), max(ratios)
    assert sorted(ratios)[len(ratios) // 2] >= 0.90
