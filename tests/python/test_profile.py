"""Profiler: the fit recovers known coefficients; the quick CLI writes a loadable cost JSON."""
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from infinipipe import _C
from infinipipe import profile

ROOT = Path(__file__).resolve().parents[2]
POINTS = [(s, c) for s in (64, 128, 256, 512, 1024) for c in (0, 256, 512, 1024, 2048)]
TRUE = (3e-9, 2e-6, 4e-4)  # a1, a2, b: magnitudes like the tiny model on a CPU


def synthetic(noise: float, seed: int):
    rng = np.random.default_rng(seed)
    t = profile.predict(*TRUE, POINTS)
    return t * (1 + noise * rng.uniform(-1, 1, size=len(t)))


def test_fit_recovers_exact_coefficients():
    got = profile.fit_forward(POINTS, synthetic(0.0, 0))
    np.testing.assert_allclose(got, TRUE, rtol=1e-6)


@pytest.mark.parametrize("seed", range(5))
def test_fit_with_noise_predicts_within_noise(seed):
    times = synthetic(0.05, seed)
    a1, a2, b = profile.fit_forward(POINTS, times)
    # Coefficients near the truth, and predictions of the noise-free times within the noise.
    np.testing.assert_allclose([a1, a2], TRUE[:2], rtol=0.15)
    err = profile.relative_errors(profile.predict(a1, a2, b, POINTS), synthetic(0.0, 0))
    assert err.max() < 0.05


def test_backward_ratio_recovered():
    fwd = synthetic(0.0, 0)
    assert profile.fit_backward_ratio(fwd, 2.3 * fwd) == pytest.approx(2.3)
    rng = np.random.default_rng(1)
    noisy = 2.3 * fwd * (1 + 0.05 * rng.uniform(-1, 1, len(fwd)))
    assert profile.fit_backward_ratio(fwd, noisy) == pytest.approx(2.3, rel=0.05)


def test_cli_quick_writes_loadable_cost_json(tmp_path):
    out = tmp_path / "cost.json"
    env = {"PYTHONPATH": str(ROOT / "python")}
    proc = subprocess.run([sys.executable, "-m", "infinipipe.profile", "--grid", "quick",
                           "--output", str(out), "--no-progress", "--threads", "1",
                           "--layers-per-stage", "3,5"],
                          capture_output=True, text=True, env=env, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "held-out forward error" in proc.stdout
    cost = _C.plan.CostModel.load(str(out))
    assert list(cost.layers_per_stage) == [3, 5]
    coef = json.loads(out.read_text())["coefficients"]
    meta = json.loads(out.with_suffix(".meta.json").read_text())
    for key in ("a1", "a2", "b", "backward_ratio", "activation_bytes"):
        assert coef[key] == pytest.approx(meta[key])
    assert coef["a2"] > 0 and coef["activation_bytes"] > 0
    assert 0 <= meta["forward_heldout_median"] <= meta["forward_heldout_max"]
    assert len(meta["held_out"]) >= 1


def test_plan_config_uses_profiled_json(tmp_path):
    import torch
    from infinipipe import runtime
    from infinipipe.models import llama
    out = tmp_path / "cost.json"
    config = llama.LlamaConfig.tiny()
    result = dict(a1=1e-9, a2=1e-6, b=1e-4, backward_ratio=2.0, activation_bytes=1000.0)
    out.write_text(json.dumps(profile.cost_json(config, torch.float32, [4, 4], result)))
    cost = runtime.cost_model_for(config, [4, 4], torch.float32,
                                  runtime.PlanConfig(cost_model=str(out)))
    assert list(cost.layers_per_stage) == [4, 4]
