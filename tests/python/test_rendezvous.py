"""The default group a trainer makes ends with it: once destroyed and no longer referenced, its
threads are gone (torch's lazy import of torch.distributed.nn.functional, done by the first
optimizer built, would otherwise hold it; rendezvous.before_default_group). A closed trainer,
even one still referenced, and a trainer left open at the interpreter's exit hold no thread:
every thread still running when the interpreter finalizes can abort the process
(docs/runtime.md, "Exits"). A node with more ranks than GPUs: an error saying what to do, or,
with RuntimeConfig(share_gpus=True), rank r on GPU r % count over Gloo (the device count is
patched here: the runs on a real GPU are tests/python/gpu/test_shared_gpu.py)."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest
import torch

import infinipipe
from infinipipe.distributed import rendezvous

SCRIPT = textwrap.dedent(
    """
    import gc, os, sys
    import torch
    import torch.distributed as dist
    import infinipipe
    from infinipipe.models.llama import LlamaConfig
    from infinipipe.distributed.rendezvous import destroy_default_group

    def threads():
        return len(os.listdir("/proc/self/task"))

    torch.set_num_threads(1)
    alone = threads()
    trainer = infinipipe.Trainer(
        LlamaConfig.tiny(), lambda p: torch.optim.SGD(p, lr=0.1), timeout_s=30
    )
    trainer.step([torch.randint(0, 512, (33,))])
    with_group = threads()
    trainer.close()
    del trainer
    destroy_default_group()
    gc.collect()
    print(alone, with_group, threads())
    """
)


def test_the_default_group_a_trainer_made_leaves_no_thread_once_destroyed():
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT], capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr
    alone, with_group, after = map(int, done.stdout.split()[-3:])
    assert with_group > alone  # the group's threads, while it runs
    assert after == alone, done.stdout


PRELUDE = textwrap.dedent(
    """
    import atexit, os
    import torch
    import infinipipe
    from infinipipe.models.llama import LlamaConfig
    from infinipipe.distributed.rendezvous import destroy_default_group

    def threads():
        return len(os.listdir("/proc/self/task"))

    torch.set_num_threads(1)
    alone = threads()
    """
)

# Closed, not deleted: the executor, the optimizer and the trainer itself still referenced; a
# plan being made ahead when it closes (its thread is joined by close).
CLOSED = PRELUDE + textwrap.dedent(
    """
    trainer = infinipipe.Trainer(
        LlamaConfig.tiny(), lambda p: torch.optim.SGD(p, lr=0.1), timeout_s=30
    )
    batch = [torch.randint(0, 512, (33,))]
    trainer.step(batch)
    trainer.prefetch(batch)
    with_group = threads()
    trainer.close()
    destroy_default_group()
    print(alone, with_group, threads())
    """
)

# Neither closed nor destroyed: the exit hooks close it. The handler registered before the
# trainer runs after them (atexit's order), while the interpreter is still whole.
LEFT_OPEN = PRELUDE + textwrap.dedent(
    """
    counts = [alone]
    atexit.register(lambda: print(*counts, threads(), flush=True))
    trainer = infinipipe.Trainer(
        LlamaConfig.tiny(), lambda p: torch.optim.SGD(p, lr=0.1), timeout_s=30
    )
    batch = [torch.randint(0, 512, (33,))]
    trainer.step(batch)
    trainer.prefetch(batch)
    counts.append(threads())
    """
)


def _thread_counts(script: str) -> tuple[int, int, int]:
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr
    alone, with_group, after = map(int, done.stdout.split()[-3:])
    return alone, with_group, after


def test_a_closed_trainer_still_referenced_leaves_no_thread():
    alone, with_group, after = _thread_counts(CLOSED)
    assert with_group > alone
    assert after == alone, (alone, with_group, after)


def test_a_trainer_left_open_leaves_no_thread_to_the_interpreter_finalization():
    alone, with_group, after = _thread_counts(LEFT_OPEN)
    assert with_group > alone
    assert after == alone, (alone, with_group, after)


@pytest.fixture
def one_gpu(monkeypatch):
    """torch sees one GPU; set_device records the device instead of using it."""
    chosen = []
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    monkeypatch.setattr(torch.cuda, "set_device", chosen.append)
    return chosen


@pytest.mark.parametrize("local_rank", [0, 1, 2])
def test_more_ranks_than_gpus_is_an_error_on_every_rank(one_gpu, monkeypatch, local_rank):
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "3")
    monkeypatch.setenv("LOCAL_RANK", str(local_rank))
    with pytest.raises(infinipipe.Error) as error:
        rendezvous.local_device()
    message = str(error.value)
    assert "runs 3 ranks but has 1 GPU" in message
    assert "--nproc_per_node=1" in message and "share_gpus=True" in message
    assert one_gpu == []


@pytest.mark.parametrize("local_rank", [0, 1, 2])
def test_shared_gpus_put_rank_r_on_gpu_r_mod_count_over_gloo(one_gpu, monkeypatch, local_rank):
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "3")
    monkeypatch.setenv("LOCAL_RANK", str(local_rank))
    assert rendezvous.local_device(share_gpus=True) == torch.device("cuda", 0)
    assert one_gpu == [torch.device("cuda", 0)]
    assert rendezvous.shares_gpus()


def test_one_rank_per_gpu_keeps_its_own(one_gpu, monkeypatch):
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "1")
    monkeypatch.setenv("LOCAL_RANK", "0")
    assert rendezvous.local_device() == torch.device("cuda", 0)
    assert not rendezvous.shares_gpus()


def test_without_local_world_size_a_rank_past_the_gpus_is_caught(one_gpu, monkeypatch):
    monkeypatch.delenv("LOCAL_WORLD_SIZE", raising=False)
    monkeypatch.setenv("LOCAL_RANK", "1")
    with pytest.raises(infinipipe.Error, match="runs 2 ranks but has 1 GPU"):
        rendezvous.local_device()
