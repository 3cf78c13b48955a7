"""The Python examples as a user runs them, under torchrun on 2 ranks (Gloo, CPU):

- examples/train_llama.py trains, evaluates, saves checkpoints and, run again with more steps,
  resumes from the latest: the resumed steps' losses equal those of a run that never stopped;
- examples/make_hf_model.py writes a transformers model and tokenizer, and
  examples/finetune_hf.py fine-tunes it (the held-out loss falls) and saves a directory that
  transformers' from_pretrained loads with the pipeline's held-out loss.
"""

from __future__ import annotations

import json
import math
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

# The examples end to end, 2 and 4 ranks each, profiling their cost model: the slow tier.
pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tests" / "python" / "runtime"))
from launcher import free_port, launch_log  # noqa: E402


@pytest.fixture(autouse=True, scope="module")
def cost_cache(tmp_path_factory):
    """The examples profile their cost model once (profiled_cost.py): into a cache of this
    module's own, not the user's."""
    os.environ["INFINIPIPE_CACHE_DIR"] = str(tmp_path_factory.mktemp("cost-cache"))
    yield
    del os.environ["INFINIPIPE_CACHE_DIR"]


def run(args: list[str], ranks: int = 2, timeout_s: float = 300, stderr: bool = False) -> str:
    """Runs a command (under torchrun when ranks > 0); returns its stdout (and then its stderr
    when asked), fails the test on a non-zero exit."""
    launcher = [
        "-m",
        "torch.distributed.run",
        f"--nproc_per_node={ranks}",
        "--master_addr=127.0.0.1",
        f"--master_port={free_port()}",
    ]
    command = [sys.executable, *(launcher if ranks else []), *args]
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=str(REPO / "python"))
    done = subprocess.run(command, capture_output=True, text=True, timeout=timeout_s, env=env)
    assert done.returncode == 0, f"{command}\n{launch_log(done.stdout, done.stderr)}"
    return done.stdout + (done.stderr if stderr else "")


def records(path: Path) -> tuple[dict[int, float], dict[int, float]]:
    """(training loss by step, held-out loss by step) of a MetricsLog JSON Lines file."""
    train, held_out = {}, {}
    for line in path.read_text().splitlines():
        record = json.loads(line)
        if "eval_loss" in record:
            held_out[record["step"]] = float(record["eval_loss"])
        else:
            train[record["step"]] = float(record["loss"])
    return train, held_out


def train_llama(steps: int, checkpoints: Path, metrics: Path) -> str:
    return run(
        [
            str(REPO / "examples" / "train_llama.py"),
            *("--steps", str(steps), "--tokens-per-step", "1024", "--context", "512"),
            *("--eval-every", "2", "--save-every", "2"),
            *("--checkpoint-dir", str(checkpoints), "--metrics", str(metrics)),
        ],
        stderr=True,
    )


def test_train_llama_trains_saves_and_resumes_exactly(tmp_path):
    whole = tmp_path / "whole.jsonl"
    train_llama(6, tmp_path / "uninterrupted", whole)
    first = tmp_path / "first.jsonl"
    train_llama(4, tmp_path / "resumed", first)
    assert sorted(p.name for p in (tmp_path / "resumed").iterdir()) == [
        "latest",
        "step-2",
        "step-4",
    ]
    # A copy whose newest checkpoint is damaged: the example resumes from the one before.
    damaged = tmp_path / "damaged"
    shutil.copytree(tmp_path / "resumed", damaged)
    shard = damaged / "step-4" / "__0_0.distcp"
    with open(shard, "r+b") as f:
        f.seek(shard.stat().st_size // 2)
        f.write(bytes(4096))
    second = tmp_path / "second.jsonl"
    out = train_llama(6, tmp_path / "resumed", second)
    fallen_back = tmp_path / "fallen_back.jsonl"
    out_fallen_back = train_llama(6, damaged, fallen_back)

    losses, held_out = records(whole)
    assert sorted(losses) == [1, 2, 3, 4, 5, 6] and sorted(held_out) == [2, 4, 6]
    assert abs(losses[1] - math.log(512)) < 0.5  # a fresh model: about uniform over 512 ids
    assert losses[6] < losses[1] - 0.5 and held_out[6] < held_out[2]
    resumed, resumed_held_out = records(second)
    assert sorted(resumed) == [5, 6]  # it went on from step 4
    for step in (5, 6):
        assert resumed[step] == pytest.approx(losses[step], rel=1e-12, abs=0), step
    assert resumed_held_out[6] == pytest.approx(held_out[6], rel=1e-12, abs=0)
    again, _ = records(fallen_back)
    assert sorted(again) == [3, 4, 5, 6], out_fallen_back  # from step 2
    for step in again:
        assert again[step] == pytest.approx(losses[step], rel=1e-12, abs=0), step
    assert f"checkpoint file {shard} is damaged" in out_fallen_back
    assert f"resumed from {damaged / 'step-2'} (step 2)" in out_fallen_back
    assert re.search(r"loss \S+ -> \S+ over 6 steps", out), out
    assert re.search(r"step time: measured \S+ s, predicted \S+ s .*profiled on this", out), out


def test_finetune_hf_saves_what_from_pretrained_loads(tmp_path):
    model = tmp_path / "model"
    made = run([str(REPO / "examples" / "make_hf_model.py"), str(model), "--vocab", "512"], 0)
    assert "LlamaForCausalLM" in made and (model / "tokenizer.json").is_file()
    tuned = tmp_path / "tuned"
    out = run(
        [
            str(REPO / "examples" / "finetune_hf.py"),
            *("--model", str(model), "--out", str(tuned), "--steps", "8"),
            *("--tokens-per-step", "1024", "--context", "512", "--lr", "1e-2"),
        ]
    )
    found = re.search(r"held-out loss (\S+) -> (\S+) over 8 steps; .* gives (\S+)", out)
    assert found, out
    before, after, reloaded = map(float, found.groups())
    assert after < before - 0.3, out
    assert abs(reloaded - after) < 1e-4, out  # float32 model, one forward each way
    assert (tuned / "tokenizer.json").is_file() and (tuned / "config.json").is_file()


def test_train_llama_trains_alike_on_every_layout(tmp_path):
    """The example on 2 stages, with the spread head on 2 stages, on 2 stages x 2 sequence ranks
    and on 2 stages x 2 replicas (4 processes each): the same batches, the same losses step by
    step (float32: the layouts sum the same gradients in other orders)."""
    common = [str(REPO / "examples" / "train_llama.py"), "--steps", "4", "--eval-every", "4"]
    common += ["--tokens-per-step", "1024", "--context", "512"]
    losses = {}
    for name, extra, ranks in [
        ("pipeline", [], 2),
        ("spread", ["--spread-head"], 2),
        ("sequence", ["--pipeline", "2", "--sequence", "2"], 4),
        ("replicas", ["--pipeline", "2", "--replicas", "2"], 4),
    ]:
        metrics = tmp_path / f"{name}.jsonl"
        run([*common, *extra, "--metrics", str(metrics)], ranks=ranks)
        losses[name] = records(metrics)[0]
    assert sorted(losses["pipeline"]) == [1, 2, 3, 4]
    for name in ("spread", "sequence", "replicas"):
        for step, loss in losses["pipeline"].items():
            assert losses[name][step] == pytest.approx(loss, rel=1e-4), (name, step)
