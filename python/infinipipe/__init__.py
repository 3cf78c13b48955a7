"""InfiniPipe: elastic pipeline parallelism for variable-length long-context LLM training.

The trainer and its helpers live in infinipipe.runtime and need the compiled module
infinipipe._C; they are imported on first use, so infinipipe.models works without it.
"""

__version__ = "0.1.0"

_RUNTIME_NAMES = ("BatchError", "Error", "LlamaStageAdapter", "MemoryMeter", "PlanConfig",
                  "StepResult", "Trainer", "cost_model_for", "model_shape_json")

__all__ = list(_RUNTIME_NAMES)


def __getattr__(name):
    if name in _RUNTIME_NAMES:
        from . import runtime
        return getattr(runtime, name)
    raise AttributeError(f"module 'infinipipe' has no attribute {name!r}")
