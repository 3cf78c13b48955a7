"""Rank bodies for test_cpp_llama.py (run by tests/python/runtime/launcher.run_ranks): a Trainer
whose factory returns the C++ LlamaStage on every stage."""

from __future__ import annotations

import bodies  # tests/python/runtime/bodies.py: model, batches and plans of the parity tests

import infinipipe
from infinipipe import _C
from infinipipe.models import cpp


def cpp_parity(cases: list[dict], timeout_s: float = 60.0) -> list[dict]:
    """Each case as one step of a trainer running the C++ stage (bodies.run_cases); per case its
    record with what the trainer ran."""

    def new_trainer(dtype: str) -> infinipipe.Trainer:
        config = bodies.model_config(dtype)
        return infinipipe.Trainer(
            cpp.stage_factory(config, seed=0),
            bodies.frozen_optimizer,
            runtime=infinipipe.RuntimeConfig(timeout_s=timeout_s),
        )

    return [
        dict(
            record,
            module_type=type(trainer.stage.protocol).__name__,
            runs_in_cpp=isinstance(trainer.stage.protocol, _C.runtime.StageModule),
        )
        for trainer, _, record in bodies.run_cases(cases, new_trainer)
    ]
