"""PlanAhead and Prefetching (python/infinipipe/planning/ahead.py) on their own, with a
stand-in planner: plans are made on the background thread in the order handed over, taken by
lengths, their errors re-raised at take; Prefetching hands each batch over one ahead and keeps
the loader's state as of the batch the loop holds. The trainer's use of them runs on real ranks
in tests/python/runtime/test_training_loop.py."""

import threading

import pytest

from infinipipe.data import ByteTokenizer, TokenBatches
from infinipipe.planning.ahead import CAPACITY, PlanAhead, Prefetching


class Planner:
    def __init__(self):
        self.calls = []
        self.release = threading.Event()
        self.release.set()

    def __call__(self, lengths):
        self.release.wait(10)
        self.calls.append((tuple(lengths), threading.current_thread().name))
        if lengths == [13]:
            raise ValueError("thirteen")
        return f"plan of {lengths}"


def test_plans_are_made_ahead_in_order_and_taken_by_lengths():
    planner = Planner()
    ahead = PlanAhead(planner)
    ahead.submit([3, 4])
    ahead.submit([5])
    assert ahead.take([5])[0] == "plan of [5]"
    plan, planning_s, waited_s = ahead.take([3, 4])
    assert plan == "plan of [3, 4]" and planning_s >= 0 and waited_s >= 0
    assert [lengths for lengths, _ in planner.calls] == [(3, 4), (5,)]
    assert all(name.startswith("infinipipe-plan-ahead") for _, name in planner.calls)
    assert ahead.take([3, 4]) is None  # taken once
    ahead.close()


def test_a_planning_error_is_raised_where_the_plan_is_taken():
    ahead = PlanAhead(Planner())
    ahead.submit([13])
    with pytest.raises(ValueError, match="thirteen"):
        ahead.take([13])
    ahead.close()


def test_plans_never_taken_are_dropped_beyond_the_capacity():
    planner = Planner()
    planner.release.clear()  # hold the thread so that nothing finishes meanwhile
    ahead = PlanAhead(planner)
    for n in range(CAPACITY + 2):
        ahead.submit([n + 1])
    planner.release.set()
    assert ahead.take([1]) is None and ahead.take([2]) is None  # the two oldest
    assert ahead.take([CAPACITY + 2])[0] == f"plan of [{CAPACITY + 2}]"
    ahead.close()


def test_prefetching_hands_each_batch_over_before_the_loop_gets_the_one_before():
    handed = []
    seen = []
    for batch in Prefetching(handed.append, [[1], [2], [3]]):
        seen.append((batch, list(handed)))
    assert seen == [([1], [[1], [2]]), ([2], [[1], [2], [3]]), ([3], [[1], [2], [3]])]
    assert list(Prefetching(handed.append, [])) == []


def test_prefetching_state_is_the_loader_s_as_of_the_batch_held():
    documents = [f"document {i} " * (i + 1) for i in range(30)]

    def loader():
        return TokenBatches(documents, ByteTokenizer(), tokens_per_batch=200, context=100, seed=3)

    plain, ahead = loader(), Prefetching(lambda batch: None, loader())
    for _ in zip(range(3), ahead):
        next(plain)
    assert ahead.state_dict() == plain.state_dict()
    # resuming from it gives the batch after the third
    resumed = Prefetching(lambda batch: None, loader())
    resumed.load_state_dict(ahead.state_dict())
    assert [t.tolist() for t in next(iter(resumed))] == [t.tolist() for t in next(plain)]
    with pytest.raises(TypeError, match="no state_dict"):
        Prefetching(lambda batch: None, [[1]]).state_dict()
