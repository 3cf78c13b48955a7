"""Python's garbage collector held off around a pipeline run (Trainer(pause_gc=True);
docs/runtime.md, "Python's garbage collector")."""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Iterator


@contextlib.contextmanager
def paused(pause: bool) -> Iterator[None]:
    """With `pause`, the collector off inside and back on after; gc.enable() is what collects
    then, at the next allocation, when a generation is due. A collector already off stays off."""
    turned_off = pause and gc.isenabled()
    if turned_off:
        gc.disable()
    try:
        yield
    finally:
        if turned_off:
            gc.enable()
