"""One rank on one GPU: the trainer's whole pipeline (one stage) on CUDA tensors against the
unpipelined model on the CPU, in float64, float32 and bfloat16 with float32 master weights
(issue 37, item 2; docs/runtime.md, "On GPUs").

The rank is a real process (tests/python/runtime/launcher.py) that the Trainer puts on cuda:0.
The batch holds a split sequence (K/V buffers) beside packed ones. float64 runs the math path on
the GPU, float32 ATen's varlen memory-efficient kernel, bfloat16 its flash kernel. bfloat16 is
held to what its 8-bit mantissa allows: the loss within 1% of the float32 CPU run, each
gradient within 5% of the reference's norm (against_cpu.py); so is the lean layer
(LlamaConfig.lean_layer) in bfloat16. Skipped, saying so, without CUDA.
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from against_cpu import CHUNKFLOW, HYBRID, TOL, check_case, needs_cuda  # noqa: E402
from launcher import check_all_ok, run_ranks  # noqa: E402 (path: against_cpu)

pytestmark = needs_cuda


def cases():
    return [
        dict(
            name=f"chunkflow-{dtype}",
            dtype=dtype,
            lengths=HYBRID,
            seed=3,
            plan=CHUNKFLOW,
        )
        for dtype in [*TOL, "bfloat16-lean"]  # the lean layer's functions on CUDA too
    ]


def test_one_gpu_equals_the_unpipelined_model():
    (records,) = check_all_ok(run_ranks("bodies:parity", 1, dict(cases=cases()), timeout_s=600))
    for c, r in zip(cases(), records, strict=True):
        assert "split" in r["kinds"] or "hybrid" in r["kinds"]
        ref_loss = check_case(c, [r["loss"]], r["grads"])
        # memory: what autograd and the executor held on the GPU against the prediction, with
        # the bounds the CPU runs meet (docs/runtime.md, "Memory: measured against predicted")
        ratio = r["stats"]["activation_ratio"]
        print(
            f"{c['name']}: loss {r['loss']:.6f} (reference {ref_loss:.6f}), activation memory "
            f"measured/predicted {ratio:.3f}"
        )
        assert 0.8 <= ratio <= 1.02, (c["name"], ratio)
