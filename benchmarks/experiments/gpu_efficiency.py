#!/usr/bin/env python3
"""How fast does this GPU run a chunk's GEMMs and causal attention, by size, against the curves
the built-in GPU hardware cites (src/cost/hardware.cc)?

Times, in bf16 on the GPU: a GEMM of M rows by a K x N weight (forward, M x K @ K x N) and its
weight gradient (K x M @ M x N) for M = 256 .. 16K, at the curves' shape class (N = K = 4096) and
at LLaMA-13B's projections (5120 x 5120, 5120 -> 13824, 13824 -> 5120); and causal
scaled_dot_product_attention forward and forward + backward for lengths 512 .. 16K at 16K tokens
per launch, 16 heads of 128 (the FlashAttention benchmarks' setting, whose FLOP count it uses:
4 * length^2 * heads * head_dim / 2 forward, 2.5 times that backward). Each time is the median
of `--repeats` CUDA-event timings after warm-up. Writes TFLOP/s per size beside the built-in
hardware's published points (when the module is importable) to `--out`
(default benchmarks/results/gpu_efficiency.json), the GPU's name in it. `--smoke` runs tiny sizes
in float32 on the CPU (the code path only: the numbers mean nothing).

Usage: PYTHONPATH=python python3 benchmarks/experiments/gpu_efficiency.py [--hardware h100]
           [--out FILE] [--repeats N] [--smoke]
"""

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F

# The benchmarks' shared code (benchmarks/lib) is one folder up.
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from lib import results

GEMM_SHAPES = {
    "4096x4096": (4096, 4096),
    "13b qkvo": (5120, 5120),
    "13b up": (5120, 13824),
    "13b down": (13824, 5120),
}  # (K, N)
ROWS = [256, 512, 1024, 2048, 4096, 8192, 16384]
LENGTHS = [512, 1024, 2048, 4096, 8192, 16384]
TOKENS_PER_LAUNCH, HEADS, HEAD_DIM = 16384, 16, 128


def timed(fn, repeats, device):
    """Median seconds of fn() over `repeats` runs after three warm-up runs."""
    for _ in range(3):
        fn()
    times = []
    for _ in range(repeats):
        if device.type == "cuda":
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            fn()
            end.record()
            torch.cuda.synchronize()
            times.append(start.elapsed_time(end) / 1e3)
        else:
            t = time.perf_counter()
            fn()
            times.append(time.perf_counter() - t)
    return statistics.median(times)


def gemms(rows, shapes, dtype, device, repeats):
    out = {}
    for name, (k, n) in shapes.items():
        w = torch.randn(k, n, dtype=dtype, device=device)
        points = []
        for m in rows:
            x = torch.randn(m, k, dtype=dtype, device=device)
            g = torch.randn(m, n, dtype=dtype, device=device)
            flops = 2.0 * m * k * n
            forward = timed(lambda: x @ w, repeats, device)
            weight_grad = timed(lambda: x.t() @ g, repeats, device)
            points.append(
                {
                    "rows": m,
                    "forward_tflops": flops / forward / 1e12,
                    "weight_grad_tflops": flops / weight_grad / 1e12,
                }
            )
        out[name] = points
    return out


def attention(lengths, tokens, heads, head_dim, dtype, device, repeats):
    points = []
    for length in lengths:
        batch = max(1, tokens // length)
        q, k, v = (
            torch.randn(
                batch, heads, length, head_dim, dtype=dtype, device=device, requires_grad=True
            )
            for _ in range(3)
        )
        forward_flops = 4.0 * batch * length * length * heads * head_dim / 2

        def forward():
            return F.scaled_dot_product_attention(q, k, v, is_causal=True)

        def forward_backward():
            forward().sum().backward()

        points.append(
            {
                "length": length,
                "forward_tflops": forward_flops / timed(forward, repeats, device) / 1e12,
                "forward_backward_tflops": 3.5
                * forward_flops
                / timed(forward_backward, repeats, device)
                / 1e12,
            }
        )
    return points


def published(hardware):
    """The built-in hardware's curves as it cites them, in TFLOP/s at their own sizes, or None
    without the module."""
    try:
        from infinipipe import _C
    except ImportError:
        return None
    hw = json.loads(_C.plan.hardware_json(hardware))

    def tflops(curve):
        return [
            [size, value * hw["peak_flops"] / 1e12]
            for size, value in zip(curve["sizes"], curve["values"])
        ]

    return {
        "hardware": hardware,
        "gemm_forward": tflops(hw["matmul_efficiency_by_rows"]),
        "gemm_weight_grad": tflops(hw["weight_grad_efficiency_by_rows"]),
        "attention_forward_backward": tflops(hw["attention_efficiency_by_length"]),
    }


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--hardware", default="h100", help="built-in hardware to compare with")
    p.add_argument("--out", default=str(results.RESULTS / "gpu_efficiency.json"))
    p.add_argument("--repeats", type=int, default=20)
    p.add_argument("--smoke", action="store_true", help="tiny sizes, float32, on the CPU")
    args = p.parse_args()
    if args.smoke:
        device, dtype = torch.device("cpu"), torch.float32
        rows, shapes, lengths = [16, 32], {"tiny": (32, 48)}, [16, 32]
        tokens, heads, head_dim, repeats = 64, 2, 8, 2
    else:
        if not torch.cuda.is_available():
            sys.exit(
                "gpu_efficiency: no GPU here (torch.cuda.is_available() is false); --smoke "
                "runs the code path on the CPU"
            )
        device, dtype = torch.device("cuda"), torch.bfloat16
        rows, shapes, lengths = ROWS, GEMM_SHAPES, LENGTHS
        tokens, heads, head_dim, repeats = TOKENS_PER_LAUNCH, HEADS, HEAD_DIM, args.repeats
    data = {
        "meta": {
            "device": torch.cuda.get_device_name(0) if device.type == "cuda" else "cpu (smoke)",
            "torch": torch.__version__,
            "dtype": str(dtype),
            "repeats": repeats,
            "date": time.strftime("%Y-%m-%d"),
        },
        "gemm": gemms(rows, shapes, dtype, device, repeats),
        "attention": attention(lengths, tokens, heads, head_dim, dtype, device, repeats),
        "published": published(args.hardware),
    }
    results.write(args.out, data)
    print("gpu_efficiency: wrote", args.out)


if __name__ == "__main__":
    main()
