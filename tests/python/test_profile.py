"""Profiler: the C++ fit recovers known coefficients; the quick CLI (Python and C++ stage) and the
C++ tool write loadable cost JSON. No timing asserts: the machine may be busy."""

import dataclasses
import json
import multiprocessing
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest
import torch

from infinipipe import _C
from infinipipe.models import llama
from infinipipe.profiling import layer_profile as profile
from infinipipe.profiling import neighbours

ROOT = Path(__file__).resolve().parents[2]
TOOL = Path(os.environ.get("INFINIPIPE_BUILD", ROOT / "build")) / "infinipipe-profile"
POINTS = [(s, c) for s in (64, 128, 256, 512, 1024) for c in (0, 256, 512, 1024, 2048)]
TRUE = (3e-9, 2e-6, 4e-4)  # a1, a2, b: magnitudes like the tiny model on a CPU


def forward(a1, a2, b, points=POINTS):
    return np.array([a1 * ((c + s) ** 2 - c**2) + a2 * s + b for s, c in points])


def samples(noise: float, seed: int, g: float = 2.3):
    rng = np.random.default_rng(seed)
    t = forward(*TRUE)
    fwd = t * (1 + noise * rng.uniform(-1, 1, len(t)))
    bwd = g * t * (1 + noise * rng.uniform(-1, 1, len(t)))
    return [(s, c, f, b) for (s, c), f, b in zip(POINTS, fwd, bwd)]


def run(argv, timeout):
    """`argv` with this checkout's Python package importable, its output captured as text."""
    env = dict(os.environ, PYTHONPATH=str(ROOT / "python"))
    return subprocess.run(argv, capture_output=True, text=True, env=env, timeout=timeout)


def run_cli(*args, timeout):
    """`python -m infinipipe ARGS`."""
    return run([sys.executable, "-m", "infinipipe", *args], timeout)


def quick_profile_cost(proc, out):
    """The cost model a quick profile run wrote to `out`, once the run is seen to succeed."""
    assert proc.returncode == 0, proc.stderr
    assert "held-out forward error" in proc.stdout
    return _C.plan.CostModel.load(str(out))


def test_fit_recovers_exact_coefficients():
    cal = _C.plan.calibrate(samples(0.0, 0))
    np.testing.assert_allclose([cal.a1, cal.a2, cal.b], TRUE, rtol=1e-6)
    assert cal.backward_ratio == pytest.approx(2.3)
    assert cal.forward_max_error < 1e-6 and cal.backward_max_error < 1e-6
    assert cal.checkpointed_forward_ratio is None  # no forward without autograd given
    # With it (a checkpointed layer's first forward): r, its ratio to the fitted forward.
    with_r = _C.plan.calibrate([(*x, 0.93 * x[2]) for x in samples(0.0, 0)])
    assert with_r.checkpointed_forward_ratio == pytest.approx(0.93)
    # With the recompute too (its recorded forward and at once its backward): r net of it.
    net = _C.plan.calibrate([(*x, 0.93 * x[2], 0.9 * x[2] + x[3]) for x in samples(0.0, 0)])
    assert net.checkpointed_forward_ratio == pytest.approx(0.93 + 0.9 - 1)
    with pytest.raises(Exception, match="checkpointed_forward_s"):
        _C.plan.calibrate([(*x, 1.0, 2.0, 3.0) for x in samples(0.0, 0)])
    assert len(cal.held_out) == 6 and len(cal.fit) == 19  # a quarter of 25 held out
    assert cal.embedding_s_per_token is None and cal.head_s_per_token is None


@pytest.mark.parametrize("seed", range(5))
def test_fit_with_noise_predicts_within_noise(seed):
    cal = _C.plan.calibrate(samples(0.05, seed), seed=seed)
    np.testing.assert_allclose([cal.a1, cal.a2], TRUE[:2], rtol=0.15)
    assert cal.backward_ratio == pytest.approx(2.3, rel=0.05)
    # Predictions of the noise-free times within the noise, everywhere.
    pred = np.array([cal.forward_s(s, c) for s, c in POINTS])
    assert np.max(np.abs(pred / forward(*TRUE) - 1)) < 0.05
    assert 0 <= cal.forward_median_error <= cal.forward_max_error < 0.1


def test_fit_is_non_negative_and_checks_input():
    # A negative intercept in the data: b is held at zero, not fitted negative.
    bad = [(s, c, f - TRUE[2] - 5e-5, 2 * f) for s, c, f, _ in samples(0.0, 0)]
    cal = _C.plan.calibrate(bad)
    assert cal.b == 0 and cal.a1 > 0 and cal.a2 > 0
    with pytest.raises(_C.Error, match="fewer than the 3 unknowns"):
        _C.plan.calibrate(samples(0.0, 0)[:2])
    with pytest.raises(_C.Error, match="positive time"):
        _C.plan.calibrate([(64, 0, 0.0, 1.0)] + samples(0.0, 0))


def test_per_token_parts_and_statistics():
    cal = _C.plan.calibrate(
        samples(0.0, 0), embedding=[(64, 6.4e-6), (128, 12.8e-6)], head=[(64, 3.2e-4)]
    )
    assert cal.embedding_s_per_token == pytest.approx(1e-7)
    assert cal.head_s_per_token == pytest.approx(5e-6)
    runs = [5.0, 1.0, 2.0, 100.0, 3.0, 4.0, 2.0, 3.0]
    assert _C.plan.robust_time(runs, "min") == 1.0
    assert _C.plan.robust_time(runs, "median") == 3.0
    assert _C.plan.robust_time(runs, "trimmed_mean") == 3.0  # 2, 3, 3, 4


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("lean", [False, True])
def test_saved_bytes_match_the_analytic_model(lean, dtype):
    # The runtime path saves what CostCoefficients::analytic derives, per token, for whole
    # sequences and for slices of split sequences alike, in both stage implementations, for the
    # eager layer and the lean one (LlamaConfig.lean_layer).
    config = llama.LlamaConfig.tiny(lean_layer=lean, dtype=dtype)
    analytic = json.loads(
        _C.plan.CostModel.analytic(profile.model_shape_json(config, dtype), "cpu", [4, 4]).to_json()
    )
    h, f, heads = config.hidden, config.ffn, config.heads
    b = dtype.itemsize
    eager = b * (6 * h + 2 * h // 2 + 4 * f) + 4 * (2 * h + 2 + heads)  # kv_heads = heads / 2
    # Per norm its compute-dtype copy (or value), SiLU's output, and the GEMM inputs the lean
    # layer refills in the backward (the norms' outputs, the SwiGLU product).
    lean_less = 2 * h * 4 + f * b + (2 * h + f) * b
    want = eager - lean_less if lean else eager
    assert analytic["coefficients"]["activation_bytes"] == pytest.approx(want)
    for stage in profile.STAGES:
        module = profile.profiled_module(config, stage)
        for context in (0, 96):
            per_token, per_slice = profile.activation_bytes(module, config, [16, 48], context)
            assert per_token == pytest.approx(analytic["coefficients"]["activation_bytes"])
            assert per_slice == pytest.approx(0, abs=1e-3)


@pytest.mark.slow  # times real runs: needs a quiet machine
@pytest.mark.parametrize("stage", profile.STAGES)
def test_cli_quick_writes_loadable_cost_json(tmp_path, stage):
    out = tmp_path / "cost.json"
    quick = ["--grid", "quick", "--stage", stage, "--output", str(out), "--no-progress"]
    proc = run_cli("profile", *quick, "--threads", "1", "--layers-per-stage", "3,5", timeout=300)
    cost = quick_profile_cost(proc, out)
    assert list(cost.layers_per_stage) == [3, 5]
    coef = json.loads(out.read_text())["coefficients"]
    meta = json.loads(out.with_suffix(".meta.json").read_text())
    for key in (
        "a1",
        "a2",
        "b",
        "backward_ratio",
        "embedding_s_per_token",
        "head_s_per_token",
        "activation_bytes",
        "checkpointed_forward_ratio",
    ):
        assert coef[key] == pytest.approx(meta[key])
    assert 0 < coef["checkpointed_forward_ratio"] <= 2
    for r in meta["runs"]["layer"]:  # without autograd and the recompute, at every repeat
        assert len(r["checkpointed_forward_s"]) == len(r["recomputed_s"]) == len(r["forward_s"]) > 0
    assert coef["a2"] > 0 and coef["activation_bytes"] > 0 and coef["head_s_per_token"] > 0
    assert 0 <= meta["forward_heldout_median"] <= meta["forward_heldout_max"]
    assert meta["stage"] == stage and meta["threads"] == 1 and meta["torch"] == torch.__version__
    assert len(meta["held_out"]) >= 1 and len(meta["runs"]["layer"]) == 9
    assert set(meta["heldout_errors_by_statistic"]) == set(profile.STATISTICS)
    if stage != "python":
        return
    # --refit: the same runs fitted again give the same coefficients and keep the measurement's
    # details, with the refit noted.
    again = tmp_path / "again.json"
    proc = run_cli(
        "profile",
        "--refit",
        str(out.with_suffix(".meta.json")),
        "--layers-per-stage",
        "3,5",
        "--output",
        str(again),
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    refit = json.loads(again.with_suffix(".meta.json").read_text())
    assert json.loads(again.read_text()) == json.loads(out.read_text())
    assert refit["runs"] == meta["runs"] and refit["date"] == meta["date"]
    assert refit["refit"]["of"] == str(out.with_suffix(".meta.json"))
    for key in ("a1", "a2", "b", "a3", "backward_a3", "held_out", "forward_heldout_median"):
        assert refit[key] == meta[key]


def test_main_lists_commands():
    usage = run_cli(timeout=60)
    assert usage.returncode == 0 and "profile" in usage.stdout
    bad = run_cli("nonsense", timeout=60)
    assert bad.returncode == 2 and "unknown command" in bad.stderr


def test_version_names_the_torch_the_module_was_built_with():
    proc = run_cli("--version", timeout=60)
    assert proc.returncode == 0, proc.stderr
    import infinipipe

    lines = proc.stdout.splitlines()
    assert lines[0] == "infinipipe %s" % infinipipe.__version__
    assert lines[1] == "built with torch %s, CUDA %s, NCCL %s" % (
        torch.__version__,
        torch.version.cuda or "none",
        "none" if not torch.version.cuda else lines[1].rsplit(" ", 1)[-1],
    )
    assert lines[2] == "running torch %s" % torch.__version__
    # one version: the package's (the wheel's, pyproject.toml reads it) and the C++ project's
    assert (
        "project(infinipipe VERSION %s " % infinipipe.__version__
        in (ROOT / "CMakeLists.txt").read_text()
    )


def test_cpp_tool_quick_writes_loadable_cost_json(tmp_path):
    if not TOOL.exists():
        pytest.skip(f"{TOOL} is not built (cmake --build build --target infinipipe-profile)")
    out = tmp_path / "cost.json"
    quick = ["--grid", "quick", "--output", str(out), "--no-progress"]
    proc = run([str(TOOL), *quick, "--layers-per-stage", "2,6"], timeout=300)
    cost = quick_profile_cost(proc, out)
    assert list(cost.layers_per_stage) == [2, 6]
    meta = json.loads((tmp_path / "cost.meta.json").read_text())
    coef = json.loads(out.read_text())["coefficients"]
    assert coef["a1"] == pytest.approx(meta["calibration"]["a1"])
    assert coef["head_s_per_token"] == pytest.approx(meta["calibration"]["head_s_per_token"])
    assert len(meta["layer_runs"]) == 9 and meta["stage"] == "cpp"


def test_plan_config_uses_profiled_json(tmp_path):
    import infinipipe

    out = tmp_path / "cost.json"
    config = llama.LlamaConfig.tiny()
    cal = _C.plan.calibrate(samples(0.0, 0))
    out.write_text(json.dumps(profile.cost_json(config, [4, 4], cal, 1000.0)))
    cost = infinipipe.cost_model_for(
        config, [4, 4], torch.float32, infinipipe.PlanConfig(cost_model=str(out))
    )
    assert list(cost.layers_per_stage) == [4, 4]
    assert json.loads(cost.to_json())["coefficients"]["a1"] == pytest.approx(TRUE[0])


def test_fit_gives_one_a1_per_query_regime_of_the_cpu_attention():
    # The CPU attention tiles queries by their number (profile.ATTENTION_QUERY_CUTS): times made
    # with an a1 per regime are fitted exactly, and the cost JSON carries the regimes.
    assert profile.ATTENTION_QUERY_CUTS == [192, 768]
    a1 = [4e-9, 3.5e-9, 3e-9]

    def seconds(s: int, c: int, scale: float) -> float:
        regime = (s >= 192) + (s >= 768)
        return scale * (a1[regime] * s * (2 * c + s) + 2e-6 * s + 4e-4 + 1e-7 * c)

    layer = [
        dict(tokens=s, context=c, forward_s=[seconds(s, c, 1)], backward_s=[seconds(s, c, 2)])
        for s in (64, 128, 256, 512, 1024, 2048)
        for c in (0, 1024, 4096)
    ]
    cal = profile.fit(dict(layer=layer, embedding=[], head=[]), holdout=0)
    assert list(cal.attention_query_cuts) == [192, 768]
    assert list(cal.a1_by_query) == pytest.approx(a1, rel=1e-6)
    assert list(cal.backward_a1_by_query) == pytest.approx([2 * a for a in a1], rel=1e-6)
    config = llama.LlamaConfig.tiny()
    coefficients = profile.cost_json(config, [4, 4], cal)["coefficients"]
    assert coefficients["attention_query_cuts"] == [192, 768]
    assert coefficients["a1_by_query"] == pytest.approx(a1, rel=1e-6)
    assert coefficients["a1"] == pytest.approx(a1[2], rel=1e-6)


def _cpu_ticks(pid: int) -> int:
    """User plus system CPU time of a process, in clock ticks (/proc/PID/stat)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return int(fields[11]) + int(fields[12])


def test_neighbours_work_during_the_block_and_stop_after():
    config = llama.LlamaConfig.tiny()
    points = [(64, 0), (64, 64)]
    with neighbours.neighbours(1, config, "python", points, 1):
        children = multiprocessing.active_children()
        assert len(children) == 1 and children[0].is_alive()
        # It is at work: its CPU time grows while this process sleeps.
        used = _cpu_ticks(children[0].pid)
        time.sleep(0.5)
        assert _cpu_ticks(children[0].pid) > used
    assert not children[0].is_alive()


def test_in_step_lets_no_side_start_a_run_before_the_other_finished_the_last():
    # Each side notes a run as it starts it and calls the barrier after it: run i + 1 of either
    # side starts only once both sides have started (and finished) run i.
    mine, theirs = multiprocessing.Pipe()
    started: list[tuple[str, int]] = []

    def side(name: str, conn, runs: int) -> None:
        barrier = neighbours.InStep([conn])
        for i in range(runs):
            started.append((name, i))
            time.sleep(0.002 if name == "slow" else 0)
            barrier()

    other = threading.Thread(target=side, args=("slow", theirs, 20))
    other.start()
    side("fast", mine, 20)
    other.join()
    assert len(started) == 40
    at = {event: i for i, event in enumerate(started)}
    for i in range(19):
        for name in ("fast", "slow"):
            assert at[(name, i + 1)] > max(at[("fast", i)], at[("slow", i)]), started


def test_in_step_fails_at_once_when_the_other_side_is_gone():
    mine, theirs = multiprocessing.Pipe()
    theirs.close()
    started = time.monotonic()
    with pytest.raises(RuntimeError, match="in-step profile stopped"):
        neighbours.InStep([mine])()
    assert time.monotonic() - started < 10


@pytest.mark.slow  # times real runs: needs a quiet machine
def test_neighbours_in_step_time_every_run():
    # The neighbour makes the same runs (points, repeats, seed, in flight), waiting for this
    # process after each: the profile completes with every run of every point.
    config = llama.LlamaConfig.tiny()
    points = [(16, 0), (32, 48)]
    with neighbours.neighbours(1, config, "python", points, 1, in_step=(3, 0, 5)) as barrier:
        assert isinstance(barrier, neighbours.InStep)
        runs = profile.time_runs(
            profile.profiled_module(config, "python"),
            config,
            points,
            3,
            seed=5,
            progress=False,
            after_each=barrier,
        )
    for r in runs["layer"]:
        assert len(r["forward_s"]) == 3 and len(r["backward_s"]) == 3, r


def test_cli_wants_neighbours_for_in_step(tmp_path):
    proc = run_cli(
        "profile", "--neighbours-in-step", "--output", str(tmp_path / "c.json"), timeout=120
    )
    assert proc.returncode == 2 and "--neighbours-in-step needs neighbours" in proc.stderr


TINY_POINTS = [(16, 0), (32, 48), (8, 96)]


def tiny_runs(repeats: int, **options) -> dict:
    """The raw runs of the tiny LLaMA's Python stage at TINY_POINTS (profile.time_runs)."""
    config = llama.LlamaConfig.tiny()
    module = profile.profiled_module(config, "python")
    return profile.time_runs(module, config, TINY_POINTS, repeats, progress=False, **options)


@pytest.mark.parametrize("in_flight", [0, 3, 50])
def test_every_recorded_forward_gets_its_backward_whatever_is_held_in_flight(in_flight):
    # Backwards wait until `in_flight` later forwards have run (runtime/layer_profiler.h); each
    # timed forward still gets its timed backward, and the held ones theirs at the end (with 50
    # held, all of them).
    runs = tiny_runs(4, in_flight=in_flight)
    assert [(r["tokens"], r["context"]) for r in runs["layer"]] == TINY_POINTS
    for r in runs["layer"]:
        for key in ("forward_s", "backward_s", "checkpointed_forward_s", "recomputed_s"):
            assert len(r[key]) == 4 and all(t > 0 for t in r[key]), (key, r)


def test_short_points_are_timed_until_their_runs_hold_the_least_tokens():
    # cost/profile_grid.h, timed_runs: max(repeats, ceil(min_timed_tokens / tokens)), for the
    # layer's points and the embedding's and head's sizes alike.
    runs = tiny_runs(2, min_timed_tokens=64)
    want = {16: 4, 32: 2, 8: 8}
    for r in runs["layer"]:
        for key in ("forward_s", "backward_s", "checkpointed_forward_s", "recomputed_s"):
            assert len(r[key]) == want[r["tokens"]], (key, r)
    for part in ("embedding", "head"):
        assert {r["tokens"]: len(r["seconds"]) for r in runs[part]} == want, part


def test_in_flight_must_not_be_negative(tmp_path):
    module = profile.profiled_module(llama.LlamaConfig.tiny(), "python")
    with pytest.raises(_C.Error, match="in_flight must be zero or positive, got -1"):
        profile.time_runs(
            module, llama.LlamaConfig.tiny(), [(16, 0)], 1, progress=False, in_flight=-1
        )
    proc = run_cli(
        "profile", "--in-flight", "-1", "--output", str(tmp_path / "c.json"), timeout=120
    )
    assert proc.returncode == 2 and "--in-flight must be 0 or more" in proc.stderr


def test_cli_rejects_negative_neighbours(tmp_path):
    proc = run_cli(
        "profile", "--neighbours", "-1", "--output", str(tmp_path / "c.json"), timeout=120
    )
    assert proc.returncode == 2 and "--neighbours must be 0 or more" in proc.stderr


def test_a_neighbour_that_fails_to_start_is_an_error_not_a_wait():
    started = time.monotonic()
    with pytest.raises(RuntimeError, match="neighbour process did not start"):
        with neighbours.neighbours(1, llama.LlamaConfig.tiny(), "no-such-stage", [(64, 0)], 1):
            pass
    assert time.monotonic() - started < 120


@pytest.mark.parametrize("file_split, trainer_split", [([2, 6], [4, 4]), ([4, 4], [2, 3, 3])])
def test_a_cost_model_of_another_layer_split_is_refused_as_the_plan_tool_refuses_it(
    tmp_path, file_split, trainer_split
):
    # The plan tool applies the same rule to the same files (tests/tools/plan_tool_split.py).
    import infinipipe

    out = tmp_path / "cost.json"
    config = llama.LlamaConfig.tiny()
    out.write_text(
        json.dumps(profile.cost_json(config, file_split, _C.plan.calibrate(samples(0.0, 0)), 1e3))
    )
    said = (
        f"the cost model {out} splits the layers as {file_split} but the trainer as "
        f"{trainer_split}; plan on the file's split or profile for this one (python -m "
        f"infinipipe profile --layers-per-stage {','.join(map(str, trainer_split))})"
    )
    with pytest.raises(infinipipe.Error) as refused:
        infinipipe.cost_model_for(
            config, trainer_split, torch.float32, infinipipe.PlanConfig(cost_model=str(out))
        )
    assert str(refused.value) == said
    cost = infinipipe.cost_model_for(
        config, file_split, torch.float32, infinipipe.PlanConfig(cost_model=str(out))
    )
    assert list(cost.layers_per_stage) == file_split


def test_a_cost_model_of_another_shape_is_refused_naming_the_fields(tmp_path):
    import infinipipe

    out = tmp_path / "cost.json"
    config = llama.LlamaConfig.tiny()
    out.write_text(
        json.dumps(profile.cost_json(config, [4, 4], _C.plan.calibrate(samples(0.0, 0)), 1000.0))
    )
    wider = dataclasses.replace(config, hidden=2 * config.hidden)
    with pytest.raises(
        infinipipe.Error, match=r"another model shape: hidden 128 \(the trainer's: 256\)"
    ):
        infinipipe.cost_model_for(
            wider, [4, 4], torch.float32, infinipipe.PlanConfig(cost_model=str(out))
        )
    with pytest.raises(infinipipe.Error, match=r"bytes_per_element 4 \(the trainer's: 8\)"):
        infinipipe.cost_model_for(
            config, [4, 4], torch.float64, infinipipe.PlanConfig(cost_model=str(out))
        )


def test_a_gpu_profile_fits_one_a1_and_keeps_the_gpu_hardware():
    # CUDA's attention kernels have no CPU tiling regimes: a profile on a GPU fits one a1, and
    # its cost JSON keeps the built-in GPU hardware's analytic terms (the h100's).
    assert profile.attention_query_cuts("cuda") == []
    assert profile.attention_query_cuts("cpu") == profile.ATTENTION_QUERY_CUTS
    layer = [
        dict(
            tokens=s,
            context=c,
            forward_s=[2e-11 * s * (2 * c + s) + 7e-7 * s + 5e-4 + 1e-8 * c],
            backward_s=[2 * (2e-11 * s * (2 * c + s) + 7e-7 * s + 5e-4 + 1e-8 * c)],
        )
        for s in (256, 1024, 4096, 16384)
        for c in (0, 16384, 98304)
    ]
    cal = profile.fit(dict(layer=layer, embedding=[], head=[]), holdout=0, attention_query_cuts=[])
    assert list(cal.attention_query_cuts) == []
    assert cal.a1 == pytest.approx(2e-11, rel=1e-6)
    assert profile.hardware_of("cuda") == "h100" and profile.hardware_of("cpu") == "cpu"
    cost = profile.cost_json(llama.LlamaConfig.tiny(), [4, 4], cal, hardware="h100")
    analytic_cpu = profile.cost_json(llama.LlamaConfig.tiny(), [4, 4], cal, hardware="cpu")
    assert cost["coefficients"]["a1"] == pytest.approx(2e-11, rel=1e-6)
    assert cost["coefficients"] != analytic_cpu["coefficients"]  # the GPU's links and memory


def test_the_gpu_grid_reaches_16k_tokens_at_96k_context():
    points, repeats, min_timed_tokens = profile.grid_points("gpu")
    assert max(s for s, _ in points) == 16384 and max(c for _, c in points) == 98304
    assert repeats >= 3
    assert min_timed_tokens == 2048 * repeats  # the short points are timed more often


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the message where there is no GPU")
def test_cli_device_cuda_without_a_gpu_says_so(tmp_path):
    proc = run_cli("profile", "--device", "cuda", "--output", str(tmp_path / "c.json"), timeout=120)
    assert proc.returncode == 2 and "torch sees no CUDA device here" in proc.stderr
