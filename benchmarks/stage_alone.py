"""A stage timed alone, outside the pipeline, on a split sequence's slices: against the profiler's
points, on a fresh K/V buffer per slice, and beside other work (the one-process side of
docs/benchmarks.md, "Simulator validation"; benchmarks/action_times.py is the pipeline side).

    PYTHONPATH=python .venv/bin/python benchmarks/stage_alone.py

One thread, the tiny LLaMA's Python stage of 4 layers, thread CPU time. A sequence of --length
tokens is cut two ways: ChunkFlow's (1024-token slices) and EPP's (cost-balanced slices, shorter
as their context grows; the validation's heavy step 0 cuts its 8192-token sequence so). Each
slicing runs as the executor runs a split sequence: every slice's forward on one set of K/V
buffers, then the backwards, last slice first. Per round and slicing, forward and backward
together over all slices and over those at contexts from half the length:
- the profiler's points for the same slices over this stage's time;
- each slice on a fresh K/V buffer of its own over this stage's time;
- this stage's time beside a neighbour process running ChunkFlow's slicing or EPP's, over its
  time beside the profiler's grid loop (what a profile with --neighbours 1 runs beside).
"""

from __future__ import annotations

import argparse
import contextlib
import multiprocessing
import statistics
import time

import torch

from infinipipe import _C, profile
from infinipipe.models import llama

EPP_CUTS = [1566, 2522, 3278, 3930, 4514, 5050, 5548, 6016, 6460, 6884, 7290, 7680, 8056]


def slicings(length: int) -> dict:
    epp = [c for c in EPP_CUTS if c < length] if length == 8192 else [length // 2]
    cuts = {"chunkflow": list(range(1024, length, 1024)), "epp": epp}
    return {k: list(zip([0, *c], [*c, length])) for k, c in cuts.items()}


class Stage:
    def __init__(self, length: int) -> None:
        torch.set_num_threads(1)
        torch.set_flush_denormal(True)
        torch.manual_seed(0)
        self.config = llama.LlamaConfig.tiny()
        self.stage = llama.LlamaStage(self.config, 0, 4, False, False, seed=0)
        self.length = length

    def buffers(self) -> list:
        kv = []
        for _ in range(4):
            b = _C.kernels.SequenceKV(
                self.length, self.config.kv_heads, self.config.head_dim, self.config.dtype
            )
            b.k.normal_()
            b.v.normal_()
            b.zero_grad()
            kv.append([b])
        return kv

    def run(self, slices: list, fresh: bool = False) -> list:
        """Seconds (forward and backward) of each slice's 4 layers."""
        shared = None if fresh else self.buffers()
        held, seconds = [], [0.0] * len(slices)
        for i, (start, end) in enumerate(slices):
            ctx = _C.runtime.ChunkContext([(0, start, end)], self.buffers() if fresh else shared)
            x = torch.randn(end - start, self.config.hidden)
            with torch.no_grad():  # the chunk's module state, untimed as the profiler does
                self.stage.layer(0, x, ctx)
            x.requires_grad_(True)
            t0 = time.thread_time()
            for layer in range(4):
                x = self.stage.layer(layer, x, ctx)
            seconds[i] += time.thread_time() - t0
            held.append((i, ctx, x))
        for i, _, out in reversed(held):
            t0 = time.thread_time()
            out.backward(torch.ones_like(out))
            seconds[i] += time.thread_time() - t0
        return seconds


def profiled(config, module, slices: list) -> list:
    runs = profile.time_runs(
        module, config, [(e - s, s) for s, e in slices], 3, cpu_time=True, progress=False
    )["layer"]
    return [
        4 * (statistics.median(r["forward_s"]) + statistics.median(r["backward_s"])) for r in runs
    ]


def neighbour(kind: str, length: int, ready) -> None:
    """A slicing run over and over beside the timed stage, until terminated."""
    stage = Stage(length)
    slices = slicings(length)[kind]
    ready.send(True)
    while True:
        stage.run(slices)


@contextlib.contextmanager
def beside(kind: str, length: int, config):
    """A neighbour process at work for the block: the profiler's own (its grid loop) or one
    running a slicing."""
    if kind == "grid":
        points, _ = profile.grid_points("full")
        with profile.neighbours(1, config, "python", points, threads=1):
            yield
        return
    mp = multiprocessing.get_context("spawn")
    ready, send = mp.Pipe(duplex=False)
    proc = mp.Process(target=neighbour, args=(kind, length, send), daemon=True)
    proc.start()
    try:
        ready.recv()
        yield
    finally:
        proc.terminate()
        proc.join()


def ratio(a: list, b: list, late: list) -> str:
    return (
        f"{sum(a) / sum(b) - 1:+.3f} ({sum(a[i] for i in late) / sum(b[i] for i in late) - 1:+.3f})"
    )


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--length", type=int, default=8192)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--smoke", action="store_true", help="a 2048-token sequence, one round")
    args = p.parse_args()
    if args.smoke:
        args.length, args.rounds = 2048, 1
    stage = Stage(args.length)
    module = profile.profiled_module(stage.config, "python")
    cuts = slicings(args.length)
    stage.run(cuts["chunkflow"])  # warm-up
    print("all slices (slices at contexts from half the length)")
    for r in range(args.rounds):
        for name, slices in cuts.items():
            late = [i for i, (s, _) in enumerate(slices) if s >= args.length // 2]
            alone = stage.run(slices)
            points = profiled(stage.config, module, slices)
            fresh = stage.run(slices, fresh=True)
            print(
                f"round {r + 1}, {name}: profiler / stage {ratio(points, alone, late)}, "
                f"fresh buffers / stage {ratio(fresh, alone, late)}",
                flush=True,
            )
    times = {}
    for kind in ("grid", "chunkflow", "epp"):
        with beside(kind, args.length, stage.config):
            for name, slices in cuts.items():
                runs = [stage.run(slices) for _ in range(args.rounds)]
                times[(kind, name)] = [statistics.median(t) for t in zip(*runs)]
    for name, slices in cuts.items():
        late = [i for i, (s, _) in enumerate(slices) if s >= args.length // 2]
        ratios = ", ".join(
            f"{kind} {ratio(times[(kind, name)], times[('grid', name)], late)}"
            for kind in ("chunkflow", "epp")
        )
        print(f"{name} beside a neighbour, over beside the grid loop: {ratios}")


if __name__ == "__main__":
    main()
