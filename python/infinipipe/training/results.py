"""What the trainer's calls return: a training step's result (Trainer.step, forward_backward) and
an evaluation's (Trainer.evaluate). Both are importable from infinipipe."""

from __future__ import annotations

import math
from dataclasses import dataclass, field


@dataclass
class StepResult:
    loss: float  # mean next-token loss over the step's target tokens (the same on every rank)
    plan: dict  # the plan's summary: method, setting, hash, chunks, waves, predictions
    stats: dict = field(default_factory=dict)  # this stage's measured times, bytes, memory
    tokens: int = 0
    planning_s: float = 0.0  # this rank's planning time (zero for a given plan)
    planning_hidden_s: float = 0.0  # the part of it done ahead, while earlier work ran
    step_s: float = 0.0  # wall time of the whole call on this rank, planning included
    skipped: bool = False  # Trainer.step skipped the optimizer step: a loss or gradient not finite

    @property
    def predicted_s(self) -> float:
        """The simulator's step time for the plan (what the planner minimised)."""
        return float(self.plan.get("predicted_step_s", float("nan")))


@dataclass
class EvalResult:
    loss: float  # mean next-token loss over every target token of the batches
    tokens: int  # target tokens evaluated
    batches: int

    @property
    def perplexity(self) -> float:
        return math.exp(self.loss) if self.loss < 700 else float("inf")
