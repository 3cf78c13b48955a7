"""InfiniPipe: elastic pipeline parallelism for variable-length long-context LLM training."""

__version__ = "0.1.0"

from .runtime import (  # noqa: E402,F401
    BatchError,
    Error,
    LlamaStageAdapter,
    MemoryMeter,
    PlanConfig,
    StepResult,
    Trainer,
    cost_model_for,
    model_shape_json,
)
