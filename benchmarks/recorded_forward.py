"""What a recorded layer forward costs in the state the profiler times it, against the state a
pipeline stage runs it in (the evidence for runtime/layer_profiler.h's chain and in_flight).

    PYTHONPATH=python .venv/bin/python benchmarks/recorded_forward.py

One thread, the tiny LLaMA's Python stage, thread CPU time, the median of --repeats runs per
chunk shape. Per layer, the forward with autograd (recorded) and without (as a checkpointed layer's
first forward), each
- "alone": one layer, recorded right after the same layer ran without autograd on the same input,
  its graph freed at once (how the profiler timed it before the chain);
- "chain": the second of two layers, after the first (recorded or not alike), the graphs of the
  last --in-flight chunks held until their backwards (how the profiler times it now);
- "stage": the mean of a stage's four layers one after the other, --in-flight chunks held (how
  the executor runs a chunk).
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

from infinipipe import _C
from infinipipe.models import llama

SHAPES = [[256], [1024], [2048], [256] * 4, [64] * 16]


def timed(fn) -> tuple[float, object]:
    t0 = time.thread_time()
    out = fn()
    return time.thread_time() - t0, out


def per_layer(stage, lengths: list[int], way: str, record: bool, hold: int, repeats: int) -> float:
    """Median seconds per layer of `way` ("alone", "chain" or "stage")."""
    held, times = [], []
    layers = {"alone": 1, "chain": 2, "stage": 4}[way]
    for _ in range(repeats):
        ctx = _C.runtime.ChunkContext.packed(lengths)
        x = torch.randn(sum(lengths), stage.config.hidden)
        with torch.no_grad():  # the chunk's module state, built untimed as the profiler does
            h = stage.layer(0, x, ctx)
        if way == "alone" and not record:
            with torch.no_grad():
                seconds, h = timed(lambda: stage.layer(0, x, ctx))
        elif way == "alone":
            x.requires_grad_(True)
            seconds, h = timed(lambda: stage.layer(0, x, ctx))
        else:
            with torch.set_grad_enabled(record):
                x.requires_grad_(record)
                h = x
                seconds = 0.0
                for i in range(layers):
                    t, h = timed(lambda i=i, h=h: stage.layer(i, h, ctx))
                    if way == "stage" or i == layers - 1:
                        seconds += t
                seconds /= layers if way == "stage" else 1
        times.append(seconds)
        held.append(h)
        while len(held) > (hold if way != "alone" else 0):
            out = held.pop(0)
            if out.requires_grad:
                out.backward(torch.ones_like(out))
    return statistics.median(times)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--repeats", type=int, default=15)
    p.add_argument("--in-flight", type=int, default=_C.runtime.profile_layer_in_flight)
    args = p.parse_args()
    torch.set_num_threads(1)
    torch.manual_seed(0)
    stage = llama.LlamaStage(llama.LlamaConfig.tiny(), 0, 4, False, False, seed=0)
    print("chunk (sequences x tokens) | way | recorded ms | without autograd ms | ratio")
    for lengths in SHAPES:
        for way in ("alone", "chain", "stage"):
            rec = per_layer(stage, lengths, way, True, args.in_flight, args.repeats)
            ng = per_layer(stage, lengths, way, False, args.in_flight, args.repeats)
            print(
                f"{len(lengths)} x {lengths[0]} | {way} | {rec * 1e3:.2f} | {ng * 1e3:.2f} | "
                f"{ng / rec:.3f}"
            )


if __name__ == "__main__":
    main()
