"""Two pipeline ranks on two GPUs over NCCL against the unpipelined model, and the stages'
measured activation memory against the plan's prediction (docs/runtime.md, "On GPUs").

The ranks are real processes (tests/python/runtime/launcher.py); with CUDA available the
Trainer puts each on cuda:LOCAL_RANK and joins an NCCL group. The cases hold a split sequence
(K/V buffers) beside packed ones: float64 runs the math path on the GPU (the fused kernels take
16- and 32-bit inputs), float32 ATen's varlen memory-efficient kernel. Skipped, saying so,
without two CUDA devices: a skipped test is not a passing one.
"""

import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "runtime"))
import bodies  # noqa: E402
from launcher import check_all_ok, run_ranks  # noqa: E402

from infinipipe.models import llama  # noqa: E402

pytestmark = pytest.mark.skipif(
    torch.cuda.device_count() < 2,
    reason=f"needs 2 CUDA devices (this machine has {torch.cuda.device_count()}): run on a GPU "
    "machine, docs/runtime.md 'On GPUs'",
)

HYBRID = [70, 9, 23, 5]
TOL = {"float64": 1e-9, "float32": 2e-3}


def cases():
    return [
        dict(
            name=f"chunkflow-{dtype}",
            dtype=dtype,
            lengths=HYBRID,
            seed=3,
            plan=dict(method="chunkflow", chunk_tokens=32),
        )
        for dtype in ("float64", "float32")
    ]


def test_two_gpus_over_nccl_equal_the_unpipelined_model():
    per_rank = check_all_ok(run_ranks("bodies:parity", 2, dict(cases=cases()), timeout_s=600))
    for i, c in enumerate(cases()):
        model = llama.build_full_model(bodies.model_config(c["dtype"]))
        batch = bodies.make_batch(c["lengths"], c["seed"])
        loss = llama.reference_loss(model, batch)
        loss.backward()
        records = [r[i] for r in per_rank]
        assert "split" in records[0]["kinds"] or "hybrid" in records[0]["kinds"]
        for r in records:
            assert abs(r["loss"] - loss.item()) / abs(loss.item()) < TOL[c["dtype"]]
        grads = {n: g.cpu() for r in records for n, g in r["grads"].items()}
        assert set(grads) == {n for n, _ in model.named_parameters()}
        for n, p in model.named_parameters():
            err = float((grads[n].to(p.grad.dtype) - p.grad).abs().max() / p.grad.abs().max())
            assert err < TOL[c["dtype"]], (c["name"], n, err)
        # memory: what autograd and the executor held on the GPU against the prediction, with
        # the bounds the CPU runs meet (docs/runtime.md, "Memory: measured against predicted")
        for r in records:
            ratio = r["stats"]["activation_ratio"]
            assert 0.8 <= ratio <= 1.02, (c["name"], r["stage"], ratio)
