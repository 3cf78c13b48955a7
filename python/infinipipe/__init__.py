"""InfiniPipe: elastic pipeline parallelism for variable-length long-context LLM training.

The public face: the Trainer and its configs (PlanConfig, Parallel, RuntimeConfig, StageFactory),
what its calls return, and the errors. They need the compiled module infinipipe._C and are
imported on first use, so `import infinipipe` is cheap. The package by layer (docs/design.md,
"Python package"): training/ (the Trainer and its parts), planning/ (how steps are planned),
distributed/ (layout, groups, rendezvous, failures), state/ (checkpoints), profiling/ (the cost
model measured), models/, data/.
"""

from . import _moved

__version__ = "0.1.0"

# public name -> the module (one concept each) that defines it
_EXPORTS = {
    "Error": "errors",
    "BatchError": "errors",
    "LostRankError": "errors",
    "RankFailedError": "errors",
    "NonfiniteError": "errors",
    "Trainer": "training.trainer",
    "PlanConfig": "planning.config",
    "Parallel": "distributed.layout",
    "RuntimeConfig": "training.config",
    "StageFactory": "models.stage_protocol",
    "StepResult": "training.results",
    "EvalResult": "training.results",
    "MetricsLog": "training.metrics",
    "MemoryMeter": "training.memory_meter",
    "LlamaStageAdapter": "models.stage_protocol",
    "model_shape_json": "planning.cost_model",
    "cost_model_for": "planning.cost_model",
    "balanced_layer_split": "planning.stage_balance",
    "choose_layer_split": "planning.stage_balance",
}

__all__ = list(_EXPORTS)

_moved.install()


def __getattr__(name):
    if name in _EXPORTS:
        import importlib

        return getattr(importlib.import_module(f".{_EXPORTS[name]}", __name__), name)
    raise AttributeError(f"module 'infinipipe' has no attribute {name!r}")
