"""collector.paused: Python's garbage collector off inside when asked, restored after, a
collector already off left off (the trainer's pause_gc; test_training_loop.py runs it in a
pipeline)."""

import gc

import pytest

from infinipipe.training import gc_pause as collector


@pytest.fixture(autouse=True)
def collector_on():
    gc.enable()
    yield
    gc.enable()


def test_paused_turns_it_off_inside_and_on_after_even_on_an_error():
    with collector.paused(True):
        assert not gc.isenabled()
    assert gc.isenabled()
    with pytest.raises(RuntimeError), collector.paused(True):
        raise RuntimeError("a failed run")
    assert gc.isenabled()


def test_not_pausing_leaves_it_on_and_an_off_collector_stays_off():
    with collector.paused(False):
        assert gc.isenabled()
    gc.disable()
    with collector.paused(True):
        assert not gc.isenabled()
    assert not gc.isenabled()
