"""bfloat16 training with float32 master weights (python/infinipipe/training/mixed_precision.py) against
float32 training: real 2-rank Gloo runs of the tiny LLaMA, five AdamW steps on a batch with a
split sequence (K/V buffers) and packed ones; losses and final weights agree within bfloat16's
precision."""

import pytest
import torch
from launcher import check_all_ok, run_ranks

from infinipipe.training.mixed_precision import default_master_dtype


@pytest.fixture(scope="module")
def runs():
    return {
        dtype: check_all_ok(run_ranks("mixed_precision_bodies:train", 2, {"dtype": dtype}, 600))
        for dtype in ("float32", "bfloat16")
    }


def test_bf16_losses_match_float32(runs):
    fp32, bf16 = runs["float32"], runs["bfloat16"]
    for a, b in zip(fp32, bf16):
        assert a["losses"] == fp32[0]["losses"] and b["losses"] == bf16[0]["losses"]  # all ranks
    want, got = fp32[0]["losses"], bf16[0]["losses"]
    assert want[-1] < want[0] - 0.1 and got[-1] < got[0] - 0.1  # both train
    for w, g in zip(want, got):
        assert abs(g - w) / abs(w) < 1e-2, (want, got)
    # and the bf16 run is not the fp32 one: bfloat16 arithmetic really ran
    assert got != want


def test_bf16_weights_track_float32_through_the_steps(runs):
    """Over all weights (element-wise, AdamW's sign-like updates of near-zero gradients differ
    between the two runs by up to 2 lr a step)."""
    diff = total = 0.0
    for a, b in zip(runs["float32"], runs["bfloat16"]):
        assert a["weights"].keys() == b["weights"].keys()
        for name, w in a["weights"].items():
            diff += float((b["weights"][name] - w).pow(2).sum())
            total += float(w.pow(2).sum())
    assert (diff / total) ** 0.5 < 1e-2


def test_bf16_run_keeps_16_bit_model_and_float32_masters(runs):
    for r in runs["bfloat16"]:
        assert r["param_dtypes"] == ["torch.bfloat16"] and r["grad_dtypes"] == ["torch.bfloat16"]
        assert r["master_dtypes"] == ["torch.float32"] and r["optimizer_steps_masters"]
        assert r["weights_are_rounded_masters"] and r["master_grads_released"]
    for r in runs["float32"]:
        assert "master_dtypes" not in r and r["param_dtypes"] == ["torch.float32"]


def test_memory_model_counts_the_model_state(runs):
    """What a rank holds between steps (weights, gradients, fp32 masters, AdamW's moments) is
    what the cost model counts for its stage: 16 bytes a parameter in both runs (bf16: 2 + 2 +
    4 + 4 + 4; float32: 4 + 4 + 4 + 4, no master copy)."""
    assert default_master_dtype(torch.bfloat16) == torch.float32
    assert default_master_dtype(torch.float32) is None
    for dtype in ("float32", "bfloat16"):
        for r in runs[dtype]:
            assert r["model_state_measured"] == r["model_state_predicted"], (dtype, r["stage"])


def test_checkpoint_keeps_the_float32_masters(tmp_path):
    """Saved after 2 steps and loaded into a fresh bf16 trainer: the masters come back bitwise
    (they hold more than the bf16 weights), and the next 2 steps' losses equal the
    uninterrupted run's."""
    for r in check_all_ok(
        run_ranks("mixed_precision_bodies:resume", 2, {"directory": str(tmp_path)}, 300)
    ):
        assert r["loaded_equal"] and r["differ_from_weights"]
        assert r["resumed"] == r["after"]
