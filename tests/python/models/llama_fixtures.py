"""What the LLaMA model tests (test_llama.py, test_cpp_llama.py) share: the relative error they
compare outputs by, and a full model whose norm gains matter."""

import torch

from infinipipe.models import llama


def rel(a: torch.Tensor, b: torch.Tensor) -> float:
    """Max abs difference relative to the reference's (b's) max magnitude."""
    a, b = a.detach(), b.detach()
    return float((a - b).abs().max() / b.abs().max().clamp_min(1e-300))


def model_with_random_norms(
    config: llama.LlamaConfig, seed: int = 0, noise_dtype: torch.dtype = torch.float32
) -> llama.LlamaStage:
    """A full model whose norm weights are not all ones (1 + 0.2 N(0, 1), drawn in noise_dtype),
    so that they matter in the checks."""
    model = llama.build_full_model(config, seed=seed)
    g = torch.Generator().manual_seed(seed + 1)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("norm.weight"):
                p.copy_(1 + 0.2 * torch.randn(p.shape, generator=g, dtype=noise_dtype))
    return model
