#!/usr/bin/env python3
"""Does the memory model predict a stage's peak on a GPU (issue 37, item 4)?

One rank holds a stage of LLaMA-7B's and of LLaMA-13B's shape, the latter also with the lean
layer (the embedding, 4 decoder layers and the head; vocab 32000) in bf16 with float32 masters and AdamW, and trains it on two batches:
"packed", 32K tokens of Wikipedia-like documents in 8K-token chunks, and "split", one 32K-token
document in four 8K-token slices carrying K/V. After two steps (AdamW's moments exist from the
first), the third step's forward and backward run between `torch.cuda.reset_peak_memory_stats`
and `torch.cuda.max_memory_allocated`; that peak is compared with the plan's predicted peak for
the stage (`Plan.predicted_peaks`: model state, K/V buffers, the chunks' activations and the
backward's workspace, sim/memory_timeline.cc), and `max_memory_reserved` says what the caching
allocator holds beyond it. Writes --out (default benchmarks/results/gpu_memory.json) with the
GPU's name. Without CUDA (`--smoke`: a tiny model) it runs the same plans on the CPU with no
measurement (the code path only).

Usage: PYTHONPATH=python python3 benchmarks/experiments/gpu_memory.py [--out F] [--smoke]
"""

from __future__ import annotations

import argparse
import gc
import sys
from pathlib import Path

import torch

import infinipipe
from infinipipe import _C
from infinipipe.models import llama

# The benchmarks' shared code (benchmarks/lib) is one folder up.
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from lib import results
from lib.one_gpu import PACKED, chunked, start, tokens_of

LLAMA_13B = dict(vocab=32000, hidden=5120, heads=40, kv_heads=40, ffn=13824)
SHAPES = {
    "LLaMA-7B": dict(vocab=32000, hidden=4096, heads=32, kv_heads=32, ffn=11008),
    "LLaMA-13B": LLAMA_13B,
    # the lean layer (LlamaConfig.lean_layer): 29% fewer saved bytes per token and layer
    "LLaMA-13B, lean layer": dict(LLAMA_13B, lean_layer=True),
}
LAYERS = 4
CHUNK_TOKENS = 8192
TINY = dict(vocab=97, hidden=32, heads=4, kv_heads=2, ffn=64)
SMOKE = {"tiny": TINY, "tiny, lean layer": dict(TINY, lean_layer=True)}


def batches(smoke: bool) -> dict[str, list[int]]:
    if smoke:
        return {"packed": [40, 9, 23, 5, 31], "split": [96]}
    return {"packed": PACKED + PACKED, "split": [32768]}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--out", type=Path, default=results.RESULTS / "gpu_memory.json")
    p.add_argument("--smoke", action="store_true", help="a tiny model on the CPU (code path only)")
    args, device, dtype, header = start(p)
    cuda = device.type == "cuda"
    chunk_tokens = 32 if args.smoke else CHUNK_TOKENS
    out = dict(
        header,
        layers=LAYERS,
        chunk_tokens=chunk_tokens,
        cases=[],
    )
    for model, shape in (SMOKE if args.smoke else SHAPES).items():
        config = llama.LlamaConfig(**shape, layers=LAYERS, dtype=dtype)
        # what an earlier model left allocated is not this one's
        baseline = torch.cuda.memory_allocated() if cuda else 0
        trainer = infinipipe.Trainer(config, lambda p: torch.optim.AdamW(p, lr=1e-5))
        for case, lengths in batches(args.smoke).items():
            batch = tokens_of(lengths, config.vocab, seed=len(lengths))
            chunks = chunked(lengths, chunk_tokens)
            plan = _C.plan.build_plan(lengths, chunks, [list(range(len(chunks)))], trainer.cost)
            predicted = float(plan.predicted_peaks(trainer.cost)[0])
            for _ in range(2):
                trainer.step(batch, plan=plan)
            trainer.zero_grad()
            row = dict(model=model, batch=case, tokens=sum(lengths), chunks=len(chunks))
            if cuda:
                torch.cuda.synchronize()
                state = torch.cuda.memory_allocated()
                torch.cuda.reset_peak_memory_stats()
                trainer.forward_backward(batch, plan)
                torch.cuda.synchronize()
                row.update(
                    at_start_bytes=state - baseline,
                    peak_bytes=torch.cuda.max_memory_allocated() - baseline,
                    reserved_bytes=torch.cuda.max_memory_reserved(),
                    left_by_earlier_models_bytes=baseline,
                )
            else:
                trainer.forward_backward(batch, plan)
            trainer.optimizer_step()
            row.update(
                predicted_bytes=predicted,
                predicted_model_state_bytes=float(trainer.cost.model_state_bytes(0)),
            )
            if cuda:
                row["measured_over_predicted"] = row["peak_bytes"] / predicted
                row["reserved_over_peak"] = row["reserved_bytes"] / row["peak_bytes"]
                print(
                    f"gpu_memory: {model}, {case}: peak {row['peak_bytes'] / 2**30:.2f} GiB, "
                    f"predicted {predicted / 2**30:.2f} GiB "
                    f"({row['measured_over_predicted']:.3f}), reserved "
                    f"{row['reserved_bytes'] / 2**30:.2f} GiB",
                    flush=True,
                )
            out["cases"].append(row)
        del trainer
        gc.collect()
        if cuda:
            torch.cuda.empty_cache()
    results.write(args.out, out)
    print(f"gpu_memory: wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
