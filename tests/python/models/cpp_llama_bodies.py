"""Rank bodies for test_cpp_llama.py (run by tests/python/runtime/launcher.run_ranks): a Trainer
whose factory returns the C++ LlamaStage on every stage."""

from __future__ import annotations

import bodies  # tests/python/runtime/bodies.py: model, batches and plans of the parity tests

import infinipipe
from infinipipe import _C
from infinipipe.models import cpp


def cpp_parity(cases: list[dict], timeout_s: float = 60.0) -> list[dict]:
    """Each case as one step of a trainer running the C++ stage; per case this rank's loss,
    gradients (by parameter name) and what the trainer ran."""
    trainers: dict[str, infinipipe.Trainer] = {}
    out = []
    for case in cases:
        dtype = case["dtype"]
        if dtype not in trainers:
            config = bodies.model_config(dtype)
            trainers[dtype] = infinipipe.Trainer(
                lambda stage, split, config=config: cpp.build_stage(config, split, stage, seed=0),
                bodies.frozen_optimizer,
                model_config=config,
                timeout_s=timeout_s,
            )
        trainer = trainers[dtype]
        batch = bodies.make_batch(case["lengths"], case["seed"])
        plan = bodies.make_plan(trainer, case["lengths"], case["plan"])
        result = trainer.step(batch, plan=plan)
        grads = {name: p.grad.detach().clone() for name, p in trainer.module.named_parameters()}
        out.append(
            dict(
                name=case["name"],
                loss=result.loss,
                grads=grads,
                kinds=list(plan.chunk_kinds),
                recompute=plan.recompute,
                module_type=type(trainer.protocol).__name__,
                runs_in_cpp=isinstance(trainer.protocol, _C.runtime.StageModule),
            )
        )
    return out
