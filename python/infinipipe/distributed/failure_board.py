"""How every rank learns which rank was lost (docs/design.md, "Failures").

When a rank stops or dies, its neighbours' waits time out or lose the connection, and the ranks
further along the pipeline lose those neighbours in turn: each rank, on its own, would name the
wrong rank. So every rank hosts a small board (a TCPStore server of its own, not the rendezvous
store: that one lives in rank 0, which may be the rank that stopped). A rank whose step fails
writes on every other rank's board whom it was waiting for (or that it failed itself), then
reads its own board for a moment: following "rank a waited for rank b" from its own wait, the
chain ends at the rank that was lost (it never writes), or at the rank whose own error started
it all. The first rank to conclude writes its verdict on the others' boards, and a rank that
reads a verdict adopts it: ranks that agree on nothing else still agree on that, within the
timeout plus GRACE_S.
"""

from __future__ import annotations

import datetime
import json
import os
import socket
import time
from collections.abc import Callable
from typing import Any

import torch.distributed as dist

from ..errors import Error, LostRankError, RankFailedError

# How long a failing rank waits for the others' words before concluding on its own. The ranks'
# own waits time out within a few milliseconds of each other when a peer stops (they all wait on
# the same timeout for work that was already in flight), so a second and a half covers them with
# margin and keeps "timeout + 2 s" for every rank.
GRACE_S = 1.5
# Connecting to the other boards happens once, at set-up, while every rank is alive (a stopped
# rank's server would take connections and never answer). A write is then one message on an open
# connection: TCPStore's set does not wait for an answer, so it returns at once to a stopped
# rank and fails in milliseconds to a dead one (measured with torch 2.13: 0.01 ms, 5 ms).
_CONNECT_TIMEOUT_S = 10.0
_POLL_S = 0.02


def reachable_host() -> str:
    """This host's address as the other ranks reach it: the interface that routes to the
    rendezvous host (no packet is sent)."""
    master = os.environ.get("MASTER_ADDR", "127.0.0.1")
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            s.connect((master, 9))
            return s.getsockname()[0]
    except OSError:
        return "127.0.0.1"


class FailureBoard:
    """This rank's board and the other ranks' addresses (set with `connect`)."""

    def __init__(self, rank: int, world_size: int, describe: Callable[[int], str]) -> None:
        self.rank = rank
        self.world_size = world_size
        self.describe = describe
        self.host = reachable_host()
        # The store's own client connects under the connect timeout (a loaded host can take
        # more than GRACE_S to accept it); its reads then wait at most GRACE_S.
        self._store = dist.TCPStore(
            "0.0.0.0",
            0,
            is_master=True,
            wait_for_workers=False,
            timeout=datetime.timedelta(seconds=_CONNECT_TIMEOUT_S),
        )
        self._store.set_timeout(datetime.timedelta(seconds=GRACE_S))
        self.address = f"{self.host}:{self._store.port}"
        self._clients: dict[int, Any] = {}  # rank -> a client of its board (None: gone)

    def connect(self, addresses: list[str]) -> None:
        """Opens a connection to every other rank's board (addresses in rank order)."""
        self._clients = {}
        for r, address in enumerate(addresses):
            if r == self.rank:
                continue
            host, port = address.rsplit(":", 1)
            try:
                self._clients[r] = dist.TCPStore(
                    host,
                    int(port),
                    is_master=False,
                    wait_for_workers=False,
                    timeout=datetime.timedelta(seconds=_CONNECT_TIMEOUT_S),
                )
            except Exception:  # noqa: BLE001 - gone already: its silence will say so
                self._clients[r] = None
        # Nobody leaves set-up before every rank has its connections: a rank that closed its
        # board at once (a short run) made a slower peer retry the connect until its timeout,
        # twice (10-40 s seen under load). Bounded: a rank gone meanwhile is not waited for.
        self._publish(f"connected/rank{self.rank}", {"rank": self.rank}, skip=[])
        deadline = time.monotonic() + _CONNECT_TIMEOUT_S
        keys = [f"connected/rank{r}" for r, c in self._clients.items() if c is not None]
        while keys and not self._store.check(keys) and time.monotonic() < deadline:
            time.sleep(_POLL_S)

    def close(self) -> None:
        """Drops the connections to the other boards and this rank's server, whose thread
        (torch's TCPStore) is joined here, while the interpreter is whole, rather than at its
        finalization."""
        self._clients = {}
        self._store = None

    # --- writing and reading words ---

    def _publish(self, key: str, word: dict, skip: list[int]) -> None:
        """Writes `word` under `key` on every other rank's board but those in `skip`."""
        value = json.dumps(word)
        for r, client in self._clients.items():
            if client is None or r in skip:
                continue
            try:
                client.set(key, value)
            except Exception:  # noqa: BLE001 - that rank is gone: its silence says so
                self._clients[r] = None

    def _read(self, step: int, words: dict[int, dict]) -> dict | None:
        """Adds the words written here since the last read; returns a verdict, if any."""
        for r in range(self.world_size):
            key = f"step{step}/rank{r}"
            if r not in words and self._store.check([key]):
                words[r] = json.loads(self._store.get(key))
        key = f"step{step}/verdict"
        return json.loads(self._store.get(key)) if self._store.check([key]) else None

    # --- a failed step ---

    def report_own_failure(self, step: int, error: BaseException) -> None:
        """This rank's step failed by itself (not waiting on a peer): say so, so that the ranks
        waiting for it name it and its error rather than a timeout."""
        message = f"{type(error).__name__}: {error}".splitlines()[0]
        word = {"blames": None, "own": True, "closed": False, "message": message}
        self._publish(f"step{step}/rank{self.rank}", word, skip=[])

    def diagnose(self, step: int, error: Any) -> Error:
        """The error to raise for a wait on peers that failed (an _C.runtime.PeerError: its
        `rank` is the peer waited for, -1 for a collective). Writes this rank's word, reads the
        others' until a rank concluded or the chain is clear (at most GRACE_S), names the rank
        lost first, and tells the others."""
        blames = None if error.rank < 0 else int(error.rank)
        # A closed connection means that rank is gone: had it failed by itself, or on a peer, its
        # word would already be here (a rank writes before it raises, and exits after).
        closed = blames is not None and not error.timed_out
        mine = {"blames": blames, "own": False, "closed": closed, "message": str(error)}
        self._publish(f"step{step}/rank{self.rank}", mine, skip=[blames])
        words = {self.rank: mine}
        deadline = time.monotonic() + GRACE_S
        while True:
            verdict = self._read(step, words)
            if verdict is not None:
                lost, failed = verdict["lost"], verdict["failed"]
                break
            lost, failed = self._conclude(words)
            silent = {r for r in range(self.world_size) if r not in words}
            gone = {w["blames"] for w in words.values() if w["closed"]}
            if (
                failed
                or (lost and set(lost) <= gone)
                or (blames is not None and lost and silent <= set(lost))
                or time.monotonic() >= deadline
            ):
                self._publish(
                    f"step{step}/verdict", {"lost": lost, "failed": failed}, skip=lost + failed
                )
                break
            time.sleep(_POLL_S)
        return self._error(step, str(error), words, lost, failed)

    def _conclude(self, words: dict[int, dict]) -> tuple[list[int], list[int]]:
        """(lost, failed): follow the waits from this rank to the end of the chain. A silent
        rank at the end was lost; a rank that wrote it failed by itself; a collective (no rank
        known) leaves the ranks that have not written as the suspects."""
        seen, at = {self.rank}, self.rank
        while True:
            blames = words[at]["blames"]
            if blames is None:
                break
            if blames not in words:
                return [blames], []
            if blames in seen:  # ranks waiting on each other: nobody is lost
                return [], []
            seen.add(blames)
            at = blames
        if words[at]["own"]:
            return [], [at]
        return [r for r in range(self.world_size) if r not in words], []

    def _error(
        self, step: int, message: str, words: dict[int, dict], lost: list[int], failed: list[int]
    ) -> Error:
        others = "".join(
            f"\n  {self.describe(r)} reported: {w['message']}"
            for r, w in sorted(words.items())
            if r != self.rank
        )
        detail = f"\n  this rank ({self.describe(self.rank)}): {message}{others}"
        if failed:
            names = ", ".join(self.describe(r) for r in failed)
            return RankFailedError(
                f"step {step}: {names} failed, so this rank's step cannot finish{detail}",
                ranks=failed,
                step=step,
            )
        if lost:
            names = ", ".join(self.describe(r) for r in lost)
            return LostRankError(
                f"step {step}: lost {names}: it stopped answering or died (no word from it "
                f"within the timeout); check its log and its host{detail}",
                ranks=lost,
                step=step,
            )
        return LostRankError(f"step {step}: {message}{others}", ranks=[], step=step)
