"""PlanConfig(cost_model="profile") on one GPU: the trainer profiles its layer on its own device at
the "gpu" grid, caches the fit under the GPU's model and plans with it (issue 37;
profiling/profiled_cost.py). Skipped, saying so, without CUDA."""

import json
import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "runtime"))
from launcher import check_all_ok, run_ranks_profiled  # noqa: E402

from infinipipe import _C  # noqa: E402
from infinipipe.planning.cost_model import model_shape_json  # noqa: E402

pytestmark = pytest.mark.skipif(
    not torch.cuda.is_available(),
    reason="needs a CUDA device (none here): run on a GPU machine, docs/runtime.md 'On GPUs'",
)


def test_a_gpu_trainer_profiles_on_its_gpu_and_caches_it(tmp_path):
    import loop_bodies

    env = {"INFINIPIPE_CACHE_DIR": str(tmp_path)}
    (first,) = check_all_ok(
        run_ranks_profiled("loop_bodies:profiled_cost", 1, timeout_s=600, extra_env=env)
    )
    assert first["name"].startswith("profiled now") and "gpu grid on cuda:0" in first["name"]
    (cached,) = tmp_path.glob("cost-*.json")
    analytic = json.loads(
        _C.plan.CostModel.analytic(
            model_shape_json(loop_bodies.model_config("float32"), torch.float32), "h100", [8]
        ).to_json()
    )
    planned = json.loads(first["cost"])
    assert planned["coefficients"] != analytic["coefficients"]  # measured, not the analytic
    assert first["predicted_s"] > 0
    (again,) = check_all_ok(
        run_ranks_profiled("loop_bodies:profiled_cost", 1, timeout_s=600, extra_env=env)
    )
    assert again["name"].startswith("profiled on this machine")
    assert json.loads(again["cost"]) == planned
