"""The errors every InfiniPipe failure raises."""

from . import _C

Error = _C.Error  # every InfiniPipe failure (a RuntimeError); C++ infinipipe::Error


class BatchError(Error, ValueError):
    """A batch the trainer cannot run (empty, malformed, token ids outside the vocabulary)."""
