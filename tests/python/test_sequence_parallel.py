"""Ulysses sequence parallelism in the executor (docs/design.md, "Executor"): a pipeline stage run
by d_s ranks, each holding its share of every chunk's rows, attention exchanging heads.

Real Gloo processes (tests/python/runtime/launcher.py) run the Python LlamaStage through
_C.runtime.Executor directly, ranks ordered SP innermost (rank = stage * d_s + j): pipeline 1 x
SP 2 and pipeline 2 x SP 2, float64. Each rank sums its parameter gradients over its SP group
(the trainer's job in training); the loss and every gradient must equal the unpipelined
single-process model within 1e-9. The plans hold a sequence split in three slices carrying K/V
across chunks, a hybrid chunk, packed chunks, a one-token chunk (one rank holds only padding),
token counts that d_s does not divide, three waves, and recompute of every count; evaluate()
gives the same loss. Also: the row bookkeeping, a degree that does not divide kv_heads, and a
killed SP peer named by a PeerError.

The rank bodies live in this module (the launcher imports it by name in each rank).
"""

from __future__ import annotations

import os
import signal
import sys
import time
from pathlib import Path

import pytest
import torch

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE / "runtime"))

from launcher import check_all_ok, run_ranks  # noqa: E402

from infinipipe import _C  # noqa: E402
from infinipipe.models import cpp as cpp_models  # noqa: E402
from infinipipe.models import llama  # noqa: E402
from infinipipe.models.stage_protocol import LlamaStageAdapter  # noqa: E402
from infinipipe.planning.cost_model import model_shape_json  # noqa: E402

MODEL = dict(vocab=97, hidden=32, layers=4, heads=4, kv_heads=2, ffn=64)
LENGTHS = [23, 9, 6, 5, 3]
# Sequence 0 in three slices (K/V across chunks; 10, 7 and 6 + 5 rows), sequence 4 in two (one
# token, then two), sequences 1 and 2 packed: 10, 7, 11, 15, 1 and 2 rows.
CHUNKS = [
    [(0, 0, 10)],
    [(0, 10, 17)],
    [(0, 17, 23), (3, 0, 5)],
    [(1, 0, 9), (2, 0, 6)],
    [(4, 0, 1)],
    [(4, 1, 3)],
]
WAVES = [[0, 1, 2], [3], [4, 5]]
TOLERANCE = 1e-9


def _env() -> dict:
    paths = [str(HERE.parents[1] / "python"), str(HERE / "runtime"), str(HERE)]
    return {"PYTHONPATH": os.pathsep.join(paths + [os.environ.get("PYTHONPATH", "")])}


def _config(**changes) -> llama.LlamaConfig:
    return llama.LlamaConfig(**dict(MODEL, **changes), dtype=torch.float64)


def _batch() -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(5)
    return [torch.randint(0, MODEL["vocab"], (n,), generator=g) for n in LENGTHS]


def _layout(pipeline: int, sequence: int):
    """This rank's stage and SP rank, its pipeline's ranks, and its stage's SP group."""
    import torch.distributed as dist

    dist.init_process_group("gloo")
    rank = dist.get_rank()
    stage, j = divmod(rank, sequence)
    groups = [dist.new_group([s * sequence + i for i in range(sequence)]) for s in range(pipeline)]
    return stage, j, [s * sequence + j for s in range(pipeline)], groups[stage]


def _executor(config, stage, pipeline, stage_ranks, group, timeout_s=60.0, cpp=False):
    """The stage (the Python LlamaStage, or the C++ one) and its executor."""
    import torch.distributed as dist

    if cpp:
        module = cpp_models.build_stage(config, pipeline, stage, seed=0)
    else:
        module = llama.build_stage(config, pipeline, stage, seed=0)
    options = _C.runtime.ExecutorOptions(
        stage=stage,
        num_stages=pipeline,
        dtype=torch.float64,
        device=torch.device("cpu"),
        hidden=config.hidden,
        kv_heads=config.kv_heads,
        head_dim=config.head_dim,
        timeout_s=timeout_s,
        stage_ranks=stage_ranks,
    )
    executor = _C.runtime.Executor(
        module if cpp else LlamaStageAdapter(module),
        dist.group.WORLD,
        options,
        sequence_group=group,
    )
    return module, executor


def _plans(config, pipeline: int) -> dict:
    cost = _C.plan.CostModel.analytic(
        model_shape_json(config, torch.float64), "cpu", llama.even_layer_split(4, pipeline)
    )
    plans = {}
    plans["split_packed_waves"] = _C.plan.build_plan(LENGTHS, CHUNKS, WAVES, cost)
    recomputed = _C.plan.build_plan(LENGTHS, CHUNKS, WAVES, cost)
    recomputed.recompute = [
        [(stage + 2 * chunk) % (layers + 1) for chunk in range(recomputed.num_chunks)]
        for stage, layers in enumerate(recomputed.layers_per_stage)
    ]
    plans["recompute_pattern"] = recomputed
    # The planner's own plan: ChunkFlow's 8-token chunks (split and packed), one wave, and
    # every layer checkpointed.
    plans["chunkflow_uniform_recompute"] = _C.plan.plan_step(
        LENGTHS, cost, 1e12, "chunkflow", chunk_tokens=8, uniform_recompute=1
    )
    return plans


def parity_body(pipeline: int, sequence: int, cpp: bool = False, kv_heads: int = 2) -> dict:
    """Every plan as one step (gradients zeroed before each), then evaluate(); returns per plan
    the loss and, for this stage, every parameter's gradient summed over the SP group."""
    import torch.distributed as dist

    torch.manual_seed(0)
    stage, j, stage_ranks, group = _layout(pipeline, sequence)
    config = _config(kv_heads=kv_heads)
    module, executor = _executor(config, stage, pipeline, stage_ranks, group, cpp=cpp)
    assert (executor.sequence_rank, executor.sequence_size) == (j, sequence)
    batch = _batch()
    out = {}
    for name, plan in _plans(config, pipeline).items():
        for _, p in module.named_parameters():
            p.grad = None
        stats = executor.run(plan, batch)
        grads = {}
        for pname, p in module.named_parameters():
            g = p.grad.detach().clone()
            dist.all_reduce(g, group=group)
            grads[pname] = g
        out[name] = dict(
            loss=stats["loss"],
            grads=grads,
            kinds=list(plan.chunk_kinds),
            recompute=plan.recompute,
            all_to_all_bytes=stats["all_to_all_bytes"],
        )
        out[name + "/evaluate"] = dict(loss=executor.evaluate(plan, batch)["loss"])
    dist.barrier()
    return out


def kv_heads_body() -> tuple[str, str] | None:
    """A degree of 2 over a model with one K/V head: an error before any communication."""
    stage, _, stage_ranks, group = _layout(1, 2)
    try:
        _executor(_config(kv_heads=1), stage, 1, stage_ranks, group)
    except Exception as e:  # noqa: BLE001 - the test inspects it
        return (type(e).__name__, str(e))
    return None


def lost_peer_body() -> dict | None:
    """SP rank 1 dies (SIGKILL) once both executors exist; rank 0 then runs a step."""
    import torch.distributed as dist

    stage, j, stage_ranks, group = _layout(1, 2)
    config = _config()
    _, executor = _executor(config, stage, 1, stage_ranks, group, timeout_s=20.0)
    plan = _plans(config, 1)["split_packed_waves"]
    dist.barrier()
    if j == 1:
        os.kill(os.getpid(), signal.SIGKILL)
    time.sleep(0.5)
    started = time.monotonic()
    try:
        executor.run(plan, _batch())
    except _C.runtime.PeerError as e:
        return dict(message=str(e), rank=e.rank, elapsed_s=time.monotonic() - started)
    return None


# --------------------------------------------------------------------------------------------
# The tests


def _reference(kv_heads: int) -> tuple[float, dict[str, torch.Tensor]]:
    model = llama.build_full_model(_config(kv_heads=kv_heads), seed=0)
    loss = llama.reference_loss(model, _batch())
    loss.backward()
    return loss.item(), {n: p.grad.detach().clone() for n, p in model.named_parameters()}


def _relative(a: torch.Tensor, b: torch.Tensor) -> float:
    return ((a - b).abs().max() / b.abs().max().clamp_min(1e-300)).item()


@pytest.mark.parametrize(
    "pipeline,sequence,cpp,kv_heads",
    [(1, 2, False, 2), (2, 2, False, 2), (2, 2, True, 2), (1, 4, False, 4)],
    ids=["1x2", "2x2", "2x2-cpp", "1x4"],
)
def test_sequence_parallel_step_matches_unpipelined_model(pipeline, sequence, cpp, kv_heads):
    """The Python LlamaStage through PythonStageModule, and the C++ one (models/llama.h); SP 4
    over 4 K/V heads pads most chunks and leaves three ranks only padding on the one-token one."""
    ref_loss, ref_grads = _reference(kv_heads)
    values = check_all_ok(
        run_ranks(
            "test_sequence_parallel:parity_body",
            pipeline * sequence,
            args=dict(pipeline=pipeline, sequence=sequence, cpp=cpp, kv_heads=kv_heads),
            timeout_s=240,
            extra_env=_env(),
        )
    )
    first = values[0]["split_packed_waves"]
    assert {"split", "hybrid", "packed"} <= set(first["kinds"])
    assert any(n > 0 for row in values[0]["recompute_pattern"]["recompute"] for n in row)
    assert first["all_to_all_bytes"] > 0
    for name in values[0]:
        for rank, value in enumerate(values):
            assert abs(value[name]["loss"] - ref_loss) <= TOLERANCE * abs(ref_loss), (name, rank)
        if name.endswith("/evaluate"):
            continue
        # Every reference parameter is on exactly one stage; the SP ranks of a stage agree.
        seen = set()
        for rank, value in enumerate(values):
            for pname, grad in value[name]["grads"].items():
                error = _relative(grad, ref_grads[pname])
                assert error < TOLERANCE, (name, rank, pname, error)
                seen.add(pname)
        assert seen == set(ref_grads), name


def test_shard_rows_pad_and_split_a_chunk():
    slices = [_C.Slice(0, 17, 23, 23), _C.Slice(3, 0, 5, 5)]  # 11 rows
    rows = [_C.runtime.shard_rows(slices, 4, j) for j in range(4)]
    assert [(r["padded"], r["local"], r["first"], r["real"]) for r in rows] == [
        (12, 3, 0, 3),
        (12, 3, 3, 3),
        (12, 3, 6, 3),
        (12, 3, 9, 2),
    ]
    pieces = [[(p.seq, p.start, p.end) for p in r["pieces"]] for r in rows]
    assert pieces == [[(0, 17, 20)], [(0, 20, 23)], [(3, 0, 3)], [(3, 3, 5)]]
    # One token over two ranks: rank 1 holds only padding.
    one = [_C.runtime.shard_rows([_C.Slice(4, 0, 1, 3)], 2, j) for j in range(2)]
    assert [(r["local"], r["real"], len(r["pieces"])) for r in one] == [(1, 1, 1), (1, 0, 0)]
    # One rank: every row, the slices themselves.
    whole = _C.runtime.shard_rows(slices, 1, 0)
    assert (whole["local"], whole["real"], whole["pieces"]) == (11, 11, slices)
    with pytest.raises(_C.Error, match="out of range"):
        _C.runtime.shard_rows(slices, 2, 2)


def test_shard_inputs_pad_with_token_zero_and_no_target():
    batch = _batch()
    slices = [_C.Slice(0, 17, 23, 23), _C.Slice(3, 0, 5, 5)]
    full_targets = _C.runtime.next_token_targets(slices, batch)
    full_tokens = torch.cat([batch[0][17:23], batch[3]])
    tokens, targets = zip(*(_C.runtime.shard_inputs(slices, 2, j, batch) for j in range(2)))
    assert torch.equal(
        torch.cat(tokens), torch.cat([full_tokens, torch.zeros(1, dtype=torch.long)])
    )
    ignore = torch.full((1,), _C.runtime.IGNORE_INDEX)
    assert torch.equal(torch.cat(targets), torch.cat([full_targets, ignore]))


def test_sequence_degree_must_divide_kv_heads():
    values = check_all_ok(
        run_ranks("test_sequence_parallel:kv_heads_body", 2, timeout_s=120, extra_env=_env())
    )
    for value in values:
        assert value is not None and value[0] == "Error", value
        assert "sequence-parallel degree 2 must divide kv_heads (1)" in value[1], value


def test_lost_sequence_peer_is_named():
    results = run_ranks(
        "test_sequence_parallel:lost_peer_body", 2, timeout_s=120, extra_env=_env(), wait_for=[0]
    )
    survivor = results[0]
    # The body's result is saved before the process exits; the exit itself, with Gloo holding
    # work against a dead peer, aborts now and then ("terminate called without an active
    # exception", SIGABRT: 1 of 6 runs here; docs/runtime.md, "Checkpoints", Exits).
    assert survivor.returncode in (0, -signal.SIGABRT), survivor.describe()
    assert survivor.error is None, survivor.describe()
    value = survivor.value
    assert value is not None, survivor.describe()
    assert value["rank"] == 1, value
    assert "rank 1 (sequence rank 1 of stage 0)" in value["message"], value
    assert value["elapsed_s"] < 20 + 2, value
