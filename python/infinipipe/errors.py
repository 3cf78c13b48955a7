"""The errors every InfiniPipe failure raises."""

from __future__ import annotations

from . import _C

Error = _C.Error  # every InfiniPipe failure (a RuntimeError); C++ infinipipe::Error


class BatchError(Error, ValueError):
    """A batch the trainer cannot run (empty, malformed, token ids outside the vocabulary)."""


class _RanksError(Error):
    def __init__(self, message: str, *, ranks: list[int], step: int) -> None:
        super().__init__(message)
        self.ranks = list(ranks)  # the ranks named as the cause
        self.step = step  # the step that failed (0: the trainer's setup)


class LostRankError(_RanksError):
    """A rank stopped answering or died: `ranks` names it (every other rank names the same one),
    or is empty when no single rank could be told apart."""


class RankFailedError(_RanksError):
    """A rank failed by itself (its model raised, or it rejected its setup): `ranks` names it;
    the message carries its error."""


class NonfiniteError(Error):
    """The loss or the gradients were NaN or infinite in more optimizer steps in a row than
    RuntimeConfig.max_nonfinite_skips allows; `step` is the last of them."""

    def __init__(self, message: str, *, step: int) -> None:
        super().__init__(message)
        self.step = step
