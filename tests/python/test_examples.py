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
        "config.toml",  # the options of the run, which the resumed run reads back
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


def agent(args: list[str], ranks: int, port: int, restarts: int = 0, nodes: int = 1, node: int = 0):
    """A torchrun agent (not waited for): `ranks` workers of a c10d rendezvous at `port`."""
    command = [sys.executable, "-m", "torch.distributed.run", f"--nproc_per_node={ranks}"]
    command += [f"--nnodes={nodes}", f"--node-rank={node}", f"--max-restarts={restarts}"]
    command += ["--rdzv-backend=c10d", f"--rdzv-endpoint=127.0.0.1:{port}", *args]
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=str(REPO / "python"))
    return subprocess.Popen(
        command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env
    )


def worker_pid(agent_pid: int, rank: int) -> int | None:
    """The agent's worker process of global rank `rank` (its environment says RANK)."""
    children = Path(f"/proc/{agent_pid}/task/{agent_pid}/children").read_text().split()
    for pid in children:
        try:
            environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
        except OSError:  # exited meanwhile
            continue
        if f"RANK={rank}".encode() in environ:
            return int(pid)
    return None


def records_since(metrics: Path, seen: int) -> tuple[int, int]:
    """(lines the metrics file has, the last training step among those after the first `seen`):
    a kill waits for a step the group trained since the kill before it."""
    lines = metrics.read_text().splitlines() if metrics.exists() else []
    done = []
    for line in lines[seen:]:
        try:
            done.append(json.loads(line)["step"])
        except ValueError:  # the line being written
            pass
    return len(lines), max(done, default=0)


@pytest.mark.parametrize("ranks, kills", [(2, 1), (4, 2)])
def test_a_killed_rank_restarts_the_group_and_training_resumes(tmp_path, ranks, kills):
    """torchrun --max-restarts 3: a rank SIGKILLed at a random step (after the first checkpoint)
    makes the agent restart the group, and the example resumes by itself from the newest whole
    checkpoint: every step's loss, before and after each restart, equals the uninterrupted run's
    bit for bit. A kill can land while a checkpoint is being written: that one is never loaded."""
    import random
    import signal
    import time

    steps = 8
    common = [str(REPO / "examples" / "train_llama.py"), "--steps", str(steps)]
    common += ["--tokens-per-step", "1024", "--context", "512", "--eval-every", "100"]
    common += ["--cost-model", "analytic"]  # the same plans whatever the machine's load
    if ranks == 4:
        common += ["--pipeline", "2", "--replicas", "2"]
    whole = tmp_path / "whole.jsonl"
    run([*common, "--metrics", str(whole)], ranks=ranks)
    expected = records(whole)[0]

    metrics, checkpoints = tmp_path / "restarted.jsonl", tmp_path / "checkpoints"
    args = [*common, "--save-every", "2", "--checkpoint-dir", str(checkpoints)]
    proc = agent([*args, "--metrics", str(metrics)], ranks, free_port(), restarts=3)
    chosen = sorted(random.Random().sample(range(3, steps), kills))  # after step 2's checkpoint
    killed, seen = [], 0
    deadline = time.monotonic() + 600
    for at in chosen:
        lines = seen
        while proc.poll() is None and time.monotonic() < deadline:
            lines, step = records_since(metrics, seen)
            if step >= at:
                break
            time.sleep(0.05)
        victim = random.randrange(ranks)
        pid = worker_pid(proc.pid, victim)
        if pid is not None and proc.poll() is None:
            os.kill(pid, signal.SIGKILL)
            killed.append((at, victim))
        seen = lines
    try:
        out, err = proc.communicate(timeout=max(1.0, deadline - time.monotonic()))
    finally:
        proc.kill()
    assert proc.returncode == 0, f"kills {killed}\n{launch_log(out, err)}"
    assert len(killed) == kills, (chosen, killed)
    assert out.count("resumed from ") == kills, (killed, out)
    seen = [json.loads(line) for line in metrics.read_text().splitlines()]
    losses = [(r["step"], float(r["loss"])) for r in seen if "loss" in r]
    assert {step for step, _ in losses} == set(range(1, steps + 1)), (killed, losses)
    for step, loss in losses:  # each attempt's steps, the repeated ones too
        assert loss == expected[step], (killed, step, loss, expected[step])


def test_two_agents_as_two_nodes_train_like_one(tmp_path):
    """Two torchrun agents on this machine acting as two nodes of 2 processes each (`--nnodes 2`,
    c10d rendezvous): pipeline 2 x SP 2, the SP groups inside a node and the pipeline across the
    two (the layout's GPUs per node from LOCAL_WORLD_SIZE), and pipeline 2 x data 2: the losses
    of one agent running all 4 processes."""
    common = [str(REPO / "examples" / "train_llama.py"), "--steps", "3", "--eval-every", "100"]
    common += ["--tokens-per-step", "1024", "--context", "512", "--cost-model", "analytic"]
    for layout in (["--sequence", "2"], ["--replicas", "2"]):
        one = tmp_path / ("one%s.jsonl" % layout[0])
        run([*common, "--pipeline", "2", *layout, "--metrics", str(one)], ranks=4)
        two = tmp_path / ("two%s.jsonl" % layout[0])
        port = free_port()
        agents = [
            agent(
                [*common, "--pipeline", "2", *layout, "--metrics", str(two)],
                2,
                port,
                nodes=2,
                node=node,
            )
            for node in (0, 1)
        ]
        outputs = [a.communicate(timeout=600) for a in agents]
        for a, (out, err) in zip(agents, outputs):
            assert a.returncode == 0, launch_log(out, err)
        want, got = records(one)[0], records(two)[0]
        assert sorted(got) == [1, 2, 3], got
        for step, loss in want.items():
            assert got[step] == pytest.approx(loss, rel=1e-4), (layout, step)
