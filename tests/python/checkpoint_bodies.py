"""Rank bodies for test_checkpoint.py (run by tests/python/runtime/launcher.run_ranks): a tiny
float64 LLaMA trained on seeded synthetic batches, saved, resumed, and checkpoints that are
wrong in each way a load must refuse."""

from __future__ import annotations

import logging
import random
from pathlib import Path

import torch
import torch.distributed.checkpoint as dcp

import infinipipe
from infinipipe.data import synthetic_batch
from infinipipe.models import cpp
from infinipipe.models.llama import LlamaConfig
from infinipipe.state import checkpoint

MODEL = LlamaConfig.tiny(vocab=97, hidden=64, layers=4, ffn=128, dtype=torch.float64)
# A fixed chunking (no search with a time limit): the same plan for a batch on every run.
PLAN = infinipipe.PlanConfig(method="chunkflow", chunk_tokens=64, memory_budget_gib=1)
SEED = 5


def make_trainer(
    config: LlamaConfig = MODEL, cpp_stage: bool = False, parallel: dict | None = None
) -> infinipipe.Trainer:
    """The Python LlamaStage, or with cpp_stage the C++ one (same parameter names); parallel:
    the layout's degrees (default: one process per stage)."""
    model = cpp.stage_factory(config) if cpp_stage else config
    return infinipipe.Trainer(
        model,
        lambda params: torch.optim.AdamW(params, lr=1e-2, weight_decay=0.1),
        plan=PLAN,
        parallel=infinipipe.Parallel(**(parallel or {})),
        runtime=infinipipe.RuntimeConfig(timeout_s=60),
    )


def next_batch(generator: torch.Generator) -> list[torch.Tensor]:
    lengths = torch.randint(4, 60, (3,), generator=generator).tolist()
    return synthetic_batch(lengths, MODEL.vocab, generator)


class Warnings(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())


def train(
    directory: str | None = None,
    steps: int = 10,
    save_at: tuple[int, ...] = (),
    resume: bool = False,
    cpp_stage: bool = False,
    parallel: dict | None = None,
    fall_back: bool = False,
) -> dict:
    """Trains up to `steps` optimizer steps (resuming from `directory` first if asked), saving
    after the steps in `save_at` (0: before the first). Returns the loss of each step, and
    per step one draw from torch's and from Python's RNG (which a resume must continue)."""
    warnings = Warnings()
    logging.getLogger("infinipipe").addHandler(warnings)
    trainer = make_trainer(cpp_stage=cpp_stage, parallel=parallel)
    torch.manual_seed(100 + trainer.rank)  # the RNGs a resume restores, seeded per rank
    random.seed(100 + trainer.rank)
    generator = torch.Generator().manual_seed(SEED)
    out: dict = {"losses": {}, "draws": {}, "split": trainer.layers_per_stage}
    if resume and fall_back:
        loaded, extra = checkpoint.resume(trainer, directory)
        generator.set_state(extra["generator"])
        out["resumed_from"] = loaded.name
        out["resumed_at"] = trainer.steps
    elif resume:
        extra = checkpoint.load(trainer, directory)
        generator.set_state(extra["generator"])
        out["resumed_at"] = trainer.steps
    while True:
        if trainer.steps in save_at:
            checkpoint.save(trainer, directory, {"generator": generator.get_state()})
        if trainer.steps >= steps:
            break
        result = trainer.step(next_batch(generator))
        out["losses"][trainer.steps] = result.loss
        out["draws"][trainer.steps] = (float(torch.rand(())), random.random())
    out["warnings"] = warnings.messages
    return out


def load_error(directory: str, changes: dict) -> str:
    """Loads into a trainer of another model shape (LlamaConfig fields `changes`, a dtype by
    its name)."""
    if "dtype" in changes:
        changes = dict(changes, dtype=getattr(torch, changes["dtype"]))
    trainer = make_trainer(MODEL.replace(**changes))
    try:
        checkpoint.load(trainer, directory)
    except infinipipe.Error as e:
        return str(e)
    return "no error"


def load_errors(paths: list[str]) -> dict:
    """Tries each of `paths` in turn (every one must fail on every rank, none hang), then trains
    one step to show the ranks are still in step."""
    trainer = make_trainer()
    before = {k: v.clone() for k, v in trainer.module.state_dict().items()}
    messages = []
    for path in paths:
        try:
            checkpoint.load(trainer, path)
            messages.append("no error")
        except infinipipe.Error as e:
            messages.append(str(e))
    after = trainer.module.state_dict()
    untouched = trainer.steps == 0 and all(torch.equal(before[k], after[k]) for k in before)
    loss = trainer.step(next_batch(torch.Generator().manual_seed(1))).loss
    return dict(messages=messages, loss=loss, untouched=untouched)


def resume_errors(paths: list[str]) -> list[str]:
    """resume() on each of `paths`: its error, or "fresh start" when it found no checkpoint."""
    trainer = make_trainer()
    messages = []
    for path in paths:
        try:
            found = checkpoint.resume(trainer, path)
            messages.append("fresh start" if found is None else f"loaded {found[0]}")
        except infinipipe.Error as e:
            messages.append(str(e))
    return messages


def failed_save(directory: str) -> dict:
    """Saves after steps 1, 2 and 3 (keeping 2), trains step 4, then a save whose writer fails
    on rank 1 only; then loads what is there and saves step 3 once more."""
    root = Path(directory)
    trainer = make_trainer()
    generator = torch.Generator().manual_seed(SEED)
    for _ in range(3):
        trainer.step(next_batch(generator))
        checkpoint.save(trainer, directory, {"generator": generator.get_state()}, keep=2)
    saved = {k: v.clone() for k, v in trainer.module.state_dict().items()}
    saved_generator = generator.get_state()
    trainer.step(next_batch(generator))
    out: dict = {}

    write_data = dcp.FileSystemWriter.write_data

    def broken(self, plan, planner):
        raise OSError("disk full (injected)")

    if trainer.rank == 1:
        dcp.FileSystemWriter.write_data = broken
    try:
        checkpoint.save(trainer, directory, {"generator": generator.get_state()}, keep=2)
        out["error"] = "no error"
    except infinipipe.Error as e:
        out["error"] = str(e)
    finally:
        dcp.FileSystemWriter.write_data = write_data
    out["latest"] = (root / "latest").read_text().strip()
    out["listing"] = sorted(p.name for p in root.iterdir())

    extra = checkpoint.load(trainer, directory)
    out["steps"] = trainer.steps
    out["weights_restored"] = all(
        torch.equal(v, saved[k]) for k, v in trainer.module.state_dict().items()
    )
    out["generator_restored"] = torch.equal(extra["generator"], saved_generator)

    checkpoint.save(trainer, directory, {"generator": extra["generator"]}, keep=2)
    out["listing_after_resave"] = sorted(p.name for p in root.iterdir())
    out["latest_after_resave"] = (root / "latest").read_text().strip()
    return out


def no_state_dict(directory: str) -> str:
    """A stage object without state_dict(): a clear error on every rank, nothing written."""
    trainer = make_trainer()
    trainer.stage.module = object()
    try:
        checkpoint.save(trainer, directory)
    except infinipipe.Error as e:
        return str(e)
    return "no error"
