"""What InfiniPipe does when the process ends: the process groups it made are destroyed while the
interpreter is still whole, unless a peer was lost (docs/runtime.md, "Exits")."""

from __future__ import annotations

import atexit
from collections.abc import Callable

import torch.distributed as dist

# Set once a run on the pipeline lost a peer (see at_exit).
_peer_lost = False


def peer_lost() -> None:
    """Says a peer was lost: the groups are then left to the process's end (see at_exit)."""
    global _peer_lost
    _peer_lost = True


def was_peer_lost() -> bool:
    """Whether a run on the pipeline lost a peer (peer_lost)."""
    return _peer_lost


def at_exit(shut_down: Callable[[], None]) -> None:
    """Runs shut_down (destroying process groups InfiniPipe made) when the interpreter exits,
    while it is still whole, as torch asks of every program that makes groups (on NCCL it shuts
    the communicators down; docs/runtime.md, "Parallel layout", says what it cannot do on Gloo).
    Skipped once a peer was lost, since destroying a group waits for its work stuck on that
    peer: the rank would then exit only after the backend's timeout, and it is failing anyway."""

    def run() -> None:
        if not _peer_lost:
            shut_down()

    atexit.register(run)


def before_default_group(sharded: bool = False) -> None:
    """Call before the default group is made. torch.distributed.nn.functional's functions take
    `group.WORLD` as a default argument, evaluated when the module is first imported, and torch
    imports it lazily (torch._dynamo does, when the first optimizer is built). Imported once the
    default group exists, it holds that group for good (10 references, in tuples the garbage
    collector does not see), so destroy_process_group cannot end the group's threads and the
    Gloo exit race stays possible (docs/runtime.md, "Parallel layout"). Imported before, its
    defaults are None. `sharded`: the trainer will build a ZeRO optimizer, whose module does the
    same (`_broadcast_object(group=dist.group.WORLD)`); imported only then, since it takes
    seconds."""
    import torch.distributed.nn.functional  # noqa: F401

    if sharded:
        import torch.distributed.optim.zero_redundancy_optimizer  # noqa: F401


def destroy_default_group() -> None:
    """Destroys the default group (and every group left) if the user has not already."""
    if dist.is_initialized():
        dist.destroy_process_group()
