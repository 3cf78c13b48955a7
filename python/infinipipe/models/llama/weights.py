"""Weights: the seeded initialisation every stage split shares, and state dicts by stage and in
transformers' names."""

from __future__ import annotations

import zlib
from collections.abc import Mapping, Sequence

import torch
from torch import nn


def _param_seed(seed: int, name: str) -> int:
    return (int(seed) * 1_000_003 + zlib.crc32(name.encode())) % (2**63 - 1)


@torch.no_grad()
def init_weights(stage: nn.Module, seed: int, std: float = 0.02) -> None:
    """Deterministic init keyed by (seed, parameter name): normal(0, std) drawn in float32 for
    matrices and embeddings, ones for norms. Independent of dtype, device and stage split."""
    for name, p in stage.named_parameters():
        if name == "norm.weight" or name.endswith("layernorm.weight"):
            p.fill_(1.0)
        else:
            g = torch.Generator().manual_seed(_param_seed(seed, name))
            p.copy_(torch.randn(p.shape, generator=g, dtype=torch.float32) * std)


def stage_state_dict(
    full_state: Mapping[str, torch.Tensor],
    layer_range: range | Sequence[int],
    has_embedding: bool | None = None,
    has_head: bool | None = None,
) -> dict[str, torch.Tensor]:
    """The entries of a full model's state dict (our names) that a stage holds.

    layer_range: the stage's global layer indices (range(first, last)). has_embedding defaults
    to "the range starts at layer 0", has_head to "the range ends at the last layer present".
    """
    layers = set(int(i) for i in layer_range)
    if has_embedding is None:
        has_embedding = 0 in layers
    if has_head is None:
        present = {int(k.split(".")[1]) for k in full_state if k.startswith("layers.")}
        has_head = bool(present) and max(present) in layers
    out = {}
    for name, value in full_state.items():
        if name.startswith("layers."):
            keep = int(name.split(".")[1]) in layers
        elif name.startswith("embed_tokens."):
            keep = has_embedding
        elif name.startswith(("norm.", "lm_head.")):
            keep = has_head
        else:
            raise KeyError(f"stage_state_dict: unexpected parameter name {name!r}")
        if keep:
            out[name] = value
    return out


def to_hf_state_dict(state: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Our names -> transformers LlamaForCausalLM names (adds "model." except for lm_head)."""
    return {
        (name if name.startswith("lm_head.") else "model." + name): value
        for name, value in state.items()
    }


def from_hf_state_dict(hf_state: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """transformers LlamaForCausalLM names -> ours (drops rotary buffers if present)."""
    out = {}
    for name, value in hf_state.items():
        if "rotary_emb" in name:
            continue
        if name.startswith("model."):
            out[name[len("model.") :]] = value
        elif name.startswith("lm_head."):
            out[name] = value
        else:
            raise KeyError(f"from_hf_state_dict: unexpected parameter name {name!r}")
    return out
