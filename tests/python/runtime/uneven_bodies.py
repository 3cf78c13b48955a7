"""Test bodies for pipelined steps on uneven layer splits (test_uneven_split.py), run inside the
ranks that launcher.run_ranks starts: bodies.run_cases with the trainer built on a given split."""

from __future__ import annotations

import bodies

import infinipipe


def parity(cases: list[dict], layer_split: list[int], timeout_s: float = 60.0) -> list[dict]:
    """Every case as one step on a trainer whose stages hold `layer_split`'s layers; per case its
    record (bodies.run_cases), the plan's summary and split, and this rank's stage."""

    def new_trainer(dtype: str) -> infinipipe.Trainer:
        return infinipipe.Trainer(
            bodies.model_config(dtype),
            bodies.frozen_optimizer,
            parallel=infinipipe.Parallel(layer_split=layer_split),
            runtime=infinipipe.RuntimeConfig(timeout_s=timeout_s),
        )

    return [
        dict(
            record,
            summary=result.plan,
            split=list(trainer.layers_per_stage),
            layers=len(trainer.module.layer_indices),
            stage=trainer.stage_index,
        )
        for trainer, result, record in bodies.run_cases(cases, new_trainer)
    ]
