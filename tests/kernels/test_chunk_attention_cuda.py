"""Chunk attention on CUDA: ATen's varlen flash and memory-efficient kernels over the K/V buffers
(src/kernels/chunk_attention.cc, docs/runtime.md "On GPUs") against the float64 reference and
against the math path on the same device.

Every test here needs a CUDA device and skips, saying so, without one: a skipped test is not a
passing one. On a GPU machine: `PYTHONPATH=python python -m pytest tests/kernels -rs` with a
CUDA build of torch (scripts/check_cuda_build.sh builds one).
"""

import random

import pytest
import torch
from test_chunk_attention import (
    check_against_reference,
    make_seq,
    random_cuts,
    rel_err,
    run_schedule,
)

from infinipipe import _C  # a missing build must fail, not skip

pytestmark = pytest.mark.skipif(
    not torch.cuda.is_available(),
    reason="needs a CUDA device (torch.cuda.is_available() is False): run on a GPU machine, "
    "docs/runtime.md 'On GPUs'",
)

chunk_attention = _C.chunk_attention
# bf16 keeps 8 bits of mantissa; the fused kernels accumulate in float32
TOL = {torch.float64: 1e-9, torch.float32: 2e-3, torch.bfloat16: 2e-2, torch.float16: 3e-3}


def cuda_seq(n, heads, kv_heads, dim, dtype, gen):
    return tuple(
        t.detach().cuda().requires_grad_() for t in make_seq(n, heads, kv_heads, dim, dtype, gen)
    )


def hybrid_case(dtype, dim=64, heads=8, kv_heads=2, seed=3):
    """A long sequence in three slices, its tail packed with two whole sequences, and a whole
    sequence beside the first slice: packed, split and hybrid chunks."""
    gen = torch.Generator().manual_seed(seed)
    lengths = [300, 40, 77, 9]
    seqs = [cuda_seq(n, heads, kv_heads, dim, dtype, gen) for n in lengths]
    grads = [
        torch.randn(n, heads, dim, dtype=torch.float64, generator=gen).to(dtype).cuda()
        for n in lengths
    ]
    chunks = [[(0, 0, 128), (3, 0, 9)], [(0, 128, 211)], [(1, 0, 40), (0, 211, 300), (2, 0, 77)]]
    return seqs, grads, chunks


@pytest.mark.parametrize(
    "dtype,backend,kernel",
    [
        (torch.bfloat16, "auto", None),  # flash where the device runs it, else efficient
        (torch.float16, "auto", None),
        (torch.bfloat16, "efficient", "cuda_efficient"),
        (torch.float32, "auto", "cuda_efficient"),
        (torch.float64, "math", "math"),
    ],
)
def test_hybrid_chunks_against_reference(dtype, backend, kernel):
    seqs, grads, chunks = hybrid_case(dtype)
    q = seqs[0][0]
    chosen = _C.kernels.attention_kernel_for(q, backend)
    if kernel is not None:
        assert chosen == kernel
    else:
        assert chosen in ("cuda_flash", "cuda_efficient")
    outs, bufs = run_schedule(seqs, chunks, [0, 1, 2], [2, 1, 0], grads, 0.125, backend, {0})
    check_against_reference(seqs, outs, grads, 0.125, TOL[dtype])
    assert bufs[0].k.is_cuda and not bufs[0].dk.any() and not bufs[0].dv.any()


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
def test_fused_equals_math_on_the_device(dtype):
    """The fused kernel against the math path (explicit softmax, float32 for bf16) on the same
    CUDA inputs: outputs and every gradient."""
    results = {}
    for backend in ("auto", "math"):
        seqs, grads, chunks = hybrid_case(dtype, seed=5)
        outs, _ = run_schedule(seqs, chunks, [0, 1, 2], [2, 1, 0], grads, 0.125, backend, {0})
        results[backend] = (outs, [t.grad for s in seqs for t in s])
    for a, b in zip(
        results["auto"][0] + results["auto"][1], results["math"][0] + results["math"][1]
    ):
        assert rel_err(a, b) < TOL[dtype]


def test_float64_falls_back_to_math():
    q = torch.zeros(4, 2, 8, dtype=torch.float64, device="cuda")
    assert _C.kernels.attention_kernel_for(q) == "math"
    seqs, grads, chunks = hybrid_case(torch.float64, dim=16, heads=4)
    outs, _ = run_schedule(seqs, chunks, [0, 1, 2], [2, 1, 0], grads, 0.25, "auto", {0})
    check_against_reference(seqs, outs, grads, 0.25, 1e-9)


@pytest.mark.parametrize("seed", range(3))
def test_random_schedules_bf16(seed):
    rng, gen = random.Random(seed), torch.Generator().manual_seed(seed)
    n = rng.randint(200, 600)
    cuts = random_cuts(n, rng.randint(2, 6), rng)
    seq = cuda_seq(n, 8, 2, 128, torch.bfloat16, gen)
    grads = [torch.randn(n, 8, 128, generator=gen).to(torch.bfloat16).cuda()]
    chunks = [[(0, a, b)] for a, b in cuts]
    order = list(range(len(chunks)))
    outs, bufs = run_schedule([seq], chunks, order, order[::-1], grads, 128**-0.5, "auto", {0})
    check_against_reference([seq], outs, grads, 128**-0.5, TOL[torch.bfloat16])
    assert not bufs[0].dk.any()


def test_long_context_does_not_materialise_scores():
    """A 4K-token slice against a 28K context in bf16 (head_dim 128, 8 heads): the math path
    would hold 8 x 4K x 32K float32 scores (4 GiB); the fused kernel's peak stays within a small
    multiple of q, k, v, the buffer and the output."""
    heads, kvh, dim, context, s = 8, 2, 128, 28 * 1024, 4 * 1024
    opts = dict(dtype=torch.bfloat16, device="cuda")
    kv = _C.SequenceKV(context + s, kvh, dim, torch.bfloat16, torch.device("cuda"))
    kv.k.normal_()
    kv.v.normal_()
    q = torch.randn(s, heads, dim, **opts, requires_grad=True)
    k = torch.randn(s, kvh, dim, **opts, requires_grad=True)
    v = torch.randn(s, kvh, dim, **opts, requires_grad=True)
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    base = torch.cuda.memory_allocated()
    out = chunk_attention(q, k, v, [(0, context, context + s)], [kv])
    out.backward(torch.ones_like(out))
    torch.cuda.synchronize()
    peak = torch.cuda.max_memory_allocated() - base
    tensors = 3 * q.numel() * 2 + 2 * kv.k.numel() * 2 * 2  # q/out/dq, K/V + accumulators
    assert peak < 4 * tensors, f"peak {peak / 2**20:.0f} MiB"
    assert peak < 2**30  # far below the 4 GiB of scores
