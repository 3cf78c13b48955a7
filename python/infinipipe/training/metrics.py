"""What a user sees of a run: one record per step, to the console (a tqdm progress bar), to a
JSON Lines file, and to TensorBoard when it is installed.

    with infinipipe.MetricsLog(jsonl="run/metrics.jsonl", tensorboard="run/tb", total=100) as log:
        for step, batch in enumerate(batches, 1):
            log.step(step, trainer.step(batch), lr=scheduler.get_last_lr()[0])

A record holds the loss, tokens/s, the planned (simulated) and measured step times, planning
time, the plan's method and this process's peak memory. By default only rank 0 writes (the loss
is the same on every rank); a path containing "{rank}" gives every rank its own file.
"""

from __future__ import annotations

import json
import logging
import math
import os
import resource
import sys
from pathlib import Path
from typing import Any

import torch

_log = logging.getLogger("infinipipe")


def peak_memory_bytes() -> int:
    """This process's peak memory: CUDA's peak allocation on a GPU, else the peak resident set
    size (Linux reports ru_maxrss in KiB)."""
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        return int(torch.cuda.max_memory_allocated())
    scale = 1 if sys.platform == "darwin" else 1024
    return int(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss) * scale


def step_record(step: int, result: Any, **extra: Any) -> dict:
    """The metrics of one training step (a StepResult) as a flat dict."""
    record = dict(
        step=step,
        loss=result.loss,
        tokens=result.tokens,
        tokens_per_s=result.tokens / result.step_s if result.step_s > 0 else float("nan"),
        measured_step_s=result.step_s,
        predicted_step_s=result.predicted_s,
        planning_s=result.planning_s,
        planning_hidden_s=result.planning_hidden_s,
        method=result.plan.get("method"),
        setting=result.plan.get("setting"),
        cost_model=result.plan.get("cost_model"),
        peak_memory_bytes=peak_memory_bytes(),
        skipped=result.skipped,
    )
    record.update(extra)
    return record


def _json_safe(value: Any) -> Any:
    # JSON has no inf/nan: write them as strings rather than as invalid JSON.
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    return value


class MetricsLog:
    """Writes step records: console=True shows a progress bar (tqdm) with the latest loss and
    tokens/s; jsonl and tensorboard are paths (None: not written). total: the steps expected,
    for the bar. rank: whose process this is (default: RANK from the environment)."""

    def __init__(
        self,
        *,
        jsonl: str | os.PathLike | None = None,
        tensorboard: str | os.PathLike | None = None,
        console: bool = True,
        total: int | None = None,
        rank: int | None = None,
    ) -> None:
        self.rank = int(os.environ.get("RANK", 0)) if rank is None else int(rank)
        self._file = None
        self._writer = None
        self._bar = None
        self._cost_model = None  # the one named on the console last
        if jsonl is not None and (self.rank == 0 or "{rank}" in str(jsonl)):
            path = Path(str(jsonl).format(rank=self.rank))
            path.parent.mkdir(parents=True, exist_ok=True)
            self._file = path.open("a", encoding="utf-8")
        if tensorboard is not None and self.rank == 0:
            try:
                from torch.utils.tensorboard import SummaryWriter
            except ImportError:
                _log.warning("TensorBoard is not installed (pip install tensorboard): not writing")
            else:
                self._writer = SummaryWriter(str(tensorboard))
        if console and self.rank == 0:
            from tqdm import tqdm

            self._bar = tqdm(total=total, unit="step", dynamic_ncols=True, file=sys.stderr)

    def step(self, step: int, result: Any, **extra: Any) -> dict:
        """Records one training step (a StepResult); extra fields (e.g. lr, grad_norm) join it."""
        record = step_record(step, result, **extra)
        self.write(record)
        if self._bar is not None:
            if record["cost_model"] and record["cost_model"] != self._cost_model:
                self._cost_model = record["cost_model"]  # once, and again when it changes
                self._bar.write(f"predicted step times: {record['cost_model']}")
            self._bar.update(1)
            self._bar.set_postfix(
                loss=f"{record['loss']:.4f}",
                tok_s=f"{record['tokens_per_s']:.0f}",
                step_s=f"{record['measured_step_s']:.2f}/{record['predicted_step_s']:.2f}",
            )
        return record

    def evaluation(self, step: int, result: Any) -> dict:
        """Records an evaluation (an EvalResult) at training step `step`."""
        record = dict(
            step=step,
            eval_loss=result.loss,
            eval_perplexity=result.perplexity,
            eval_tokens=result.tokens,
        )
        self.write(record)
        if self._bar is not None:
            self._bar.write(
                f"step {step}: held-out loss {result.loss:.4f}, perplexity {result.perplexity:.2f}"
            )
        return record

    def write(self, record: dict) -> None:
        if self._file is not None:
            self._file.write(json.dumps({k: _json_safe(v) for k, v in record.items()}) + "\n")
            self._file.flush()
        if self._writer is not None:
            for key, value in record.items():
                if (
                    key != "step"
                    and isinstance(value, (int, float))
                    and not isinstance(value, bool)
                ):
                    self._writer.add_scalar(key, value, record["step"])

    def close(self) -> None:
        for thing in (self._bar, self._writer, self._file):
            if thing is not None:
                thing.close()
        self._bar = self._writer = self._file = None

    def __enter__(self) -> MetricsLog:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()
