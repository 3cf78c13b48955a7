"""InfiniPipe: elastic pipeline parallelism for variable-length long-context LLM training.

The trainer (infinipipe.Trainer, configured by infinipipe.PlanConfig) and its helpers need the
compiled module infinipipe._C; they are imported on first use, so `import infinipipe` is cheap.
"""

__version__ = "0.1.0"

# public name -> the module (one concept each) that defines it
_EXPORTS = {
    "Error": "errors",
    "BatchError": "errors",
    "PlanConfig": "plan_config",
    "Parallel": "layout",
    "Trainer": "trainer",
    "StepResult": "results",
    "EvalResult": "results",
    "MetricsLog": "metrics",
    "MemoryMeter": "memory_meter",
    "LlamaStageAdapter": "stage_adapter",
    "model_shape_json": "cost",
    "cost_model_for": "cost",
    "balanced_layer_split": "stage_balance",
    "choose_layer_split": "stage_balance",
}

__all__ = list(_EXPORTS)


def __getattr__(name):
    if name in _EXPORTS:
        import importlib

        return getattr(importlib.import_module(f".{_EXPORTS[name]}", __name__), name)
    raise AttributeError(f"module 'infinipipe' has no attribute {name!r}")
