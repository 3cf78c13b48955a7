"""The profiled all-to-all (infinipipe/profiling/alltoall.py): measured over real Gloo processes,
fitted, carried by the cost JSON and its cache key, and used by a trainer with sequence
parallelism and cost_model="profile".

The rank bodies live in this module (the launcher imports it by name in each rank). Timing
asserts are loose (a factor of 3): the machine has two cores shared with other work.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE / "runtime"))

from launcher import check_all_ok, run_ranks, run_ranks_profiled  # noqa: E402

from infinipipe import _C  # noqa: E402
from infinipipe.models import llama  # noqa: E402
from infinipipe.planning.cost_model import model_shape_json  # noqa: E402
from infinipipe.profiling import alltoall, profiled_cost  # noqa: E402

MODEL = dict(vocab=97, hidden=32, layers=4, heads=4, kv_heads=2, ffn=64)
OTHER_SIZE = 3 * 2**17  # 384 KiB per rank: between two of the measured sizes


def _env(**more: str) -> dict:
    paths = [str(HERE.parents[1] / "python"), str(HERE / "runtime"), str(HERE)]
    return {"PYTHONPATH": os.pathsep.join(paths + [os.environ.get("PYTHONPATH", "")]), **more}


def _config() -> llama.LlamaConfig:
    return llama.LlamaConfig(**MODEL, dtype=torch.float32)


# --------------------------------------------------------------------------------------------
# Rank bodies


def measure_body() -> dict:
    """The all-to-all over both ranks, fitted; then one message of another size, re-measured."""
    import torch.distributed as dist

    dist.init_process_group("gloo")
    try:
        measured = alltoall.measure(dist.group.WORLD, 30.0)
        (run,) = alltoall.time_runs(dist.group.WORLD, 30.0, sizes=[OTHER_SIZE])
    finally:
        # A Gloo group left to the interpreter's exit can abort the process ("terminate called
        # without an active exception") after the body returned.
        dist.destroy_process_group()
    f = measured["fit"]
    return dict(
        ranks=measured["ranks"],
        bandwidth=f.bandwidth,
        latency_s=f.latency_s,
        predicted_s=f.seconds(run["sent_bytes"]),
        measured_s=_C.plan.robust_time(run["seconds"], "median"),
        sizes=[r["bytes"] for r in measured["runs"]],
        repeats=[len(r["seconds"]) for r in measured["runs"]],
        description=alltoall.describe(measured),
    )


def absent_peer_body() -> dict | None:
    """Rank 1 never takes part (it sleeps, then leaves); rank 0's measurement must fail within
    its timeout as a CollectiveFailure."""
    import torch.distributed as dist

    from infinipipe.distributed.gradient_group import CollectiveFailure

    dist.init_process_group("gloo")
    if dist.get_rank() == 1:
        time.sleep(8)
        return None
    started = time.monotonic()
    try:
        alltoall.measure(dist.group.WORLD, 3.0)
    except CollectiveFailure as e:
        return dict(message=str(e), elapsed_s=time.monotonic() - started, rank=e.rank)
    return dict(message="no failure", elapsed_s=time.monotonic() - started, rank=None)


def trainer_body() -> dict:
    """Pipeline 1 x sequence 2 with cost_model="profile" (the quick grid, to keep it short)."""
    import infinipipe

    profiled_cost.GRID = "quick"
    trainer = infinipipe.Trainer(
        _config(),
        lambda params: torch.optim.SGD(params, lr=0.0),
        plan=infinipipe.PlanConfig(cost_model="profile"),
        parallel=infinipipe.Parallel(pipeline=1, sequence=2),
        runtime=infinipipe.RuntimeConfig(timeout_s=60),
    )
    g = torch.Generator().manual_seed(0)
    result = trainer.step([torch.randint(0, MODEL["vocab"], (n,), generator=g) for n in (40, 9)])
    return dict(cost=trainer.cost.to_json(), name=trainer.planner.cost_model_name, loss=result.loss)


# --------------------------------------------------------------------------------------------
# The tests


@pytest.mark.slow  # times real runs: needs a quiet machine
def test_alltoall_over_two_gloo_processes_fits_and_predicts_another_size():
    values = check_all_ok(
        run_ranks("test_profile_alltoall:measure_body", 2, timeout_s=120, extra_env=_env())
    )
    for v in values:
        assert v["ranks"] == 2
        assert v["sizes"] == list(alltoall.SIZES)
        assert v["repeats"] == [alltoall.REPEATS] * len(alltoall.SIZES)
        assert math.isfinite(v["bandwidth"]) and v["bandwidth"] > 0, v
        assert math.isfinite(v["latency_s"]) and v["latency_s"] > 0, v
        # A message of a size not fitted: the prediction within a factor of 3 of its time.
        assert 1 / 3 < v["predicted_s"] / v["measured_s"] < 3, v
        assert v["description"].startswith("all-to-all over 2 ranks: ")


def test_a_rank_that_never_joins_fails_the_measurement_within_its_timeout():
    results = run_ranks(
        "test_profile_alltoall:absent_peer_body", 2, timeout_s=120, extra_env=_env(), wait_for=[0]
    )
    value = results[0].value
    assert value is not None, results[0].describe()
    assert "sequence group is lost" in value["message"], value
    assert value["rank"] == -1 and value["elapsed_s"] < 3 + 2, value


def _synthetic_link():
    return dict(ranks=2, fit=_C.plan.fit_link([(2048, 6.5e-5), (2**20, 5e-4), (2**22, 1.8e-3)]))


def test_cost_json_round_trip_with_the_link():
    config = _config()
    base = _C.plan.CostModel.analytic(model_shape_json(config, torch.float32), "cpu", [2, 2])
    plain = json.loads(base.to_json())["coefficients"]
    assert "alltoall_bandwidth" not in plain  # written only when measured
    link = _synthetic_link()
    text = alltoall.with_link(base.to_json(), link)
    coefficients = json.loads(text)["coefficients"]
    assert coefficients["alltoall_bandwidth"] == pytest.approx(link["fit"].bandwidth)
    assert coefficients["alltoall_latency_s"] == pytest.approx(link["fit"].latency_s)
    assert coefficients["p2p_bandwidth"] == plain["p2p_bandwidth"]  # sends keep their link
    again = _C.plan.CostModel.from_json(text)
    assert json.loads(again.to_json()) == json.loads(text)
    # The trainer's per-rank model keeps it.
    per_rank = json.loads(again.with_layout(sequence=2, gpus_per_node=2).to_json())
    assert per_rank["coefficients"]["alltoall_bandwidth"] == coefficients["alltoall_bandwidth"]
    assert per_rank["layout"]["sequence"] == 2


def test_the_cache_key_distinguishes_a_profile_with_the_alltoall(tmp_path, monkeypatch):
    monkeypatch.setenv("INFINIPIPE_CACHE_DIR", str(tmp_path))
    config, split = _config(), [2, 2]
    without = profiled_cost.cache_path(config, split, 4)
    assert profiled_cost.cache_path(config, split, 4, sequence=1) == without
    paths = {without}
    for sequence, ranks_on_host in ((2, 4), (4, 4), (2, 8)):
        paths.add(profiled_cost.cache_path(config, split, ranks_on_host, sequence))
    assert len(paths) == 4
    monkeypatch.setattr(alltoall, "VERSION", alltoall.VERSION + 1)
    assert profiled_cost.cache_path(config, split, 4, 2) not in paths


@pytest.mark.slow  # times real runs: needs a quiet machine
def test_a_trainer_with_sequence_parallelism_plans_with_the_measured_link(tmp_path, monkeypatch):
    config, split = _config(), [4]
    # A cache of a profile without the all-to-all (as a sequence-1 run writes it) is not used.
    # The keys as the ranks make them: the quick grid, one thread each (the launcher's).
    monkeypatch.setenv("INFINIPIPE_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(profiled_cost, "GRID", "quick")
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        stale = profiled_cost.cache_path(config, split, 2)
        for_sp = profiled_cost.cache_path(config, split, 2, sequence=2)
    finally:
        torch.set_num_threads(threads)
    analytic = _C.plan.CostModel.analytic(model_shape_json(config, torch.float32), "cpu", split)
    stale.write_text(analytic.to_json())

    results = run_ranks_profiled(
        "test_profile_alltoall:trainer_body",
        2,
        timeout_s=300,
        extra_env=_env(INFINIPIPE_CACHE_DIR=str(tmp_path)),
    )
    values = check_all_ok(results)
    assert values[0]["cost"] == values[1]["cost"]
    for v in values:
        assert v["name"].startswith("profiled now on this machine (quick grid and the all-to-all")
        assert math.isfinite(v["loss"])
    cost = json.loads(values[0]["cost"])
    assert cost["layout"]["sequence"] == 2
    assert cost["coefficients"]["alltoall_bandwidth"] > 0
    assert cost["coefficients"]["alltoall_latency_s"] > 0
    cached = json.loads(for_sp.read_text())
    assert (
        cached["coefficients"]["alltoall_bandwidth"] == cost["coefficients"]["alltoall_bandwidth"]
    )
    assert json.loads(stale.read_text()) == json.loads(analytic.to_json())  # left alone


def _cli(argv: list[str], timeout: float):
    env = dict(os.environ, **_env(OMP_NUM_THREADS="1"))
    return subprocess.run(argv, capture_output=True, text=True, env=env, timeout=timeout)


@pytest.mark.slow  # times real runs: needs a quiet machine
def test_cli_measures_the_alltoall_under_torchrun(tmp_path):
    out = tmp_path / "cost.json"
    quick = ["--grid", "quick", "--no-progress", "--output", str(out), "--sequence", "2"]
    torchrun = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node=2"]
    proc = _cli([*torchrun, "-m", "infinipipe", "profile", *quick], timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.count("all-to-all over 2 ranks: ") == 1  # rank 0 alone reports
    coefficients = json.loads(out.read_text())["coefficients"]
    meta = json.loads(out.with_suffix(".meta.json").read_text())["alltoall"]
    assert coefficients["alltoall_bandwidth"] == pytest.approx(meta["bandwidth"])
    assert coefficients["alltoall_latency_s"] == pytest.approx(meta["latency_s"])
    assert meta["ranks"] == 2 and meta["processes"] == 2
    assert [r["bytes"] for r in meta["runs"]] == list(alltoall.SIZES)
    _C.plan.CostModel.load(str(out))


def test_cli_sequence_needs_its_processes(tmp_path):
    argv = [sys.executable, "-m", "infinipipe", "profile", "--sequence", "2"]
    proc = _cli([*argv, "--output", str(tmp_path / "c.json")], timeout=120)
    assert proc.returncode == 2 and "launch under torchrun" in proc.stderr, proc.stderr
