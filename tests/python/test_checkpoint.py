"""Saving and resuming the whole training state (infinipipe.state.checkpoint) on real Gloo ranks:

- a run stopped after step 5 and resumed in fresh processes gives bitwise the losses (and RNG
  draws) of the run that never stopped; saving (also before the first step, when the optimizer
  has no state yet) changes nothing in the run that saves;
- a 2-stage checkpoint loads into a 4-stage run (by parameter name) and gives the 2-stage
  run's next losses; the RNG states are then left alone, with a warning; it loads into C++
  stages as well;
- another model shape or dtype is refused naming each field; a missing, unfinished, truncated,
  damaged (random bytes, zeros) or mismatched (another save's index) checkpoint is refused
  naming the file, on every rank, without a hang, before any tensor is read; resume() falls
  back to the checkpoint before a damaged one;
- a save that fails on one rank leaves `latest` and the previous checkpoint as they were.
"""

from __future__ import annotations

import os
import random
import shutil
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
RUNTIME_TESTS = HERE / "runtime"
sys.path.insert(0, str(RUNTIME_TESTS))
from launcher import REPO, check_all_ok, run_ranks  # noqa: E402

ENV = {"PYTHONPATH": os.pathsep.join([str(REPO / "python"), str(RUNTIME_TESTS), str(HERE)])}


def ranks(body: str, world_size: int, **args) -> list:
    return check_all_ok(
        run_ranks(f"checkpoint_bodies:{body}", world_size, args, timeout_s=180, extra_env=ENV)
    )


@pytest.fixture(scope="module")
def uninterrupted():
    return ranks("train", 2, steps=10)


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    """Saves before the first step and after step 5, trains on to step 7."""
    directory = tmp_path_factory.mktemp("ckpt") / "run"
    runs = ranks("train", 2, directory=str(directory), steps=7, save_at=(0, 5))
    return directory, runs


def test_a_resumed_run_continues_bitwise(uninterrupted, saved):
    directory, runs = saved
    assert (directory / "latest").read_text() == "step-5\n"
    assert sorted(p.name for p in directory.iterdir()) == ["latest", "step-0", "step-5"]
    resumed = ranks("train", 2, directory=str(directory), steps=10, resume=True)
    for rank in range(2):
        whole, first, second = uninterrupted[rank], runs[rank], resumed[rank]
        # saving changed nothing in the run that saved
        assert first["losses"] == {k: whole["losses"][k] for k in range(1, 8)}
        assert first["draws"] == {k: whole["draws"][k] for k in range(1, 8)}
        # the fresh processes continue exactly: losses equal as floats, RNG draws too
        assert second["resumed_at"] == 5
        assert second["losses"] == {k: whole["losses"][k] for k in range(6, 11)}
        assert second["draws"] == {k: whole["draws"][k] for k in range(6, 11)}
        assert second["warnings"] == []
    # the loss is the same on every rank
    assert uninterrupted[0]["losses"] == uninterrupted[1]["losses"]


def test_a_two_stage_checkpoint_loads_into_four_stages(uninterrupted, saved):
    directory, _ = saved
    runs = ranks("train", 4, directory=str(directory), steps=7, resume=True)
    want = uninterrupted[0]["losses"]
    for r in runs:
        assert r["split"] == [1, 1, 1, 1] and r["resumed_at"] == 5
        # step 6 takes the weights of step 5, step 7 also its optimizer state; the pipeline's
        # chunks differ with the stages, so the sums may differ in the last bits
        for step in (6, 7):
            assert abs(r["losses"][step] - want[step]) <= 1e-12 * abs(want[step])
        assert any("saved by 2 ranks, loaded by 4" in w for w in r["warnings"])


def test_a_python_stage_checkpoint_loads_into_cpp_stages(uninterrupted, saved):
    """The C++ LlamaStage names its parameters as the Python one: the checkpoint fits both."""
    directory, _ = saved
    runs = ranks("train", 2, directory=str(directory), steps=7, resume=True, cpp_stage=True)
    want = uninterrupted[0]["losses"]
    for r in runs:
        assert r["resumed_at"] == 5
        for step in (6, 7):
            assert abs(r["losses"][step] - want[step]) <= 1e-9 * abs(want[step])


REPLICAS = dict(pipeline=2, data=2)  # ZeRO-1: each parameter's optimizer state on one replica


@pytest.mark.slow  # 4 ranks, twice
def test_a_run_with_replicas_resumes_bitwise(uninterrupted, tmp_path):
    """Pipeline 2 x data 2 with ZeRO-1: saved after step 3 and resumed in fresh processes, the
    run continues bitwise (each rank's optimizer shard is saved by its owner and read back by
    name), and it trains as the 2-stage run does."""
    directory = tmp_path / "run"
    whole = ranks("train", 4, directory=str(directory), steps=6, save_at=(3,), parallel=REPLICAS)
    resumed = ranks("train", 4, directory=str(directory), steps=6, resume=True, parallel=REPLICAS)
    want = uninterrupted[0]["losses"]
    for first, second in zip(whole, resumed):
        assert second["resumed_at"] == 3 and second["warnings"] == []
        assert second["losses"] == {k: first["losses"][k] for k in range(4, 7)}
        assert second["draws"] == {k: first["draws"][k] for k in range(4, 7)}
        for step in range(1, 7):
            assert abs(first["losses"][step] - want[step]) <= 1e-12 * abs(want[step])


def test_a_two_stage_checkpoint_loads_into_replicas_with_zero(uninterrupted, saved):
    """The 2-stage run's checkpoint (whole optimizer state per rank) into pipeline 2 x data 2
    with ZeRO-1 (each rank reads its shard's state): steps 6 and 7 as the uninterrupted run."""
    directory, _ = saved
    runs = ranks("train", 4, directory=str(directory), steps=7, resume=True, parallel=REPLICAS)
    want = uninterrupted[0]["losses"]
    for r in runs:
        assert r["resumed_at"] == 5
        for step in (6, 7):
            assert abs(r["losses"][step] - want[step]) <= 1e-12 * abs(want[step])


def test_another_model_shape_or_dtype_is_named(saved):
    directory, _ = saved
    messages = ranks(
        "load_error", 2, directory=str(directory), changes=dict(hidden=32, dtype="float32")
    )
    for m in messages:
        assert "does not fit this trainer" in m and str(directory / "step-5") in m
        assert "hidden 64 (the trainer's: 32)" in m
        assert "dtype torch.float64 (the trainer's: torch.float32)" in m
        assert "layers" not in m.split(":", 1)[1]  # only what differs


def _copy(source: Path, target: Path) -> Path:
    shutil.copytree(source, target)
    return target


def test_incomplete_or_corrupt_checkpoints_are_named(saved, tmp_path):
    directory, _ = saved
    step = directory / "step-5"
    cases = []  # (path to load, what the error must say)

    only_tmp = tmp_path / "only-tmp"
    only_tmp.mkdir()
    _copy(step, only_tmp / ".tmp-step-5")
    cases.append((only_tmp, "holds only saves that did not finish (.tmp-step-5)"))
    cases.append((only_tmp / ".tmp-step-5", "a save that did not finish left, not a checkpoint"))

    truncated = _copy(step, tmp_path / "truncated")
    data = truncated / "__1_0.distcp"
    os.truncate(data, data.stat().st_size // 2)
    cases.append((truncated, f"checkpoint file {data} is truncated"))

    missing = _copy(step, tmp_path / "missing")
    (missing / "__0_0.distcp").unlink()
    cases.append((missing, f"{missing / '__0_0.distcp'} is missing"))

    bad_metadata = _copy(step, tmp_path / "bad-metadata")
    (bad_metadata / ".metadata").write_bytes(b"not a pickle")
    cases.append((bad_metadata, f"checkpoint file {bad_metadata / '.metadata'} is truncated"))

    no_meta = _copy(step, tmp_path / "no-meta")
    (no_meta / "infinipipe.json").unlink()
    cases.append((no_meta, f"{no_meta} is incomplete: it has no infinipipe.json"))

    # The same size, other bytes: only the checksums the save recorded tell.
    zeros = _copy(step, tmp_path / "zeros")
    data = zeros / "__0_0.distcp"
    data.write_bytes(bytes(data.stat().st_size))
    cases.append((zeros, f"checkpoint file {data} is damaged: its crc32 is"))

    scribbled = _copy(step, tmp_path / "scribbled")  # 4,096 random bytes in the middle
    data = scribbled / "__1_0.distcp"
    with open(data, "r+b") as f:
        f.seek(data.stat().st_size // 2)
        f.write(random.Random(0).randbytes(4096))
    cases.append((scribbled, f"checkpoint file {data} is damaged: its crc32 is"))

    # Another save's infinipipe.json (step 0 of the same run), and another save's DCP index.
    foreign = _copy(step, tmp_path / "foreign-meta")
    shutil.copy(directory / "step-0" / "infinipipe.json", foreign / "infinipipe.json")
    cases.append((foreign, f"checkpoint file {foreign / '.metadata'} is"))
    foreign_index = _copy(step, tmp_path / "foreign-index")
    shutil.copy(directory / "step-0" / ".metadata", foreign_index / ".metadata")
    cases.append((foreign_index, f"checkpoint file {foreign_index / '.metadata'} is"))

    edited = _copy(step, tmp_path / "edited-meta")  # a digit changed: still valid JSON
    meta = edited / "infinipipe.json"
    meta.write_text(meta.read_text().replace('"step": 5', '"step": 6'))
    cases.append((edited, f"checkpoint file {meta} is damaged: its content's crc32 is"))

    dangling = tmp_path / "dangling"
    dangling.mkdir()
    (dangling / "latest").write_text("step-9\n")
    cases.append((dangling, f"names step-9, but {dangling / 'step-9'} does not exist"))

    cases.append((tmp_path / "nowhere", f"no checkpoint at {tmp_path / 'nowhere'}"))

    runs = ranks("load_errors", 2, paths=[str(p) for p, _ in cases])
    for r in runs:
        for (path, expected), message in zip(cases, r["messages"]):
            assert expected in message, (path, message)
        for message in r["messages"][2:-2]:  # a damaged file: what to do
            assert "load the checkpoint saved before it" in message, message
        assert r["untouched"]  # every refusal came before any tensor was read
        assert r["loss"] == runs[0]["loss"]  # the ranks are still in step


def test_a_resume_falls_back_past_a_damaged_checkpoint(uninterrupted, saved, tmp_path):
    """step-5's shard damaged: resume() loads step-0 (with a warning naming the file) and the
    run continues as the one that never stopped; with every checkpoint damaged it is an error
    naming each; an empty directory is a fresh start."""
    directory, _ = saved
    damaged = _copy(directory, tmp_path / "damaged")
    shard = damaged / "step-5" / "__0_0.distcp"
    with open(shard, "r+b") as f:
        f.seek(shard.stat().st_size // 2)
        f.write(bytes(4096))
    resumed = ranks("train", 2, directory=str(damaged), steps=3, resume=True, fall_back=True)
    for rank, r in enumerate(resumed):
        assert r["resumed_from"] == "step-0" and r["resumed_at"] == 0
        assert r["losses"] == {k: uninterrupted[rank]["losses"][k] for k in range(1, 4)}
        assert any(f"checkpoint file {shard} is damaged" in w for w in r["warnings"])

    shard = damaged / "step-0" / "__1_0.distcp"
    os.truncate(shard, shard.stat().st_size - 1)
    (empty := tmp_path / "empty").mkdir()
    for r in ranks("resume_errors", 2, paths=[str(damaged), str(empty), str(tmp_path / "none")]):
        everything, nothing, missing = r
        assert f"no checkpoint under {damaged} could be loaded" in everything
        assert "step-5" in everything and f"checkpoint file {shard} is truncated" in everything
        assert nothing == missing == "fresh start"


def test_a_failed_save_keeps_the_previous_checkpoint(tmp_path):
    directory = tmp_path / "run"
    runs = ranks("failed_save", 2, directory=str(directory))
    for r in runs:
        assert "rank 1: OSError: disk full (injected)" in r["error"]
        assert f"{directory / 'latest'} still names step-3" in r["error"]
        assert r["latest"] == "step-3"
        # keep=2: step-1 went when step-3 came; the failed save left only its .tmp- directory
        assert r["listing"] == [".tmp-step-4", "latest", "step-2", "step-3"]
        assert r["steps"] == 3 and r["weights_restored"] and r["generator_restored"]
        # saving step 3 again replaces it; a successful save removes what failed saves left
        assert r["listing_after_resave"] == ["latest", "step-2", "step-3"]
        assert r["latest_after_resave"] == "step-3"


def test_a_stage_without_state_dict_is_a_clear_error(tmp_path):
    for message in ranks("no_state_dict", 2, directory=str(tmp_path / "run")):
        assert "stage (object) has no state_dict(), load_state_dict(), named_parameters()" in (
            message
        )
    assert not (tmp_path / "run").exists()
