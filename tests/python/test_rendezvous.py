"""The default group a trainer makes ends with it: once destroyed and no longer referenced, its
threads are gone (torch's lazy import of torch.distributed.nn.functional, done by the first
optimizer built, would otherwise hold it; rendezvous.before_default_group). A closed trainer,
even one still referenced, and a trainer left open at the interpreter's exit hold no thread:
every thread still running when the interpreter finalizes can abort the process
(docs/runtime.md, "Exits")."""

from __future__ import annotations

import subprocess
import sys
import textwrap

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
