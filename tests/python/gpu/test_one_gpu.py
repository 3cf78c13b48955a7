"""One rank on one GPU: the trainer's whole pipeline (one stage) on CUDA tensors against the
unpipelined model on the CPU, in float64, float32 and bfloat16 with float32 master weights
(issue 37, item 2; docs/runtime.md, "On GPUs").

The rank is a real process (tests/python/runtime/launcher.py) that the Trainer puts on cuda:0.
The batch holds a split sequence (K/V buffers) beside packed ones. float64 runs the math path on
the GPU, float32 ATen's varlen memory-efficient kernel, bfloat16 its flash kernel. bfloat16 is
held to what its 8-bit mantissa allows: the loss within 1% of the float32 CPU run, each
gradient within 5% of the reference's norm (a bfloat16 value carries a relative rounding of up
to 2^-8 = 0.4%, and a gradient sums many such products). Skipped, saying so, without CUDA.
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
    not torch.cuda.is_available(),
    reason="needs a CUDA device (none here): run on a GPU machine, docs/runtime.md 'On GPUs'",
)

HYBRID = [70, 9, 23, 5]
# (loss, gradient) tolerances: relative to the loss, and to each gradient's largest entry
# (float64, float32) or its norm (bfloat16)
TOL = {"float64": (1e-9, 1e-9), "float32": (2e-3, 2e-3), "bfloat16": (1e-2, 5e-2)}


def cases():
    return [
        dict(
            name=f"chunkflow-{dtype}",
            dtype=dtype,
            lengths=HYBRID,
            seed=3,
            plan=dict(method="chunkflow", chunk_tokens=32),
        )
        for dtype in TOL
    ]


def reference(dtype: str, lengths: list[int], seed: int) -> tuple[float, dict]:
    """The unpipelined model's loss and gradients on the CPU, in float32 for a bfloat16 run."""
    model = llama.build_full_model(
        bodies.model_config("float64" if dtype == "float64" else "float32")
    )
    loss = llama.reference_loss(model, bodies.make_batch(lengths, seed))
    loss.backward()
    return loss.item(), {n: p.grad for n, p in model.named_parameters()}


def test_one_gpu_equals_the_unpipelined_model():
    (records,) = check_all_ok(run_ranks("bodies:parity", 1, dict(cases=cases()), timeout_s=600))
    for c, r in zip(cases(), records, strict=True):
        loss_tol, grad_tol = TOL[c["dtype"]]
        ref_loss, ref_grads = reference(c["dtype"], c["lengths"], c["seed"])
        assert "split" in r["kinds"] or "hybrid" in r["kinds"]
        assert abs(r["loss"] - ref_loss) / abs(ref_loss) < loss_tol, (
            c["name"],
            r["loss"],
            ref_loss,
        )
        assert set(r["grads"]) == set(ref_grads)
        for n, ref in ref_grads.items():
            got = r["grads"][n].cpu().to(ref.dtype)
            if c["dtype"] == "bfloat16":
                err = float((got - ref).norm() / ref.norm())
            else:
                err = float((got - ref).abs().max() / ref.abs().max())
            assert err < grad_tol, (c["name"], n, err)
        # memory: what autograd and the executor held on the GPU against the prediction, with
        # the bounds the CPU runs meet (docs/runtime.md, "Memory: measured against predicted")
        ratio = r["stats"]["activation_ratio"]
        print(
            f"{c['name']}: loss {r['loss']:.6f} (reference {ref_loss:.6f}), activation memory "
            f"measured/predicted {ratio:.3f}"
        )
        assert 0.8 <= ratio <= 1.02, (c["name"], ratio)
