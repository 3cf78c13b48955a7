"""The training the measured (torchrun) experiments time: an infinipipe.Trainer stepping AdamW, on
batches of sampled lengths with synthetic tokens (measured_comparison, validate_simulator)."""

import torch

import infinipipe
from infinipipe import _C
from infinipipe.data import synthetic_batch


def trainer(config, plan, parallel=None):
    """A Trainer of the model `config` planned by `plan` (a PlanConfig), AdamW at lr 1e-3, under
    the layout `parallel` (an infinipipe.Parallel; default: one process per stage), flushing
    denormal numbers to zero as the example does (docs/runtime.md)."""
    return infinipipe.Trainer(
        config,
        lambda p: torch.optim.AdamW(p, lr=1e-3),
        plan=plan,
        parallel=parallel,
        flush_denormal=True,
    )


def sampled_batch(distribution, size, context, seed, vocab, token_seed):
    """(lengths, batch): `size` lengths of a built-in distribution truncated to `context`, drawn
    with `seed`, and sequences of those lengths of synthetic tokens drawn with `token_seed`."""
    lengths = _C.plan.sample_lengths(distribution, size, context, seed)
    return lengths, synthetic_batch(lengths, vocab, torch.Generator().manual_seed(token_seed))
