"""Around every run on the pipeline and every collective: a lost peer becomes the error naming the
rank lost first, on every rank, and a failure of this rank's own is told to the ranks waiting for
it (failure_board.py; docs/design.md, "Failures")."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator
from typing import Any

from .. import _C
from .exit_hooks import peer_lost
from .failure_board import FailureBoard
from .gradient_group import CollectiveFailure

_log = logging.getLogger("infinipipe")


class Failures:
    """The failure board of a world of several ranks (None for one) and the count of runs on
    the pipeline, which keys the board: every rank counts alike, since every rank makes the same
    calls in the same order."""

    board: FailureBoard | None
    calls: int

    def __init__(self, board: FailureBoard | None) -> None:
        self.board = board
        self.calls = 0

    def close(self) -> None:
        """Closes the board (FailureBoard.close); failures are then reported unnamed."""
        if self.board is not None:
            self.board.close()
            self.board = None

    def next_call(self) -> None:
        """A new run on the pipeline (or a collective of its own) starts."""
        self.calls += 1

    def lost_peer(self, error: Any) -> Exception:
        """The error naming the rank lost first, for a wait on peers that failed."""
        peer_lost()  # the groups are left to the process's end (exit_hooks.at_exit)
        _log.debug("call %d: the backend said: %s", self.calls, error.backend_detail)
        if self.board is None:
            return error
        return self.board.diagnose(self.calls, error)

    @contextlib.contextmanager
    def named(self) -> Iterator[None]:
        """A lost peer inside becomes the error naming the rank lost first; an error of this
        rank's own (its model raised) is told to the ranks waiting, then raised."""
        try:
            yield
        except (_C.runtime.PeerError, CollectiveFailure) as e:
            raise self.lost_peer(e) from None
        except Exception as e:
            if self.board is not None:
                self.board.report_own_failure(self.calls, e)
            raise

    @contextlib.contextmanager
    def peers_named(self) -> Iterator[None]:
        """Only a lost peer becomes the error naming it (for waits that run no model code)."""
        try:
            yield
        except _C.runtime.PeerError as e:
            raise self.lost_peer(e) from None
