"""Fine-tune an unmodified transformers model (LlamaForCausalLM, Qwen2ForCausalLM,
MistralForCausalLM) from a local save_pretrained directory with elastic pipeline parallelism,
and save it back to a directory `from_pretrained` loads:

    python examples/make_hf_model.py runs/demo-llama    # a stand-in for a downloaded model
    torchrun --nproc_per_node=2 examples/finetune_hf.py --model runs/demo-llama --out runs/tuned

Each rank reads only its stage's weights from the safetensors files (infinipipe.models.hf).
The documents (default: the Python reference's topics; `--data` your own) are tokenized with
the model directory's tokenizer (or `--tokenizer`), every 20th held out. The held-out loss is
measured before and after training; the model is saved to `--out` on every rank (one shard per
stage, with the tokenizer), and rank 0 loads it back with transformers'
`AutoModelForCausalLM.from_pretrained` and computes the same held-out loss with transformers'
own forward, which must match the pipeline's.
"""

from __future__ import annotations

import argparse
import math
from pathlib import Path

import torch
import torch.distributed as dist
import torch.nn.functional as F

import infinipipe
from infinipipe.data import (
    TokenBatches,
    hold_out,
    load_tokenizer,
    python_reference_documents,
    read_documents,
)
from infinipipe.models import hf


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--model", required=True, help="a save_pretrained directory (safetensors)")
    p.add_argument("--out", required=True, help="where to save the fine-tuned model (new)")
    p.add_argument("--tokenizer", default=None, help="default: the model directory's")
    p.add_argument("--data", default=None, help="documents (default: the Python reference)")
    p.add_argument("--steps", type=int, default=30)
    p.add_argument("--tokens-per-step", type=int, default=2048)
    p.add_argument("--context", type=int, default=1024, help="longest sequence")
    p.add_argument("--method", default="epp")
    p.add_argument("--lr", type=float, default=3e-3)
    p.add_argument("--clip", type=float, default=1.0, help="global gradient-norm clip")
    p.add_argument("--metrics", default=None, help="JSON Lines file of per-step records")
    p.add_argument("--seed", type=int, default=0)
    return p.parse_args()


@torch.no_grad()
def transformers_loss(directory: str, batches: list[list[torch.Tensor]]) -> float:
    """The mean next-token loss of the batches by transformers' own forward of the model
    `from_pretrained(directory)` loads, one sequence at a time."""
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(directory, local_files_only=True).eval()
    total, targets = 0.0, 0
    for sequence in (s for batch in batches for s in batch):
        logits = model(input_ids=sequence[None], use_cache=False).logits[0, :-1]
        total += float(F.cross_entropy(logits.double(), sequence[1:], reduction="sum"))
        targets += sequence.numel() - 1
    return total / targets


def main() -> None:
    args = parse_args()
    if (Path(args.out) / "config.json").exists():
        raise SystemExit(f"--out {args.out} already holds a model: give a new directory")
    tokenizer = load_tokenizer(args.tokenizer or args.model)
    documents = list(read_documents(args.data)) if args.data else python_reference_documents()
    train_docs, held_out_docs = hold_out(documents, every=20)
    batching = dict(tokens_per_batch=args.tokens_per_step, context=args.context, cut="split")
    batches = TokenBatches(train_docs, tokenizer, seed=args.seed, epochs=1000, **batching)
    held_out = list(TokenBatches(held_out_docs, tokenizer, shuffle=False, **batching))

    trainer = infinipipe.Trainer(
        hf.stage_factory(args.model),  # this rank's stage, and the model's shape for the planner
        lambda params: torch.optim.AdamW(params, lr=args.lr),
        plan=infinipipe.PlanConfig(method=args.method),
        runtime=infinipipe.RuntimeConfig(seed=args.seed),
    )
    before = trainer.evaluate(held_out)
    with infinipipe.MetricsLog(jsonl=args.metrics, total=args.steps) as log:
        log.evaluation(0, before)
        while trainer.steps < args.steps:
            trainer.zero_grad()
            result = trainer.forward_backward(next(batches))
            norm = trainer.clip_grad_norm_(args.clip)
            if math.isfinite(norm):  # else: skip the step, keep the weights
                trainer.optimizer_step()
            log.step(trainer.steps, result, grad_norm=norm)
        after = trainer.evaluate(held_out)
        log.evaluation(trainer.steps, after)

    hf.save_stage(trainer.module, args.out)  # every rank writes its stage's shard
    if dist.get_rank() == 0:
        tokenizer.tokenizer.save_pretrained(args.out)
        reloaded = transformers_loss(args.out, held_out)
        print(
            f"held-out loss {before.loss:.4f} -> {after.loss:.4f} over {args.steps} steps; "
            f"AutoModelForCausalLM.from_pretrained({args.out!r}) gives {reloaded:.4f} "
            f"(difference {abs(reloaded - after.loss):.1e})"
        )
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
