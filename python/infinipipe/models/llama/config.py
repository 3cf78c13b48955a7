"""The decoder's shape (LlamaConfig), and its conversion to and from transformers'."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

import torch


@dataclass(frozen=True)
class LlamaConfig:
    """Shape of the decoder. Field names match the planner's ModelShape (cost/model_shape.h)."""

    vocab: int
    hidden: int
    layers: int
    heads: int
    kv_heads: int
    ffn: int  # SwiGLU intermediate size
    rope_theta: float = 10000.0
    rms_eps: float = 1e-6
    dtype: torch.dtype = torch.float32
    # The lean layer: each RMSNorm keeps its input and rstd, the SwiGLU its gate and up outputs,
    # and their backwards recompute the rest (a few element-wise passes); the GEMMs' inputs are
    # freed after the forward and refilled when the backward reaches the layer: half the eager
    # layer's saved bytes at LLaMA-13B in bf16, the same values (layers.py, LeanRMSNorm,
    # LeanSwiGLU and Refill). False: the eager layer, which keeps what transformers' modules keep.
    lean_layer: bool = False

    def __post_init__(self) -> None:
        for name in ("vocab", "hidden", "layers", "heads", "kv_heads", "ffn"):
            value = getattr(self, name)
            if not isinstance(value, int) or value <= 0:
                raise ValueError(f"LlamaConfig.{name} must be a positive integer, got {value!r}")
        if self.hidden % self.heads != 0:
            raise ValueError(
                f"LlamaConfig: heads ({self.heads}) must divide hidden ({self.hidden})"
            )
        if self.heads % self.kv_heads != 0:
            raise ValueError(
                f"LlamaConfig: kv_heads ({self.kv_heads}) must divide heads ({self.heads})"
            )
        if self.head_dim % 2 != 0:
            raise ValueError(f"LlamaConfig: head_dim ({self.head_dim}) must be even for rotary")
        if not isinstance(self.lean_layer, bool):
            raise ValueError(
                f"LlamaConfig.lean_layer must be True or False, got {self.lean_layer!r}"
            )
        if not isinstance(self.dtype, torch.dtype) or not self.dtype.is_floating_point:
            raise ValueError(
                f"LlamaConfig.dtype must be a floating torch.dtype, got {self.dtype!r}"
            )

    @property
    def head_dim(self) -> int:
        return self.hidden // self.heads

    @classmethod
    def tiny(cls, **overrides: Any) -> LlamaConfig:
        """The planner's built-in "tiny" shape: 8 layers, hidden 128, 4 heads (2 KV), ffn 352."""
        fields = dict(vocab=512, hidden=128, layers=8, heads=4, kv_heads=2, ffn=352)
        fields.update(overrides)
        return cls(**fields)

    def replace(self, **changes: Any) -> LlamaConfig:
        return dataclasses.replace(self, **changes)

    def to_hf(self, attn_implementation: str = "sdpa", max_position_embeddings: int = 4096):
        """The equivalent transformers `LlamaConfig` (imports transformers lazily)."""
        from transformers import LlamaConfig as HFLlamaConfig

        config = HFLlamaConfig(
            vocab_size=self.vocab,
            hidden_size=self.hidden,
            intermediate_size=self.ffn,
            num_hidden_layers=self.layers,
            num_attention_heads=self.heads,
            num_key_value_heads=self.kv_heads,
            head_dim=self.head_dim,
            hidden_act="silu",
            rms_norm_eps=self.rms_eps,
            rope_parameters={"rope_type": "default", "rope_theta": float(self.rope_theta)},
            max_position_embeddings=max_position_embeddings,
            tie_word_embeddings=False,
            attention_bias=False,
            mlp_bias=False,
            attention_dropout=0.0,
            pad_token_id=None,
        )
        config._attn_implementation = attn_implementation
        return config

    @classmethod
    def from_hf(cls, hf_config: Any, dtype: torch.dtype = torch.float32) -> LlamaConfig:
        """Our config from a transformers `LlamaConfig`; refuses features this decoder lacks."""
        rope = dict(getattr(hf_config, "rope_parameters", None) or {})
        if rope.get("rope_type", "default") != "default":
            raise ValueError(f"unsupported rope_type {rope.get('rope_type')!r}: only 'default'")
        for flag in ("attention_bias", "mlp_bias", "tie_word_embeddings"):
            if getattr(hf_config, flag, False):
                raise ValueError(f"unsupported transformers config: {flag}=True")
        if getattr(hf_config, "hidden_act", "silu") != "silu":
            raise ValueError(f"unsupported hidden_act {hf_config.hidden_act!r}: only 'silu'")
        head_dim = getattr(hf_config, "head_dim", None)
        if (
            head_dim is not None
            and head_dim * hf_config.num_attention_heads != hf_config.hidden_size
        ):
            raise ValueError("unsupported transformers config: head_dim * heads != hidden_size")
        return cls(
            vocab=hf_config.vocab_size,
            hidden=hf_config.hidden_size,
            layers=hf_config.num_hidden_layers,
            heads=hf_config.num_attention_heads,
            kv_heads=hf_config.num_key_value_heads or hf_config.num_attention_heads,
            ffn=hf_config.intermediate_size,
            rope_theta=float(rope.get("rope_theta", 10000.0)),
            rms_eps=float(hf_config.rms_norm_eps),
            dtype=dtype,
        )
