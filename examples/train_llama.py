"""Train a small LLaMA with elastic pipeline parallelism on CPU, on real text.

    torchrun --nproc_per_node=2 examples/train_llama.py            # 2 stages, Gloo, CPU
    torchrun --nproc_per_node=4 examples/train_llama.py --pipeline 2 --replicas 2

The documents are, by default, the Python language reference's topics that ship with every
Python (`pydoc_data.topics`: 79 documents, 466 KB), tokenized as UTF-8 bytes, so nothing is
downloaded; `--data FILE_OR_DIR` reads your own (JSON Lines with a "text" field, .txt files, or
a `datasets` dataset saved on disk) and `--tokenizer DIR` a local transformers tokenizer.
Batches hold up to `--tokens-per-step` tokens of whole documents (longer ones cut into
`--context` pieces), never padded; every rank draws the same batches. Each step is planned by
the EPP planner (or a baseline with --method) on a background thread while the step before it
trains, run one stage per process, its gradients clipped globally, and stepped; every
`--eval-every` steps the held-out documents (every 20th) are evaluated. `--checkpoint-dir` saves the whole training state every `--save-every` steps and
resumes from the latest checkpoint there. Rank 0 shows a progress bar; `--metrics FILE` writes a
JSON Lines record per step, `--tensorboard DIR` TensorBoard scalars.

`--config FILE.toml` sets any of these options from a file (torchtitan's convention: TOML, the
names as below, `steps = 100`, `spread-head = true`); flags on the command line win over it.
With `--checkpoint-dir` the options in effect are saved there as config.toml, and a run resumed
from that directory reads them back (then --config, then the command line, win over them).
"""

from __future__ import annotations

import argparse
import math
import os
import statistics
import sys
import tomllib
from pathlib import Path

import torch
import torch.distributed as dist

import infinipipe
from infinipipe import _C
from infinipipe.data import (
    ByteTokenizer,
    TokenBatches,
    hold_out,
    load_tokenizer,
    python_reference_documents,
    read_documents,
)
from infinipipe.models.llama import LlamaConfig

SAVED_CONFIG = "config.toml"  # in the checkpoint directory: the options of the run that saved


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--config", default=None, help="a TOML file of these options")
    p.add_argument("--steps", type=int, default=40)
    p.add_argument("--data", default=None, help="documents (default: the Python reference)")
    p.add_argument("--tokenizer", default=None, help="a local tokenizer directory (default: bytes)")
    p.add_argument("--tokens-per-step", type=int, default=4096)
    p.add_argument("--context", type=int, default=2048, help="longest sequence")
    p.add_argument("--method", default="epp", choices=_C.plan.methods())
    p.add_argument("--k", type=int, default=4, help="slices per micro-batch (seq1f1b)")
    p.add_argument("--chunk-tokens", type=int, default=512, help="chunk size (chunkflow)")
    p.add_argument(
        "--memory-gib",
        type=float,
        default=None,
        help="memory budget per stage, model state included (default: this host's memory / stages)",
    )
    p.add_argument(
        "--cost-model",
        default="profile",
        help="'profile' (time this model's layer here on the first run, then cached), "
        "'analytic' (published figures, uncalibrated) or a cost JSON from the profiler",
    )
    p.add_argument("--pipeline", type=int, default=None, help="stages (default: what is left)")
    p.add_argument("--sequence", type=int, default=1, help="sequence-parallel ranks per stage")
    p.add_argument("--replicas", type=int, default=1, help="data-parallel pipeline replicas")
    p.add_argument("--zero", type=int, default=1, choices=(0, 1), help="ZeRO level")
    p.add_argument(
        "--spread-head",
        action="store_true",
        help="a replica of the LM head on every stage; the planner runs each chunk's head where "
        "it balances the stages (docs/design.md, Spread head)",
    )
    p.add_argument("--lr", type=float, default=1e-2)
    p.add_argument("--clip", type=float, default=1.0, help="global gradient-norm clip")
    p.add_argument("--eval-every", type=int, default=20)
    p.add_argument("--checkpoint-dir", default=None)
    p.add_argument("--save-every", type=int, default=20)
    p.add_argument("--metrics", default=None, help="JSON Lines file of per-step records")
    p.add_argument("--tensorboard", default=None, help="TensorBoard log directory")
    p.add_argument("--seed", type=int, default=0)
    given, _ = p.parse_known_args(argv)
    files = [Path(given.checkpoint_dir) / SAVED_CONFIG] if given.checkpoint_dir else []
    files = [f for f in files if f.exists()] + ([Path(given.config)] if given.config else [])
    # Each file becomes the flags it stands for, before the command line's: argparse checks its
    # values as it checks flags, and a later flag wins over an earlier one.
    from_files = [flag for f in files for flag in config_flags(p, f)]
    return p.parse_args(from_files + list(argv if argv is not None else sys.argv[1:]))


def config_flags(parser: argparse.ArgumentParser, path: Path) -> list[str]:
    """A TOML file's options as command-line flags; a usage error for an unknown name."""
    try:
        with open(path, "rb") as f:
            table = tomllib.load(f)
    except (OSError, tomllib.TOMLDecodeError) as e:
        parser.error(f"config file {path}: {e}")
    options = {a.dest: a for a in parser._actions if a.option_strings and a.dest != "help"}
    flags = []
    for name, value in table.items():
        action = options.get(name.replace("-", "_"))
        if action is None or action.dest == "config":
            parser.error(
                f"config file {path}: unknown option {name!r}; the options are "
                + ", ".join(
                    sorted(a.option_strings[0][2:] for a in options.values() if a.dest != "config")
                )
            )
        if isinstance(action, argparse._StoreTrueAction):
            flags += [action.option_strings[0]] if value else []
        else:
            flags += [action.option_strings[0], str(value)]
    return flags


def save_config(args: argparse.Namespace) -> None:
    """The options in effect as the checkpoint directory's config.toml (written whole or not
    at all: a resumed run reads it back)."""
    import tomli_w  # only when saving

    values = {
        k.replace("_", "-"): v for k, v in vars(args).items() if v is not None and k != "config"
    }
    directory = Path(args.checkpoint_dir)
    directory.mkdir(parents=True, exist_ok=True)
    partial = directory / (SAVED_CONFIG + ".partial")
    partial.write_text(tomli_w.dumps(values))
    os.replace(partial, directory / SAVED_CONFIG)


def main() -> None:
    args = parse_args()
    tokenizer = load_tokenizer(args.tokenizer) if args.tokenizer else ByteTokenizer()
    documents = list(read_documents(args.data)) if args.data else python_reference_documents()
    train_docs, held_out_docs = hold_out(documents, every=20)
    batching = dict(tokens_per_batch=args.tokens_per_step, context=args.context, cut="split")
    batches = TokenBatches(train_docs, tokenizer, seed=args.seed, epochs=1000, **batching)
    held_out = list(TokenBatches(held_out_docs, tokenizer, shuffle=False, **batching))

    config = LlamaConfig.tiny(vocab=max(512, tokenizer.vocab_size))
    plan = infinipipe.PlanConfig(
        method=args.method,
        memory_budget_gib=args.memory_gib,
        k=args.k,
        chunk_tokens=args.chunk_tokens,
        cost_model=None if args.cost_model == "analytic" else args.cost_model,
        spread_head=args.spread_head,
    )
    parallel = infinipipe.Parallel(
        pipeline=args.pipeline, sequence=args.sequence, data=args.replicas, zero=args.zero
    )
    trainer = infinipipe.Trainer(
        config,
        lambda params: torch.optim.AdamW(params, lr=args.lr),
        plan=plan,
        parallel=parallel,
        # on a CPU, denormal numbers slow training down (docs/runtime.md)
        runtime=infinipipe.RuntimeConfig(seed=args.seed, flush_denormal=True),
    )
    # Batch i+1 is planned on a background thread while batch i trains.
    loader = trainer.prefetching(batches)
    # The newest checkpoint there that is whole: a damaged one is passed over with a warning.
    resumed = trainer.resume_checkpoint(args.checkpoint_dir) if args.checkpoint_dir else None
    if args.checkpoint_dir and dist.get_rank() == 0:
        save_config(args)
    if resumed is not None:
        loader.load_state_dict(resumed[1]["data"])
        if dist.get_rank() == 0:
            print(f"resumed from {resumed[0]} (step {trainer.steps})")
    upcoming = iter(loader)

    first_loss = result = None
    planning = [0.0, 0.0]  # seconds planned, seconds of it hidden behind earlier steps
    step_times = []  # (measured, predicted) seconds of each step's forward and backward
    heads = None  # per stage, the chunks whose LM head ran there, summed over the steps
    with infinipipe.MetricsLog(
        jsonl=args.metrics, tensorboard=args.tensorboard, total=args.steps - trainer.steps
    ) as log:
        while trainer.steps < args.steps:
            trainer.zero_grad()
            result = trainer.forward_backward(next(upcoming))
            norm = trainer.clip_grad_norm_(args.clip)
            # Skipped on every rank when a loss or gradient is not finite (counted, logged).
            skipped = not trainer.optimizer_step()
            first_loss = result.loss if first_loss is None else first_loss
            planning[0] += result.planning_s
            planning[1] += result.planning_hidden_s
            step_times.append((result.step_s, result.predicted_s))
            step_heads = result.plan["heads_per_stage"]
            heads = [a + b for a, b in zip(heads, step_heads)] if heads else list(step_heads)
            log.step(trainer.steps, result, grad_norm=norm, skipped=skipped)
            if trainer.steps % args.eval_every == 0 or trainer.steps == args.steps:
                log.evaluation(trainer.steps, trainer.evaluate(held_out))
            if args.checkpoint_dir and trainer.steps % args.save_every == 0:
                trainer.save_checkpoint(args.checkpoint_dir, {"data": loader.state_dict()})
    if dist.get_rank() == 0 and result is not None:
        print(
            f"loss {first_loss:.4f} -> {result.loss:.4f} over {args.steps} steps "
            f"(the first step's loss is about ln({config.vocab}) = {math.log(config.vocab):.2f}); "
            f"planning {planning[0]:.2f} s, {planning[1] / max(planning[0], 1e-12):.0%} of it "
            "hidden behind earlier steps"
        )
        measured, predicted = (statistics.median(t) for t in zip(*step_times))
        print(
            f"step time: measured {measured:.3f} s, predicted {predicted:.3f} s (medians; "
            f"{predicted / measured - 1:+.0%}), cost model {trainer.planner.cost_model_name}"
        )
        if args.spread_head:
            print(f"LM heads run per stage over the steps (spread head): {heads}")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
