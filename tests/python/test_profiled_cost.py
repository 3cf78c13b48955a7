"""StaleProfileCheck: the error of a cached profile's predictions over a run's first steps."""

from __future__ import annotations

import pytest

from infinipipe.profiling.profiled_cost import StaleProfileCheck, record_check


def test_the_error_is_of_the_medians_after_the_first_step():
    check = StaleProfileCheck(steps=3)
    assert check.add(measured_s=100.0, predicted_s=1.0) is None  # the first step: left out
    assert check.add(1.0, 1.5) is None
    assert check.add(2.0, 1.2) is None
    # medians of the last three: predicted 1.2, measured 1.0
    assert check.add(0.5, 1.1) == pytest.approx(1.2 / 1.0 - 1)


def test_a_profile_predicting_slow_steps_has_a_positive_error():
    check = StaleProfileCheck(steps=1)
    check.add(1.0, 1.0)
    assert check.add(measured_s=1.0, predicted_s=1.38) == pytest.approx(0.38)


def test_a_miss_after_profiling_again_is_noted_beside_the_cache_and_a_hit_removes_it(tmp_path):
    path = tmp_path / "cost-0123.json"
    record_check(path, -0.8)
    assert float(path.with_suffix(".missed").read_text()) == -0.8
    record_check(path, 0.05)  # within STALE_ERROR
    assert not path.with_suffix(".missed").exists()
    record_check(path, 0.0)  # nothing to remove
