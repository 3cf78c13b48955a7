"""Pipelined steps on real processes (CPU, Gloo) against the unpipelined model.

For 2 and 4 stages, every case runs as one trainer step in its own plan; the test compares the
step's loss (returned on every rank) and every parameter's gradient (each held by one rank) with
build_full_model's on the same batch and seed: relative error under 1e-9 in float64 and 1e-4
in float32 (max |pipelined - reference| / max |reference| per parameter). The same runs measure
each stage's peak activation memory (MemoryMeter) against the plan's prediction.
"""

from __future__ import annotations

import math

import bodies
import pytest
import torch
from launcher import run_ranks, runs_by_world

from infinipipe.models import llama

TOLERANCE = {"float64": 1e-9, "float32": 1e-4}

SHORT = [5, 17, 33, 9, 24, 40, 12]
LONG = [700]
HYBRID = [600, 40, 25, 70, 13]
MIX = [600, 300, 40, 30, 20, 10]
WAVES = [300, 200, 40, 30, 20]
PRESSURE = [700, 300, 260, 30, 20]

# Chunks and waves given explicitly: three waves, one holding a split sequence and a hybrid.
GIVEN_WAVES = dict(
    chunks=[[(0, 0, 150)], [(0, 150, 300), (2, 0, 40)], [(1, 0, 200)], [(3, 0, 30), (4, 0, 20)]],
    waves=[[0, 1], [2], [3]],
)
# The same, each wave starting during the previous one's cool-down.
OVERLAPPED_WAVES = dict(GIVEN_WAVES, overlap_waves=True)


# EPP on the sequence processor's own chunks (not a baseline's chunking, which its search may
# prefer): the cases that check the chunk kinds it makes.
OWN = dict(method="epp", baseline_chunkings=False)


def case(name, dtype, lengths, plan, seed=0, **expect):
    return dict(
        name=f"{name}-{dtype}", dtype=dtype, lengths=lengths, plan=plan, seed=seed, expect=expect
    )


def mix_case(name, plan):
    """The MIX batch (seed 7) in float64 under one more plan: same gradients as every other."""
    return case(name, "float64", MIX, plan, seed=7, same_as="mix")


CASES = [
    case("short", "float64", SHORT, OWN, kinds={"packed"}, min_chunks=2),
    case(
        "long-sliced",
        "float64",
        LONG,
        dict(method="chunkflow", chunk_tokens=128),
        kinds={"split"},
        min_chunks=5,
    ),
    case("long-epp", "float64", [1024], OWN, kinds={"split"}, min_chunks=2),
    case("hybrid", "float64", HYBRID, OWN, has_kind="hybrid"),
    case(
        "given-waves",
        "float64",
        WAVES,
        GIVEN_WAVES,
        min_waves=3,
        has_kind="hybrid",
        overlapped=False,
    ),
    case(
        "given-waves-overlapped", "float64", WAVES, OVERLAPPED_WAVES, min_waves=3, overlapped=True
    ),
    case("planner-waves", "float64", PRESSURE, dict(search="waves"), min_waves=2),
    case("planner-checkpoint", "float64", SHORT, dict(search="recompute"), recompute=True),
    case(
        "edited-checkpoint-sliced",
        "float64",
        LONG,
        dict(method="chunkflow", chunk_tokens=128, recompute="pattern"),
        recompute=True,
    ),
    case(
        "edited-checkpoint-hybrid",
        "float64",
        HYBRID,
        dict(OWN, recompute="pattern"),
        recompute=True,
        has_kind="hybrid",
    ),
    case(
        "edited-checkpoint-waves",
        "float64",
        WAVES,
        dict(GIVEN_WAVES, recompute="pattern"),
        recompute=True,
        min_waves=3,
    ),
    case(
        "edited-checkpoint-overlapped",
        "float64",
        WAVES,
        dict(OVERLAPPED_WAVES, recompute="pattern"),
        recompute=True,
        min_waves=3,
        overlapped=True,
    ),
    # One batch, many plans: every method and several K must give the same gradients.
    mix_case("mix-epp-k1", dict(method="epp", max_k=1)),
    mix_case("mix-epp", dict(method="epp")),
    mix_case("mix-epp-k2", dict(epp_k=2)),
    mix_case("mix-epp-k4", dict(epp_k=4)),
    mix_case("mix-epp-pressure", dict(search="recompute")),
    mix_case("mix-batch", dict(method="batch")),
    mix_case("mix-seq1f1b-k2", dict(method="seq1f1b", k=2)),
    mix_case("mix-seq1f1b-k4", dict(method="seq1f1b", k=4)),
    mix_case("mix-chunkflow-128", dict(method="chunkflow", chunk_tokens=128)),
    mix_case("mix-chunkflow-256", dict(method="chunkflow", chunk_tokens=256)),
    mix_case("mix-seq1f1b-k4-zero-bubble", dict(method="seq1f1b", k=4, zero_bubble="h1")),
    # Zero bubble (docs/design.md, "Zero bubble"): each backward split into B and W actions.
    case("zero-bubble-short", "float64", SHORT, dict(OWN, zero_bubble="h1"), zero_bubble=True),
    case(
        "zero-bubble-long-sliced",
        "float64",
        LONG,
        dict(method="chunkflow", chunk_tokens=128, zero_bubble="h1"),
        kinds={"split"},
        zero_bubble=True,
    ),
    case(
        "zero-bubble-checkpoint-hybrid",
        "float64",
        HYBRID,
        dict(OWN, recompute="pattern", zero_bubble="h1"),
        recompute=True,
        has_kind="hybrid",
        zero_bubble=True,
    ),
    case(
        "zero-bubble-checkpoint-overlapped",
        "float64",
        WAVES,
        dict(OVERLAPPED_WAVES, recompute="pattern", zero_bubble="h1"),
        recompute=True,
        min_waves=3,
        overlapped=True,
        zero_bubble=True,
    ),
    # ZB-H2 (the longer warm-up with forwards' receives posted further ahead): split sequences
    # carrying K/V, and recompute with overlapped waves.
    case(
        "zero-bubble-h2-long-sliced",
        "float64",
        LONG,
        dict(method="chunkflow", chunk_tokens=128, zero_bubble="h2"),
        kinds={"split"},
        zero_bubble=True,
    ),
    case(
        "zero-bubble-h2-checkpoint-overlapped",
        "float64",
        WAVES,
        dict(OVERLAPPED_WAVES, recompute="pattern", zero_bubble="h2"),
        recompute=True,
        min_waves=3,
        overlapped=True,
        zero_bubble=True,
    ),
    # float32
    case("short", "float32", SHORT, OWN),
    case("long-sliced", "float32", LONG, dict(method="chunkflow", chunk_tokens=128)),
    case(
        "edited-checkpoint-hybrid",
        "float32",
        HYBRID,
        dict(OWN, recompute="pattern"),
        recompute=True,
    ),
    case("given-waves", "float32", WAVES, GIVEN_WAVES, min_waves=3),
    case(
        "given-waves-overlapped", "float32", WAVES, OVERLAPPED_WAVES, min_waves=3, overlapped=True
    ),
    case("mix-seq1f1b-k4", "float32", MIX, dict(method="seq1f1b", k=4), seed=7),
]
# The lean layer (LlamaConfig.lean_layer): its norms' and SwiGLU's own backwards, recompute and
# the B/W split included.
LEAN = ("zero-bubble-checkpoint-hybrid-float64", "long-sliced-float32")
CASES += [
    dict(c, name=f"{c['name']}-lean", dtype=f"{c['dtype']}-lean")
    for c in CASES
    if c["name"] in LEAN
]
CASE_INDEX = {c["name"]: i for i, c in enumerate(CASES)}


@pytest.fixture(scope="module")
def runs():
    """Per world size, every rank's results of every case (one launch per world size)."""
    return runs_by_world("bodies:parity", CASES)


@pytest.fixture(scope="module")
def references():
    """Per case, the unpipelined model's loss and gradients."""
    cache = {}

    def get(c: dict) -> tuple[float, dict[str, torch.Tensor]]:
        key = (c["dtype"], tuple(c["lengths"]), c["seed"])
        if key not in cache:
            model = llama.build_full_model(bodies.model_config(c["dtype"]))
            batch = bodies.make_batch(c["lengths"], c["seed"])
            loss = llama.reference_loss(model, batch)
            loss.backward()
            cache[key] = (loss.item(), {n: p.grad.clone() for n, p in model.named_parameters()})
        return cache[key]

    return get


def gathered_grads(per_rank: list[dict]) -> dict[str, torch.Tensor]:
    grads: dict[str, torch.Tensor] = {}
    for r in per_rank:
        for name, g in r["grads"].items():
            assert name not in grads, f"parameter {name} is on two stages"
            grads[name] = g
    return grads


def check_expectations(c: dict, per_rank: list[dict]) -> None:
    """The case really exercises what its name says."""
    expect, first = c["expect"], per_rank[0]
    kinds, summary = first["kinds"], first["summary"]
    if "kinds" in expect:
        assert set(kinds) == expect["kinds"], kinds
    if "has_kind" in expect:
        assert expect["has_kind"] in kinds, kinds
    if "min_chunks" in expect:
        assert len(kinds) >= expect["min_chunks"], kinds
    if "min_waves" in expect:
        assert summary["waves"] >= expect["min_waves"], summary
    if "overlapped" in expect:
        assert summary["waves_overlap"] == expect["overlapped"], summary
    if "zero_bubble" in expect or c["plan"].get("zero_bubble"):
        # Every stage's list has a W per chunk, and every stage but the first (whose B runs its
        # backward whole: it sends no input gradient) ran its graphs' B and W apart.
        for r in per_rank:
            assert r["stats"]["unsplit_graphs"] == 0, r["stage"]
            assert (r["stats"]["split_graphs"] > 0) == (r["stage"] > 0), r["stage"]
            assert r["stats"]["weight_s"] > 0 or r["stage"] == 0, r["stage"]
        mode = c["plan"].get("zero_bubble", "h1")
        assert f"zero-bubble={mode}" in summary["setting"], summary["setting"]
    if expect.get("recompute"):
        table = first["recompute"]
        flat = [n for row in table for n in row]
        assert any(n > 0 for n in flat), table
        assert sum(r["stats"]["recomputed_layers"] for r in per_rank) == sum(flat)


@pytest.mark.parametrize("world", [2, 4])
@pytest.mark.parametrize("name", [c["name"] for c in CASES])
def test_pipelined_step_matches_unpipelined_model(runs, references, world, name):
    c = CASES[CASE_INDEX[name]]
    per_rank = [rank_results[CASE_INDEX[name]] for rank_results in runs(world)]
    check_expectations(c, per_rank)
    hashes = {r["summary"]["hash"] for r in per_rank}
    assert len(hashes) == 1, hashes
    # Every rank returns the all-reduced loss.
    bodies.assert_matches_unpipelined(
        {r["stage"]: r["loss"] for r in per_rank},
        gathered_grads(per_rank),
        *references(c),
        TOLERANCE[c["dtype"].partition("-")[0]],  # "float64-lean": as float64
    )


@pytest.mark.parametrize("world", [2, 4])
def test_every_plan_of_one_batch_gives_the_same_gradients(runs, world):
    names = [c["name"] for c in CASES if c["expect"].get("same_as") == "mix"]
    results = {n: [r[CASE_INDEX[n]] for r in runs(world)] for n in names}
    plans = {n: res[0]["summary"] for n, res in results.items()}
    # The plans really differ: every method, several K. (The planner's own EPP plan may pick
    # K=1, the same plan as max_k=1.)
    assert len({p["hash"] for p in plans.values()}) >= len(names) - 1, plans
    assert {p["method"] for p in plans.values()} == {"epp", "batch", "seq1f1b", "chunkflow"}
    epp_chunk_counts = {p["chunks"] for p in plans.values() if p["method"] == "epp"}
    assert len(epp_chunk_counts) >= 3, plans
    base = gathered_grads(results[names[0]])
    for n in names[1:]:
        grads = gathered_grads(results[n])
        worst = max(bodies.relative_error(grads[p], base[p]) for p in base)
        assert worst < 1e-9, f"{n} vs {names[0]}: {worst:.3g}"


# --------------------------------------------------------------------------------------------
# Memory


def memory_table(per_case: list[list[dict]]) -> list[tuple[str, int, dict]]:
    rows = []
    for c in CASES:
        for r in per_case:
            s = r[CASE_INDEX[c["name"]]]
            rows.append((c["name"], s["stage"], s["stats"]))
    return rows


# The prediction must bound the measurement (up to rounding of what the meter samples: 2%) and
# stay close to it. The floor is set by what the model counts conservatively: a split sequence's
# dK/dV for all of the stage's layers from its first backward (the kernel allocates them layer by
# layer while that backward frees the chunk's activations), and a fully checkpointed chunk's
# recompute as one full layer on top of all kept inputs.
# Observed over 150 (case, stage) runs: min 0.80, median 0.98, max 1.000; the floor leaves room
# for plans that checkpoint more (each plan change moves these cases).
UPPER, FLOOR, MEDIAN_FLOOR = 1.02, 0.70, 0.90
# A split B's moment (zero bubble) counts what W keeps on top of what a whole backward holds:
# tight where every layer is recomputed, but where none is it counts the kept inputs twice (they
# are among the layers' saved tensors until B ends), as the bound must hold either way.
# Observed: 0.65-1.00.
ZERO_BUBBLE_FLOOR = 0.60


@pytest.mark.parametrize("world", [2, 4])
def test_measured_activation_memory_against_prediction(runs, world, capsys):
    """Peak bytes a stage holds for activations during the step (autograd's saved tensors, each
    storage once, parameters excluded, plus K/V buffers with their dK/dV accumulators and
    checkpointed layers' inputs) over the plan's prediction of the same quantity: the stage's
    predicted peak without its model state and without the backward workspace's gradients,
    which saved-tensor hooks cannot see (docs/runtime.md, "Memory"). Printed for every case and
    stage."""
    rows = memory_table(runs(world))
    ratios = [stats["activation_ratio"] for _, _, stats in rows]
    median = sorted(ratios)[len(ratios) // 2]
    with capsys.disabled():
        print(f"\n{world} stages: measured / predicted activation memory per (case, stage)")
        for name, stage, stats in rows:
            print(
                f"  {name:34s} stage {stage}: {stats['measured_activation_bytes']:>10d} B "
                f"(saved {stats['measured_saved_bytes']}, held {stats['measured_held_bytes']})"
                f" / {stats['predicted_activation_bytes']:>12.0f} B = "
                f"{stats['activation_ratio']:.3f}"
            )
        print(f"  min {min(ratios):.3f}, median {median:.3f}, max {max(ratios):.3f}")
    assert all(math.isfinite(r) and r > 0 for r in ratios)
    over = [
        (name, stage, round(s["activation_ratio"], 4))
        for name, stage, s in rows
        if s["activation_ratio"] > UPPER
    ]
    assert not over, f"measured above the prediction: {over}"
    under = [
        (name, stage, round(s["activation_ratio"], 4))
        for name, stage, s in rows
        if s["activation_ratio"] < (ZERO_BUBBLE_FLOOR if "zero-bubble" in name else FLOOR)
    ]
    assert not under, f"prediction not tight (below {FLOOR}): {under}"
    assert median >= MEDIAN_FLOOR, median


@pytest.mark.parametrize("world", [2, 4])
def test_a_ranks_step_times_nest(runs, world):
    """StepStats: a rank's compute and waits fit in the time until its last action and sends were
    done (actions_s), which fits in its step (total_s, the closing collectives too); a stage
    that ends early waits there, outside both compute and waits."""
    rows = memory_table(runs(world))
    for name, stage, s in rows:
        inside = s["forward_s"] + s["backward_s"] + s["wait_s"]
        assert 0 < inside <= s["actions_s"] * (1 + 1e-6) + 1e-6, (name, stage, s)
        assert s["actions_s"] <= s["total_s"] * (1 + 1e-6) + 1e-6, (name, stage, s)
    assert any(s["total_s"] > s["actions_s"] for _, _, s in rows)


def test_agreement_gather_returns_every_ranks_bytes_in_rank_order():
    # The step's agreement goes through this C++ all-gather (no Python tensor is left with the
    # backend, which could abort the process at exit).
    results = run_ranks("bodies:gather_text", 3, {}, timeout_s=120)
    expected = [bytes([r, 0, 255]) * r for r in range(3)]
    for r in results:
        assert r.returncode == 0 and r.error is None, r.describe()
        assert r.value == expected
