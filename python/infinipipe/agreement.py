"""What every rank must agree on before a step runs, and how a failure reaches every rank."""

from __future__ import annotations

import datetime
import hashlib
import json
from typing import Any

import torch.distributed as dist

from .errors import Error


def digest(*parts: Any) -> str:
    h = hashlib.sha256()
    for p in parts:
        h.update(p if isinstance(p, bytes) else repr(p).encode())
    return h.hexdigest()[:16]


def report_failure(message: str, step: int, rank: int, world_size: int) -> str:
    """Publishes this rank's failure in the group's store and adds what other ranks
    published: when a lost rank makes its neighbour fail and exit, the ranks further away
    lose that neighbour, and the store tells them which rank was lost first."""
    try:
        store = dist.distributed_c10d._get_default_store()
        previous_timeout = store.timeout
    except Exception:  # noqa: BLE001 - no store (a group made without one)
        return message
    try:
        store.set_timeout(datetime.timedelta(seconds=2))
        prefix = f"infinipipe/failure/step{step}/rank"
        store.set(f"{prefix}{rank}", message)
        reports = [
            (r, store.get(f"{prefix}{r}").decode())
            for r in range(world_size)
            if r != rank and store.check([f"{prefix}{r}"])
        ]
    except Exception:  # noqa: BLE001 - the store may be gone with the lost rank
        return message
    finally:
        try:
            store.set_timeout(previous_timeout)
        except Exception:  # noqa: BLE001
            pass
    for r, report in reports:
        message += f"\n  (rank {r} reported before: {report})"
    return message


def agree(
    executor: Any,
    error: Exception | None,
    config_fingerprint: str,
    batch_fingerprint: str | None,
    plan_hash: str | None,
) -> None:
    """One all_gather: every rank learns whether any rank rejected the step and whether
    all hold the same configuration, batch and plan; on any difference every rank raises."""
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
