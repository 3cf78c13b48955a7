"""Joining the ranks into a process group, with every wait bounded (docs/design.md, "Failures").

torchrun's env:// rendezvous, except that a rank that never comes is named on every other rank
after the timeout: plain `init_process_group` makes rank 0 fail with "2/3 clients joined" and
leaves the other ranks to time out inside the backend's own set-up, neither naming the rank.
"""

from __future__ import annotations

import datetime
import os
import threading
from collections.abc import Callable
from typing import Any

import torch
import torch.distributed as dist

from ..errors import Error, LostRankError
from .exit_hooks import at_exit, before_default_group, destroy_default_group

# A live store answers a key check in milliseconds; one whose host stopped never does.
_CHECK_TIMEOUT_S = 2.0


def local_device(share_gpus: bool = False) -> torch.device:
    """This rank's device: its GPU (torchrun's LOCAL_RANK), made the current one, or the CPU.
    With more ranks on this node than GPUs, `share_gpus` puts rank r on GPU r % count
    (RuntimeConfig.share_gpus); otherwise every rank raises an error saying what to do."""
    if not torch.cuda.is_available():
        return torch.device("cpu")
    local_rank, count = int(os.environ.get("LOCAL_RANK", 0)), torch.cuda.device_count()
    if shares_gpus() and not share_gpus:
        raise Error(
            f"this node runs {_local_ranks()} ranks but has {count} GPU{'s' if count != 1 else ''}: "
            f"launch one rank per GPU (torchrun --nproc_per_node={count}), or let ranks share "
            "GPUs with RuntimeConfig(share_gpus=True) (over Gloo, pipeline messages staged "
            "through host memory: for tests, not for speed)"
        )
    device = torch.device("cuda", local_rank % count)
    torch.cuda.set_device(device)
    return device


def shares_gpus() -> bool:
    """Whether this node runs more ranks than it has GPUs (torchrun's LOCAL_WORLD_SIZE and
    LOCAL_RANK)."""
    return torch.cuda.is_available() and _local_ranks() > torch.cuda.device_count()


def _local_ranks() -> int:
    """The ranks on this node: LOCAL_WORLD_SIZE, or at least this one's LOCAL_RANK + 1."""
    return max(int(os.environ.get("LOCAL_WORLD_SIZE", 1)), int(os.environ.get("LOCAL_RANK", 0)) + 1)


def default_group(
    device: torch.device,
    timeout_s: float,
    describe: Callable[[int], str],
    sharded: bool = False,
) -> Any:
    """The default group, made here when the caller has not: from torchrun's environment (RANK,
    WORLD_SIZE, MASTER_ADDR, MASTER_PORT), or a world of one without it; NCCL for a GPU, Gloo
    otherwise and where ranks share a GPU (NCCL refuses two ranks on one device). One made here
    is destroyed at exit if the caller does not. `sharded`: the trainer may build a ZeRO
    optimizer (exit_hooks.before_default_group)."""
    if not dist.is_initialized():
        before_default_group(sharded)
        backend = "nccl" if device.type == "cuda" and not shares_gpus() else "gloo"
        if "WORLD_SIZE" in os.environ and "RANK" in os.environ:
            join_default_group(backend, timeout_s, describe)
        else:
            # An in-process store: a world of one has no one to meet, and a TCP port picked
            # here could be taken by another process before the store binds it.
            dist.init_process_group(
                backend,
                store=dist.HashStore(),
                rank=0,
                world_size=1,
                timeout=datetime.timedelta(seconds=timeout_s),
            )
        at_exit(destroy_default_group)  # made here, so ended here if the caller does not
    return dist.group.WORLD


def bounded(fn: Callable[[], Any], seconds: float, what: str) -> Any:
    """fn() in a helper thread, or TimeoutError after `seconds`: a store whose host stopped
    blocks some calls (check) however the store's timeout is set."""
    result: dict[str, Any] = {}

    def run() -> None:
        try:
            result["value"] = fn()
        except BaseException as e:  # noqa: BLE001 - re-raised in the caller's thread
            result["error"] = e

    thread = threading.Thread(target=run, daemon=True, name=f"infinipipe {what}")
    thread.start()
    thread.join(seconds)
    if thread.is_alive():
        raise TimeoutError(f"{what} did not answer within {seconds:g} s")
    if "error" in result:
        raise result["error"]
    return result.get("value")


def join_default_group(backend: str, timeout_s: float, describe: Callable[[int], str]) -> None:
    """init_process_group from torchrun's environment (RANK, WORLD_SIZE, MASTER_ADDR,
    MASTER_PORT), after every rank has said it is there."""
    rank, world_size = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    timeout = datetime.timedelta(seconds=timeout_s)
    store = _rendezvous_store(rank, world_size, timeout)
    keys = [f"{store_prefix()}/joined/rank{r}" for r in range(world_size)]
    try:
        bounded(lambda: store.set(keys[rank], "1"), timeout_s, "the rendezvous store")
    except Exception:  # noqa: BLE001
        raise store_lost(timeout_s) from None
    wait_for_ranks(store, keys, rank, timeout_s, describe, "join the process group")
    # The prefix init_process_group gives a store it makes itself, within this attempt's: with
    # torch's own keys shared between attempts, a restarted rank can read the address a rank of
    # the failed attempt published and fail to connect (seen with torch 2.13's torchrun).
    dist.init_process_group(
        backend,
        store=dist.PrefixStore(f"{store_prefix()}/default_pg", store),
        rank=rank,
        world_size=world_size,
        timeout=timeout,
    )


def _rendezvous_store(rank: int, world_size: int, timeout: datetime.timedelta) -> Any:
    """The store env:// would make (torch/distributed/rendezvous.py: hosted by rank 0, or by
    torchrun's agent when it says so), but without rank 0 waiting for every client: the wait is
    ours, bounded, and names who is missing."""
    host, port = os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"])
    agent_hosts_it = _agent_hosts_store()
    try:
        return dist.TCPStore(
            host,
            port,
            world_size,
            is_master=rank == 0 and not agent_hosts_it,
            timeout=timeout,
            wait_for_workers=False,
            multi_tenant=not agent_hosts_it,
        )
    except Exception as e:  # noqa: BLE001 - the host is unreachable or the port is taken
        raise LostRankError(
            f"setup: could not reach the rendezvous store at {host}:{port} within "
            f"{timeout.total_seconds():g} s ({type(e).__name__}: {str(e).splitlines()[0]}): "
            f"{'torchrun hosts it' if agent_hosts_it else 'rank 0 hosts it'}; check that it "
            "runs and that MASTER_ADDR and MASTER_PORT are the same on every rank",
            ranks=[] if agent_hosts_it else [0],
            step=0,
        ) from None


def store_prefix() -> str:
    """Where InfiniPipe's keys live in the rendezvous store. torchrun's agent keeps its store
    across restarts of the workers, so each attempt has its own keys: a restarted rank must not
    read what a rank of the failed attempt wrote."""
    return f"infinipipe/attempt{os.environ.get('TORCHELASTIC_RESTART_COUNT', '0')}"


def hosts_rendezvous_store() -> bool:
    """Whether this process hosts the rendezvous store: rank 0, unless torchrun's agent does."""
    return int(os.environ.get("RANK", "0")) == 0 and not _agent_hosts_store()


def _agent_hosts_store() -> bool:
    return os.environ.get("TORCHELASTIC_USE_AGENT_STORE") == "True"


def wait_for_ranks(
    store: Any,
    keys: list[str],
    rank: int,
    timeout_s: float,
    describe: Callable[[int], str],
    what: str,
) -> None:
    """Returns once every rank r (this one is `rank`) has written keys[r]; otherwise, after timeout_s, a
    LostRankError naming the ranks that did not (rank 0 when the store itself stopped
    answering)."""
    try:
        bounded(
            lambda: store.wait(keys, datetime.timedelta(seconds=timeout_s)),
            timeout_s + 1,
            "the rendezvous store",
        )
        return
    except Exception:  # noqa: BLE001 - a rank never came, or the store's host is gone
        pass
    try:
        missing = [
            r
            for r, key in enumerate(keys)
            if not bounded(lambda k=key: store.check([k]), _CHECK_TIMEOUT_S, "the store")
        ]
    except Exception:  # noqa: BLE001
        raise store_lost(timeout_s) from None
    if not missing:  # the last rank came just after the timeout
        return
    # each rank concludes on its own timeout, the host's may end first
    came = [r for r in range(len(keys)) if r not in missing]
    leave_together(store, keys, rank, timeout_s, "concluded", came)
    names = ", ".join(describe(r) for r in missing)
    raise LostRankError(
        f"setup: {names} did not {what} within {timeout_s:g} s: it may have exited, failed "
        "before creating its Trainer, or be much slower; check its log",
        ranks=missing,
        step=0,
    )


def leave_together(
    store: Any, keys: list[str], rank: int, timeout_s: float, done: str, ranks: list[int]
) -> None:
    """The store dies with the rank hosting it, and that rank may return or raise as soon as it
    is done; a rank not done yet would then find the store gone and blame its host. So each rank
    says it is `done` (a key beside its own in `keys`), and the host waits (bounded) until every
    rank in `ranks` has."""
    try:
        bounded(lambda: store.set(f"{keys[rank]}/{done}", "1"), timeout_s, "the rendezvous store")
        if hosts_rendezvous_store():
            marks = [f"{keys[r]}/{done}" for r in ranks]
            bounded(
                lambda: store.wait(marks, datetime.timedelta(seconds=timeout_s)),
                timeout_s + 1,
                "the rendezvous store",
            )
    except Exception:  # noqa: BLE001 - a rank that came has gone since: nothing to wait for
        pass


def store_lost(timeout_s: float) -> LostRankError:
    return LostRankError(
        f"setup: the rendezvous store (MASTER_ADDR) stopped answering within {timeout_s:g} s: "
        "the rank hosting it (rank 0 unless launched with torchrun) may have died; check its log",
        ranks=[0],
        step=0,
    )
