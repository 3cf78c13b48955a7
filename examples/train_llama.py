"""Train a small LLaMA with elastic pipeline parallelism on CPU.

    torchrun --nproc_per_node=2 examples/train_llama.py            # 2 stages, Gloo, CPU

Every rank draws the same batches: sequence lengths from the built-in Wikipedia length sampler
(fitted to one million real article lengths), tokens from a synthetic but learnable source
(each sequence counts up from a random start modulo the vocabulary, with a random stride per
sequence), so the loss visibly falls within a few dozen steps. Each step is planned by the EPP
planner (or a baseline with --method) and run one stage per process; rank 0 shows a progress
bar with the loss and throughput.
"""

from __future__ import annotations

import argparse
import time

import torch
import torch.distributed as dist
from tqdm import tqdm

import infinipipe
from infinipipe import _C
from infinipipe.data import synthetic_batch
from infinipipe.models.llama import LlamaConfig


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--steps", type=int, default=40)
    p.add_argument("--batch", type=int, default=16, help="sequences per step")
    p.add_argument(
        "--context", type=int, default=2048, help="longest sequence (longer ones are truncated)"
    )
    p.add_argument("--distribution", default="wikipedia", choices=_C.plan.distribution_names())
    p.add_argument("--method", default="epp", choices=_C.plan.methods())
    p.add_argument("--k", type=int, default=4, help="slices per micro-batch (seq1f1b)")
    p.add_argument("--chunk-tokens", type=int, default=512, help="chunk size (chunkflow)")
    p.add_argument(
        "--memory-gib",
        type=float,
        default=None,
        help="memory budget per stage, model state included (default: this host's memory / stages)",
    )
    p.add_argument("--lr", type=float, default=1e-2)
    p.add_argument("--seed", type=int, default=0)
    return p.parse_args()


def main() -> None:
    args = parse_args()
    config = LlamaConfig.tiny()
    plan = infinipipe.PlanConfig(
        method=args.method,
        memory_budget_gib=args.memory_gib,
        k=args.k,
        chunk_tokens=args.chunk_tokens,
    )
    trainer = infinipipe.Trainer(
        config, lambda params: torch.optim.AdamW(params, lr=args.lr), plan=plan, seed=args.seed
    )
    rank = dist.get_rank()
    generator = torch.Generator().manual_seed(args.seed)
    progress = tqdm(range(args.steps), disable=rank != 0, unit="step")
    first_loss = None
    for step in progress:
        lengths = _C.plan.sample_lengths(
            args.distribution, args.batch, args.context, args.seed + step
        )
        batch = synthetic_batch(lengths, config.vocab, generator)
        start = time.perf_counter()
        result = trainer.step(batch)
        seconds = time.perf_counter() - start
        first_loss = result.loss if first_loss is None else first_loss
        summary = result.plan
        progress.set_postfix(
            loss=f"{result.loss:.3f}",
            tok_s=f"{sum(lengths) / seconds:,.0f}",
            chunks=summary["chunks"],
            waves=summary["waves"],
        )
        if rank == 0 and (step % 10 == 0 or step == args.steps - 1):
            tqdm.write(
                f"step {step:3d}  loss {result.loss:.4f}  tokens {sum(lengths):6d}  "
                f"{sum(lengths) / seconds:8.0f} tok/s  plan {summary['setting']} ({summary['chunks']} chunks, {summary['waves']} waves)"
            )
    if rank == 0:
        print(f"loss {first_loss:.4f} -> {result.loss:.4f} over {args.steps} steps")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
