"""The training the measured (torchrun) experiments time: an infinipipe.Trainer stepping AdamW, on
batches of sampled lengths with synthetic tokens (measured_comparison, validate_simulator)."""

import torch

import infinipipe
from infinipipe import _C
from infinipipe.data import synthetic_batch
from infinipipe.models import cpp

# the stages a trainer can run: the Python LlamaStage, or the C++ one (models/cpp.py), which
# runs its layers without the GIL or the Python interpreter's work per call
STAGES = ("python", "cpp")


def trainer(config, plan, parallel=None, stage="python", pause_gc=False):
    """A Trainer of the model `config` planned by `plan` (a PlanConfig), AdamW at lr 1e-3, under
    the layout `parallel` (an infinipipe.Parallel; default: one process per stage), flushing
    denormal numbers to zero as the example does (docs/runtime.md); `stage` one of STAGES,
    `pause_gc` the Trainer's."""
    if stage not in STAGES:
        raise ValueError(f"stage {stage!r}: expected one of {', '.join(STAGES)}")

    return infinipipe.Trainer(
        cpp.stage_factory(config) if stage == "cpp" else config,
        lambda p: torch.optim.AdamW(p, lr=1e-3),
        plan=plan,
        parallel=parallel,
        runtime=infinipipe.RuntimeConfig(flush_denormal=True, pause_gc=pause_gc),
    )


def add_trainer_arguments(parser):
    """--stage, the stage the measured trainer runs (profile the same one: `python -m infinipipe
    profile --stage`), and --pause-gc, the Trainer's pause_gc."""
    parser.add_argument(
        "--stage",
        choices=STAGES,
        default="python",
        help="the Python LlamaStage (default) or the C++ one; its cost model should be profiled "
        "with the same --stage",
    )
    parser.add_argument(
        "--pause-gc",
        action="store_true",
        help="Python's garbage collector off while the pipeline runs (RuntimeConfig(pause_gc=True))",
    )


def sampled_batch(distribution, size, context, seed, vocab, token_seed):
    """(lengths, batch): `size` lengths of a built-in distribution truncated to `context`, drawn
    with `seed`, and sequences of those lengths of synthetic tokens drawn with `token_seed`."""
    lengths = _C.plan.sample_lengths(distribution, size, context, seed)
    return lengths, synthetic_batch(lengths, vocab, torch.Generator().manual_seed(token_seed))
