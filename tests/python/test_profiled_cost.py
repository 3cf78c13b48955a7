"""StaleProfileCheck: the error of a cached profile's predictions over a run's first steps; the
cache's key and the grid by device."""

from __future__ import annotations

import pytest
import torch

from infinipipe.models import llama
from infinipipe.profiling import profiled_cost
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


def test_a_cpu_profile_keeps_its_cache_key_and_names_its_grid():
    # Profiles cached before the trainer could profile on a GPU stay found: a CPU's key is the
    # same whether the device is given or not; a GPU's profile takes the "gpu" grid.
    config = llama.LlamaConfig.tiny()
    cpu = torch.device("cpu")
    assert profiled_cost.cache_path(config, [4, 4], 2) == profiled_cost.cache_path(
        config, [4, 4], 2, device=cpu
    )
    assert profiled_cost.grid_for(cpu) == "training"
    assert profiled_cost.grid_for(torch.device("cuda", 0)) == "gpu"
    assert profiled_cost._what("{}", 1, cpu) == "training grid"
    assert profiled_cost._what("{}", 1, torch.device("cuda", 0)) == "gpu grid on cuda:0"
