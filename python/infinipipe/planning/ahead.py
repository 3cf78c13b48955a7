"""Planning the next batches while the current step runs (docs/runtime.md, "Planning ahead").

The paper hides the planner behind training: CPUs plan step i+1 while the accelerators run step
i. Here a trainer hands batches to `PlanAhead` early; one background thread plans them in the
order given (the planner itself runs in C++ with the GIL released, so the step's Python and
the executor go on), and the step on a batch of the same lengths takes the plan, waiting only
for what is not done yet. Every rank still checks the plan's hash with the others before
running it (agreement.py): the planner is deterministic, so planning ahead changes when a plan
is made, never which.

`Prefetching` wraps a batch iterable so a loop gets this for free:

    for batch in trainer.prefetching(batches):   # batch i+1 planned while batch i trains
        trainer.step(batch)
"""

from __future__ import annotations

import collections
import concurrent.futures
import time
from collections.abc import Callable, Iterable, Iterator
from typing import Any

# Plans handed over but not yet taken. A loop one batch ahead keeps two; the cap only bounds
# memory when a caller prefetches batches it never steps on (the oldest are dropped).
CAPACITY = 8


class PlanAhead:
    """Plans lengths on a background thread; `take(lengths)` returns (plan, planning_s,
    waited_s) of a plan handed over earlier, or None."""

    def __init__(self, plan_lengths: Callable[[list[int]], Any]) -> None:
        self._plan_lengths = plan_lengths
        self._pool: concurrent.futures.ThreadPoolExecutor | None = None
        self._pending: collections.OrderedDict[int, tuple[tuple[int, ...], Any]] = (
            collections.OrderedDict()
        )
        self._next_id = 0

    def _timed(self, lengths: list[int]) -> tuple[Any, float]:
        started = time.perf_counter()
        plan = self._plan_lengths(lengths)
        return plan, time.perf_counter() - started

    def submit(self, lengths: list[int]) -> None:
        if self._pool is None:
            self._pool = concurrent.futures.ThreadPoolExecutor(
                max_workers=1, thread_name_prefix="infinipipe-plan-ahead"
            )
        self._pending[self._next_id] = (tuple(lengths), self._pool.submit(self._timed, lengths))
        self._next_id += 1
        while len(self._pending) > CAPACITY:
            _, (_, dropped) = self._pending.popitem(last=False)
            dropped.cancel()

    def take(self, lengths: list[int]) -> tuple[Any, float, float] | None:
        """The earliest plan handed over for these lengths (its planning errors re-raised
        here), after waiting for it; None when there is none."""
        key = tuple(lengths)
        for ident, (pending_lengths, future) in self._pending.items():
            if pending_lengths == key:
                del self._pending[ident]
                started = time.perf_counter()
                plan, planning_s = future.result()
                return plan, planning_s, time.perf_counter() - started
        return None

    def close(self, wait: bool = True) -> None:
        """Drops the plans not taken and stops the thread after the plan in progress: joined
        here with `wait` (a closing trainer leaves no thread of its own behind), else left to
        end by itself (a step dropping stale plans does not wait for one)."""
        for _, future in self._pending.values():
            future.cancel()
        self._pending.clear()
        if self._pool is not None:
            self._pool.shutdown(wait=wait, cancel_futures=True)
            self._pool = None


class Prefetching:
    """Iterates over `batches` one ahead: before yielding batch i it hands batch i+1 to the
    trainer to plan. `state_dict()` is the wrapped loader's state as a loop not running ahead
    would see it (taken before the look-ahead), so a checkpoint saved after batch i resumes
    with batch i+1; `load_state_dict` goes to the loader (call it before iterating)."""

    def __init__(self, prefetch: Callable[[Any], None], batches: Iterable[Any]) -> None:
        self._prefetch = prefetch
        self._batches = batches
        self._state: Any = None

    def _loader_state(self) -> Any:
        state_dict = getattr(self._batches, "state_dict", None)
        return state_dict() if state_dict is not None else None

    def __iter__(self) -> Iterator[Any]:
        iterator = iter(self._batches)
        self._state = None
        try:
            current = next(iterator)
        except StopIteration:
            return
        self._prefetch(current)
        while True:
            self._state = self._loader_state()  # after `current`, before the look-ahead
            try:
                following = next(iterator)
            except StopIteration:
                yield current
                return
            self._prefetch(following)
            yield current
            current = following

    def state_dict(self) -> Any:
        if self._state is None:
            state = self._loader_state()
            if state is None:
                raise TypeError(f"{type(self._batches).__name__} has no state_dict()")
            return state
        return self._state

    def load_state_dict(self, state: Any) -> None:
        self._batches.load_state_dict(state)
        self._state = None
