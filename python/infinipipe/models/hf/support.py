"""Which transformers models the executor runs exactly, and their shape for the cost model.

Supported: LlamaForCausalLM, Qwen2ForCausalLM, MistralForCausalLM, unmodified (the exact
classes, not subclasses). Anything the executor cannot run with the same result as
transformers' own forward is refused with an `infinipipe.Error` naming the feature:

- another model class (its layers may hold q/k norms, softcapping, other masks, ...);
- head_dim different from hidden_size / num_attention_heads (the executor's K/V buffers and
  the planner's LlamaConfig assume it);
- attention_dropout > 0 (the chunk attention has no dropout);
- rope types whose frequencies depend on the longest position of a forward call ("dynamic",
  "longrope"): a chunk holds other positions than the whole sequence would.

Sliding-window attention (Mistral's `sliding_window`, Qwen2's sliding layers) equals full
causal attention while every position is inside the window; the attention function refuses a
chunk holding a position at or beyond it (attention.py), so such models train on sequences up
to the window's length.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import torch

from ...errors import Error
from ..llama import LlamaConfig

SUPPORTED = ("LlamaForCausalLM", "Qwen2ForCausalLM", "MistralForCausalLM")
MODEL_TYPES = {
    "llama": "LlamaForCausalLM",
    "qwen2": "Qwen2ForCausalLM",
    "mistral": "MistralForCausalLM",
}


def _class_name(config: Any) -> str:
    """The CausalLM class a config describes (its `architectures`, else its model_type)."""
    architectures = list(getattr(config, "architectures", None) or [])
    if architectures:
        return str(architectures[0])
    model_type = getattr(config, "model_type", "")
    return MODEL_TYPES.get(model_type, f"a model of type {model_type!r}")


def check_class(name: str) -> None:
    if name not in SUPPORTED:
        raise Error(
            f"transformers model {name} is not supported: infinipipe.models.hf runs "
            f"{', '.join(SUPPORTED)} (decoder layers with plain causal attention)"
        )


def rope_theta(config: Any) -> float:
    rope = dict(getattr(config, "rope_parameters", None) or {})
    if "rope_theta" not in rope:
        raise Error(
            f"transformers config: rope_parameters {rope} has no rope_theta (one rotary "
            "setting for every layer is supported)"
        )
    return float(rope["rope_theta"])


def check_supported(config: Any, class_name: str | None = None) -> None:
    """Raises infinipipe.Error naming the first feature the executor cannot run exactly."""
    check_class(class_name or _class_name(config))
    heads, hidden = config.num_attention_heads, config.hidden_size
    head_dim = getattr(config, "head_dim", None) or hidden // heads
    if head_dim * heads != hidden:
        raise Error(
            f"transformers config: head_dim {head_dim} x {heads} heads != hidden_size "
            f"{hidden}; InfiniPipe's model shape needs head_dim = hidden_size / heads"
        )
    dropout = float(getattr(config, "attention_dropout", 0.0) or 0.0)
    if dropout > 0:
        raise Error(
            f"transformers config: attention_dropout={dropout} is not supported (the chunk "
            "attention has no dropout); set config.attention_dropout = 0.0"
        )
    rope_type = str(dict(getattr(config, "rope_parameters", None) or {}).get("rope_type", ""))
    if "dynamic" in rope_type or rope_type == "longrope":
        raise Error(
            f"transformers config: rope_type {rope_type!r} is not supported: its frequencies "
            "depend on the longest position of each forward call, and a pipeline chunk holds "
            "other positions than the whole sequence"
        )
    rope_theta(config)


def load_config(directory: str | os.PathLike) -> Any:
    """The transformers config of a local save_pretrained directory (never downloads)."""
    from transformers import AutoConfig

    if not (Path(directory) / "config.json").is_file():
        raise Error(f"{directory} holds no config.json: give a save_pretrained directory")
    return AutoConfig.from_pretrained(str(directory), local_files_only=True)


def config_of(source: Any) -> tuple[Any, str]:
    """(config, class name) of a transformers model, config or save_pretrained directory."""
    if isinstance(source, (str, os.PathLike)):
        config = load_config(source)
        return config, _class_name(config)
    if isinstance(source, torch.nn.Module):
        return source.config, type(source).__name__
    return source, _class_name(source)


def default_dtype(source: Any) -> torch.dtype:
    """A model's own dtype; float32 for a config or a directory (stage_factory's default)."""
    if isinstance(source, torch.nn.Module):
        return next(source.parameters()).dtype
    return torch.float32


def model_shape(source: Any, dtype: torch.dtype | None = None) -> LlamaConfig:
    """The planner's LlamaConfig of a supported transformers model, config or save_pretrained
    directory: vocabulary, hidden size, layers, heads, KV heads, FFN size, rope theta, RMSNorm
    epsilon. Pass it to the Trainer as `model_config`. dtype must be the stages' (the default
    is stage_factory's: a model's own, float32 for a directory)."""
    config, name = config_of(source)
    check_supported(config, name)
    dtype = dtype or default_dtype(source)
    return LlamaConfig(
        vocab=int(config.vocab_size),
        hidden=int(config.hidden_size),
        layers=int(config.num_hidden_layers),
        heads=int(config.num_attention_heads),
        kv_heads=int(config.num_key_value_heads or config.num_attention_heads),
        ffn=int(config.intermediate_size),
        rope_theta=rope_theta(config),
        rms_eps=float(config.rms_norm_eps),
        dtype=dtype,
    )
