#!/usr/bin/env python3
"""What rate does a pinned copy between this GPU and host memory reach, each way, alone and
beside bf16 GEMMs: the rate activation offload would get (docs/design.md, "Activation offload")?

Copies `--gib` GiB between a device tensor and a pinned host tensor on side streams, the way an
offloading executor would: device to host alone, host to device alone, both at once on two
streams, and both at once while a third stream runs back-to-back 8192^3 bf16 GEMMs, whose TFLOP/s
is also timed alone and beside the copies. Each figure is the median of `--repeats` CUDA-event
timings after a warm-up. Writes GB/s (10^9 bytes) to `--out` (default
benchmarks/results/gpu_host_link.json), the GPU's name in it. The simulator's what-if gains 2.7%
on the paper-scale case with 26 GB/s or more each way to each GPU, under a point at 16 and nothing
at 13 (docs/notes/2026-11-30-offload-simulated.md, 2026-12-01-offload-shared-link.md). One GPU
cannot show what GPUs sharing a PCIe switch's link get: that is Hardware::gpus_per_host_link.
`--smoke` runs tiny copies on the CPU (the code path only: the numbers mean nothing).

Usage: python3 benchmarks/experiments/gpu_host_link.py [--out FILE] [--gib G] [--repeats N]
           [--smoke]
"""

import argparse
import statistics
import sys
import time
from pathlib import Path

import torch

# The benchmarks' shared code (benchmarks/lib) is one folder up.
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from lib import results

GEMM = 8192  # M = N = K of the GEMMs run beside the copies


class Clock:
    """Times work enqueued on streams: CUDA events on the GPU, the wall clock on the CPU."""

    def __init__(self, cuda: bool):
        self.cuda = cuda

    def span(self, stream, work):
        """Enqueues work() on `stream`; returns a function giving its seconds once synchronized."""
        if not self.cuda:
            t = time.perf_counter()
            work()
            elapsed = time.perf_counter() - t
            return lambda: elapsed
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        with torch.cuda.stream(stream):
            start.record()
            work()
            end.record()
        return lambda: start.elapsed_time(end) / 1e3

    def sync(self):
        if self.cuda:
            torch.cuda.synchronize()


def measure(spans, clock, repeats):
    """spans(): enqueues one round and returns {name: seconds getter}; medians over rounds."""
    spans()
    clock.sync()
    rounds = []
    for _ in range(repeats):
        got = spans()
        clock.sync()
        rounds.append({name: seconds() for name, seconds in got.items()})
    return {name: statistics.median(r[name] for r in rounds) for name in rounds[0]}


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", default=str(results.RESULTS / "gpu_host_link.json"))
    p.add_argument("--gib", type=float, default=1.0, help="bytes per copy, in GiB")
    p.add_argument("--repeats", type=int, default=10)
    p.add_argument("--smoke", action="store_true", help="tiny copies on the CPU")
    args = p.parse_args()
    if args.smoke:
        cuda, nbytes, gemm, repeats = False, 1 << 20, 64, 2
    else:
        if not torch.cuda.is_available():
            sys.exit(
                "gpu_host_link: no GPU here (torch.cuda.is_available() is false); --smoke "
                "runs the code path on the CPU"
            )
        cuda, nbytes, gemm, repeats = True, int(args.gib * 2**30), GEMM, args.repeats
    device = torch.device("cuda" if cuda else "cpu")
    dtype = torch.bfloat16 if cuda else torch.float32
    clock = Clock(cuda)
    streams = [torch.cuda.Stream() if cuda else None for _ in range(3)]
    out_stream, in_stream, compute_stream = streams
    on_device = [torch.empty(nbytes, dtype=torch.uint8, device=device) for _ in range(2)]
    on_host = [torch.empty(nbytes, dtype=torch.uint8, pin_memory=cuda) for _ in range(2)]
    a = torch.randn(gemm, gemm, dtype=dtype, device=device)
    b = torch.randn(gemm, gemm, dtype=dtype, device=device)
    product = torch.empty(gemm, gemm, dtype=dtype, device=device)
    clock.sync()  # the side streams do not wait for the default stream's initialisation

    def copy_out():
        on_host[0].copy_(on_device[0], non_blocking=True)

    def copy_in():
        on_device[1].copy_(on_host[1], non_blocking=True)

    def gemms(count):
        def run():
            for _ in range(count):
                torch.mm(a, b, out=product)

        return run

    alone_out = measure(lambda: {"out": clock.span(out_stream, copy_out)}, clock, repeats)
    alone_in = measure(lambda: {"in": clock.span(in_stream, copy_in)}, clock, repeats)
    both = measure(
        lambda: {"out": clock.span(out_stream, copy_out), "in": clock.span(in_stream, copy_in)},
        clock,
        repeats,
    )
    # Enough GEMMs to outlast both copies, timed alone first.
    one_gemm = measure(lambda: {"gemm": clock.span(compute_stream, gemms(1))}, clock, repeats)
    count = max(4, int(2 * max(both.values()) / one_gemm["gemm"]) + 1)
    gemm_alone = measure(lambda: {"gemm": clock.span(compute_stream, gemms(count))}, clock, repeats)
    beside = measure(
        lambda: {
            "gemm": clock.span(compute_stream, gemms(count)),
            "out": clock.span(out_stream, copy_out),
            "in": clock.span(in_stream, copy_in),
        },
        clock,
        repeats,
    )
    flops = 2.0 * gemm**3 * count

    def rates(seconds):
        return {
            "device_to_host_gb_s": nbytes / seconds["out"] / 1e9,
            "host_to_device_gb_s": nbytes / seconds["in"] / 1e9,
        }

    data = {
        "device": torch.cuda.get_device_name(0) if cuda else "cpu",
        "torch": torch.__version__,
        "date": time.strftime("%Y-%m-%d"),
        "bytes": nbytes,
        "repeats": repeats,
        "gemm": {"size": gemm, "count": count, "dtype": str(dtype)},
        "alone": rates(alone_out | alone_in),
        "both_ways": rates(both),
        "beside_gemms": rates(beside)
        | {
            "gemm_tflops": flops / beside["gemm"] / 1e12,
            "gemm_tflops_alone": flops / gemm_alone["gemm"] / 1e12,
        },
    }
    results.write(args.out, data)
    print("gpu_host_link: wrote", args.out)


if __name__ == "__main__":
    main()
