"""What every rank must agree on before a step runs, and how a failure reaches every rank."""

from __future__ import annotations

import hashlib
import itertools
import json
from collections.abc import Callable
from typing import Any

import torch.distributed as dist

from ..errors import Error, LostRankError, RankFailedError
from .rendezvous import bounded, leave_together, store_lost, store_prefix, wait_for_ranks


def digest(*parts: Any) -> str:
    h = hashlib.sha256()
    for p in parts:
        h.update(p if isinstance(p, bytes) else repr(p).encode())
    return h.hexdigest()[:16]


def agree(
    executor: Any,
    error: Exception | None,
    config_fingerprint: str,
    batch_fingerprint: str | None,
    plan_hash: str | None,
    replica_of: Callable[[int], int] = lambda rank: 0,
) -> None:
    """One all_gather: every rank learns whether any rank rejected the step and whether
    all hold the same configuration and batch, and the ranks of each data replica
    (replica_of(rank)) the same plan; on any difference every rank raises."""
    mine = (
        None if error is None else f"{type(error).__name__}: {error}",
        config_fingerprint,
        batch_fingerprint,
        plan_hash,
    )
    # Through the executor, not dist.all_gather_object: Gloo keeps its last finished work
    # (and its tensors) alive, and a Python-owned tensor released at interpreter shutdown
    # aborts the process after a successful run.
    everyone = [json.loads(b) for b in executor.all_gather_text(json.dumps(mine))]
    if error is not None:
        raise error
    failed = [(r, e[0]) for r, e in enumerate(everyone) if e[0] is not None]
    if failed:
        raise Error(
            "rank(s) " + ", ".join(str(r) for r, _ in failed) + " rejected the step, "
            "so no rank runs it: " + "; ".join(f"rank {r}: {m}" for r, m in failed)
        )
    for index, what in (
        (1, "trainer configurations (model, layer split, plan config, dtype)"),
        (2, "batches"),
        (3, "plans"),
    ):
        values = [e[index] for e in everyone]
        if index == 3:  # each replica plans its own share of the batch
            values = [f"replica {replica_of(r)}: {v}" for r, v in enumerate(values)]
            if len({v for v in values}) == len({replica_of(r) for r in range(len(values))}):
                continue
        if len(set(values)) > 1:
            groups: dict[str, list[int]] = {}
            for r, v in enumerate(values):
                groups.setdefault(v, []).append(r)
            detail = "; ".join(f"ranks {rs} have {v}" for v, rs in groups.items())
            raise Error(
                f"the ranks hold different {what}, so the step cannot run: "
                f"{detail}. Every rank must run the same script with the same "
                f"configuration on the same data"
            )


def agree_on_setup(
    group: Any,
    board_address: str,
    error: Exception | None,
    timeout_s: float,
    describe: Callable[[int], str],
) -> list[str]:
    """Every rank says through the rendezvous store whether it set up its stage (and where its
    failure board listens); every rank raises, naming the ranks, when one failed or never came.
    Returns the boards' addresses in rank order."""
    rank, world_size = dist.get_rank(group), dist.get_world_size(group)
    store = dist.distributed_c10d._get_default_store()
    ranks = dist.get_process_group_ranks(group)
    prefix = f"{store_prefix()}/setup/{digest(ranks, _next_setup())}/rank"
    mine = {"board": board_address, "error": None if error is None else _one_line(error)}
    keys = [f"{prefix}{r}" for r in range(world_size)]
    try:
        bounded(lambda: store.set(keys[rank], json.dumps(mine)), timeout_s, "the rendezvous store")
        wait_for_ranks(store, keys, rank, timeout_s, describe, "reach the trainer's setup")
        words = [json.loads(bounded(lambda k=k: store.get(k), timeout_s, "store")) for k in keys]
        # the host may raise as soon as it has read every word: not before every rank has
        leave_together(store, keys, rank, timeout_s, "read", list(range(world_size)))
    except Exception as e:  # noqa: BLE001 - a rank never came, or the store's host is gone
        if error is not None:  # this rank's own failure comes first
            raise error from None
        raise e if isinstance(e, LostRankError) else store_lost(timeout_s) from None
    if error is not None:
        raise error
    failed = [r for r, w in enumerate(words) if w["error"] is not None]
    if failed:
        raise RankFailedError(
            "setup: "
            + "; ".join(
                f"{describe(r)} failed to set up its stage: {words[r]['error']}" for r in failed
            ),
            ranks=failed,
            step=0,
        )
    return [w["board"] for w in words]


_setups = itertools.count()


def _next_setup() -> int:
    """Trainers made in the same order on every rank get the same number: their store keys."""
    return next(_setups)


def _one_line(error: BaseException) -> str:
    return f"{type(error).__name__}: {error}".splitlines()[0]
