"""An unmodified transformers LlamaForCausalLM trained through the executor on one GPU
(infinipipe.models.hf), in float32 and in bfloat16 with float32 masters, against transformers'
own unpipelined forward and backward in float32 on the CPU (issue 37, item 2; docs/runtime.md,
"On GPUs").

One rank (tests/python/runtime/launcher.py) on cuda:0, one step of a chunkflow plan whose chunks
hold a split sequence (K/V buffers) beside packed ones. float32 is held to 2e-3 (loss, and each
gradient's largest difference over its largest entry: the GPU's kernels sum in other orders).
bfloat16 is held to transformers' own bfloat16: the loss within 1% of float32's, and each
gradient no further from float32's (difference norm over norm) than 1.5 times transformers'
bfloat16 model's, plus 0.01. That bound, not a fixed one, because in a tiny random model the
query and key gradients are small differences that bfloat16 gets 10-30% wrong in transformers
itself (measured on the CPU, where ours was within 1.26 times of it). Skipped, saying so,
without CUDA.
"""

import sys
from pathlib import Path

import pytest
import torch

HERE = Path(__file__).resolve().parent
MODELS_TESTS = HERE.parent / "models"
RUNTIME_TESTS = HERE.parent / "runtime"
sys.path[:0] = [str(MODELS_TESTS), str(RUNTIME_TESTS)]
from launcher import REPO, check_all_ok, run_ranks  # noqa: E402

pytestmark = pytest.mark.skipif(
    not torch.cuda.is_available(),
    reason="needs a CUDA device (none here): run on a GPU machine, docs/runtime.md 'On GPUs'",
)

LENGTHS = [70, 9, 23, 5]
TOL = {"float32": (2e-3, 2e-3), "bfloat16": (1e-2, None)}  # (loss, gradient)
BF16_OVER_TRANSFORMERS = (1.5, 0.01)  # our bf16 gradient error <= 1.5 x transformers' + 0.01


def cases():
    return [
        dict(dtype=d, lengths=LENGTHS, seed=3, plan=dict(method="chunkflow", chunk_tokens=32))
        for d in TOL
    ]


def run(tmp_path: Path, device: str) -> tuple[list[dict], float, dict, dict]:
    """The rank's records for every case, transformers' float32 loss and gradients, and its
    bfloat16 model's gradients (on the CPU, in float32)."""
    import hf_bodies
    from test_hf import reference

    model = hf_bodies.build_model("llama", dtype=torch.float32)
    model.save_pretrained(tmp_path / "llama")
    (records,) = check_all_ok(
        run_ranks(
            "hf_bodies:one_device_parity",
            1,
            args=dict(source=str(tmp_path / "llama"), cases=cases(), device=device),
            timeout_s=300,
            extra_env={
                "PYTHONPATH": ":".join(
                    [str(REPO / "python"), str(RUNTIME_TESTS), str(MODELS_TESTS)]
                )
            },
        )
    )
    batch = hf_bodies.make_batch(LENGTHS, 3)
    ref_loss, ref_grads = reference(model, batch)
    _, bf16_grads = reference(model.to(torch.bfloat16), batch)
    return records, ref_loss, ref_grads, {n: g.float() for n, g in bf16_grads.items()}


def relative(got: torch.Tensor, ref: torch.Tensor) -> float:
    return float((got - ref).norm() / ref.norm())


def check(
    records: list[dict], ref_loss: float, ref_grads: dict, bf16_grads: dict, device: str
) -> None:
    for case, r in zip(cases(), records, strict=True):
        loss_tol, grad_tol = TOL[case["dtype"]]
        assert r["device"].startswith(device)
        assert "split" in r["kinds"]
        assert abs(r["loss"] - ref_loss) / abs(ref_loss) < loss_tol, (case["dtype"], r["loss"])
        assert set(r["grads"]) == set(ref_grads)
        for n, ref in ref_grads.items():
            got = r["grads"][n]
            if case["dtype"] == "bfloat16":
                scale, slack = BF16_OVER_TRANSFORMERS
                theirs = relative(bf16_grads[n], ref)
                assert relative(got, ref) <= scale * theirs + slack, (n, relative(got, ref), theirs)
            else:
                err = float((got - ref).abs().max() / ref.abs().max())
                assert err < grad_tol, (case["dtype"], n, err)


def test_transformers_llama_on_one_gpu_equals_transformers(tmp_path):
    check(*run(tmp_path, "cuda"), "cuda")
