"""A pipelined step on the GPU against the unpipelined tiny LLaMA on the CPU (the GPU tests'
shared check): float64 and float32 to the largest gradient entry, bfloat16 with float32 masters
to each gradient's norm against a float32 run (a bfloat16 value carries a relative rounding of
up to 2^-8 = 0.4%, and a gradient sums many such products)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "runtime"))
import bodies  # noqa: E402

from infinipipe.models import llama  # noqa: E402

needs_cuda = pytest.mark.skipif(
    not torch.cuda.is_available(),
    reason="needs a CUDA device (none here): run on a GPU machine, docs/runtime.md 'On GPUs'",
)

# A split sequence (K/V buffers) beside packed ones in 32-token chunks.
HYBRID = [70, 9, 23, 5]
CHUNKFLOW = dict(method="chunkflow", chunk_tokens=32)

# (loss, gradient) tolerances: relative to the loss, and to each gradient's largest entry
# (float64, float32) or its norm (bfloat16)
TOL = {"float64": (1e-9, 1e-9), "float32": (2e-3, 2e-3), "bfloat16": (1e-2, 5e-2)}


def reference(dtype: str, lengths: list[int], seed: int) -> tuple[float, dict]:
    """The unpipelined model's loss and gradients on the CPU, in float32 for a bfloat16 run
    ("bfloat16-lean": the lean layer's, bodies.model_config)."""
    name, dash, variant = dtype.partition("-")
    model = llama.build_full_model(
        bodies.model_config(("float64" if name == "float64" else "float32") + dash + variant)
    )
    loss = llama.reference_loss(model, bodies.make_batch(lengths, seed))
    loss.backward()
    return loss.item(), {n: p.grad for n, p in model.named_parameters()}


def check_case(case: dict, losses: list[float], grads: dict[str, torch.Tensor]) -> float:
    """Every rank's loss and the whole model's gradients (by name, gathered over the ranks)
    against the reference within TOL; returns the reference loss."""
    name = case["dtype"].partition("-")[0]
    loss_tol, grad_tol = TOL[name]
    ref_loss, ref_grads = reference(case["dtype"], case["lengths"], case["seed"])
    for loss in losses:
        assert abs(loss - ref_loss) / abs(ref_loss) < loss_tol, (case["name"], loss, ref_loss)
    assert set(grads) == set(ref_grads), set(grads) ^ set(ref_grads)
    for n, ref in ref_grads.items():
        got = grads[n].cpu().to(ref.dtype)
        if name == "bfloat16":
            err = float((got - ref).norm() / ref.norm())
        else:
            err = float((got - ref).abs().max() / ref.abs().max())
        assert err < grad_tol, (case["name"], n, err)
    return ref_loss
