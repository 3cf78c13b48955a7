"""The default group a trainer makes ends with it: once destroyed and no longer referenced, its
threads are gone (torch's lazy import of torch.distributed.nn.functional, done by the first
optimizer built, would otherwise hold it; rendezvous.before_default_group)."""

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
