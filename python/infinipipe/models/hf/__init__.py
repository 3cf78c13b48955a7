"""Unmodified transformers decoder models (LlamaForCausalLM, Qwen2ForCausalLM,
MistralForCausalLM) trained through InfiniPipe's executor.

    from infinipipe.models import hf

    trainer = infinipipe.Trainer(
        hf.stage_factory("path/to/save_pretrained_dir", dtype=torch.float32),  # its shape too
        optimizer_factory,
    )
    ...
    hf.save_stage(trainer.module, "out")  # every rank; AutoModelForCausalLM loads "out"

One concept per module: support (which models run exactly, refusals, the planner's shape),
attention (the "infinipipe" attention function transformers' layers call), stage (HFStage, the
executor's stage protocol over transformers' own modules), build (one rank's stage from a
directory on the meta device, or from a model in memory), files (safetensors shards and their
index), save (a directory from_pretrained loads). See docs/runtime.md, "transformers models".
"""

from .attention import infinipipe_attention, register
from .build import build_stage, from_model, from_pretrained, stage_factory, stage_layers
from .save import save_pretrained, save_stage
from .stage import HFStage
from .support import SUPPORTED, check_supported, model_shape

register()

__all__ = [
    "SUPPORTED",
    "HFStage",
    "build_stage",
    "check_supported",
    "from_model",
    "from_pretrained",
    "infinipipe_attention",
    "model_shape",
    "register",
    "save_pretrained",
    "save_stage",
    "stage_factory",
    "stage_layers",
]
