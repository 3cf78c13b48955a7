#!/usr/bin/env python3
"""How much does the executor add to a training step on one GPU (issue 37, item 5)?

One rank trains a ~1B LLaMA (hidden 2048, 16 layers, 16 heads, ffn 5504, vocab 32000) in bf16
with float32 masters and AdamW, the whole model as one stage, on two batches of 16K tokens:
"packed", 24 documents of Wikipedia-like lengths, and "split", one 16K-token document. Three
runners step the same batch, in turns (each round starts with another runner):

- plain: the model's forward on the whole batch as one packed chunk (`llama.reference_loss`: one
  call of the chunk attention, ATen's varlen flash kernel, the one SDPA's flash backend runs),
  backward, the masters' AdamW step: a training step with nothing of ours around the model;
- executor, one chunk: infinipipe.Trainer.step on a plan of one chunk holding the whole batch
  (the same work as plain: what the executor adds is its own);
- executor, 4K chunks: the same on a plan of 4096-token chunks (packed documents; four slices of
  the long one carrying K/V), what EPP's token-level units cost on top.

A step is timed between CUDA synchronizations; the result per runner is the median of --steps
timed steps after --warmup, as tokens/s and as the ratio to plain. Writes --out (default
benchmarks/results/gpu_step_speed.json) with the GPU's name. Without CUDA it runs on the CPU in
float32 (`--smoke`: a tiny model and batch, the code path only; the numbers mean nothing).

Usage: PYTHONPATH=python python3 benchmarks/experiments/gpu_step_speed.py [--steps N] [--out F]
           [--smoke]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import torch

import infinipipe
from infinipipe import _C
from infinipipe.models import llama
from infinipipe.training.mixed_precision import MasterWeights

# The benchmarks' shared code (benchmarks/lib) is one folder up.
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from lib import results
from lib.one_gpu import PACKED, chunked, start, tokens_of

MODEL = dict(vocab=32000, hidden=2048, layers=16, heads=16, kv_heads=16, ffn=5504)
SMOKE_MODEL = dict(vocab=97, hidden=32, layers=2, heads=4, kv_heads=2, ffn=64)
CHUNK_TOKENS = 4096
LR = 1e-4


def batches(smoke: bool) -> dict[str, list[int]]:
    if smoke:
        return {"packed": [40, 9, 23, 5, 31], "split": [96]}
    return {"packed": PACKED, "split": [16384]}


class Plain:
    """The model's own training step: forward on one packed chunk, backward, masters' AdamW."""

    def __init__(self, config: llama.LlamaConfig, device: torch.device):
        self.model = llama.build_full_model(config, device=device)
        self.masters = (
            MasterWeights(self.model.parameters())
            if config.dtype in (torch.bfloat16, torch.float16)
            else None
        )
        params = self.masters.params if self.masters else list(self.model.parameters())
        self.optimizer = torch.optim.AdamW(params, lr=LR)

    def step(self, batch: list[torch.Tensor]) -> float:
        self.model.zero_grad(set_to_none=True)
        loss = llama.reference_loss(self.model, batch)
        loss.backward()
        if self.masters:
            self.masters.step(self.optimizer)
        else:
            self.optimizer.step()
        return loss.item()


class Executor:
    """infinipipe.Trainer on one rank, the whole model one stage, on a plan of given chunks."""

    def __init__(self, config: llama.LlamaConfig, chunk_tokens: int | None):
        self.trainer = infinipipe.Trainer(config, lambda p: torch.optim.AdamW(p, lr=LR))
        self.chunk_tokens = chunk_tokens

    def step(self, batch: list[torch.Tensor]) -> float:
        lengths = [len(t) for t in batch]
        chunks = chunked(lengths, self.chunk_tokens or sum(lengths))
        plan = _C.plan.build_plan(lengths, chunks, [list(range(len(chunks)))], self.trainer.cost)
        return self.trainer.step(batch, plan=plan).loss


def timed(runner, batch: list[torch.Tensor], device: torch.device) -> tuple[float, float]:
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    start = time.perf_counter()
    loss = runner.step(batch)
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    return time.perf_counter() - start, loss


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--steps", type=int, default=10, help="timed steps per runner and batch")
    p.add_argument("--warmup", type=int, default=2, help="untimed steps first")
    p.add_argument("--out", type=Path, default=results.RESULTS / "gpu_step_speed.json")
    p.add_argument("--smoke", action="store_true", help="a tiny model and batch (code path only)")
    args, device, dtype, header = start(p)
    config = llama.LlamaConfig(**(SMOKE_MODEL if args.smoke else MODEL), dtype=dtype)
    chunk_tokens = 32 if args.smoke else CHUNK_TOKENS
    runners = {
        "plain": Plain(config, device),
        "executor, one chunk": Executor(config, None),
        f"executor, {chunk_tokens}-token chunks": Executor(config, chunk_tokens),
    }
    names = list(runners)
    out = dict(
        header,
        model=SMOKE_MODEL if args.smoke else MODEL,
        chunk_tokens=chunk_tokens,
        steps=args.steps,
        warmup=args.warmup,
        cases={},
    )
    for case, lengths in batches(args.smoke).items():
        batch = tokens_of(lengths, config.vocab, seed=len(lengths))
        seconds: dict[str, list[float]] = {n: [] for n in names}
        losses: dict[str, float] = {}
        for round_ in range(args.warmup + args.steps):
            # each round starts with another runner: none always follows the same one
            for name in names[round_ % len(names) :] + names[: round_ % len(names)]:
                t, losses[name] = timed(runners[name], batch, device)
                if round_ >= args.warmup:
                    seconds[name].append(t)
        tokens = sum(lengths)
        plain = statistics.median(seconds["plain"])
        out["cases"][case] = dict(
            lengths=lengths,
            tokens=tokens,
            runners={
                n: dict(
                    median_s=statistics.median(s),
                    tokens_per_s=tokens / statistics.median(s),
                    time_over_plain=statistics.median(s) / plain,
                    seconds=s,
                    last_loss=losses[n],
                )
                for n, s in seconds.items()
            },
        )
        for n in names:
            r = out["cases"][case]["runners"][n]
            print(
                f"gpu_step_speed: {case}, {n}: {r['tokens_per_s']:.0f} tokens/s, "
                f"{r['time_over_plain']:.3f}x plain's time",
                flush=True,
            )
    results.write(args.out, out)
    print(f"gpu_step_speed: wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
