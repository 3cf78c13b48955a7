"""What test_hf.py and its ranks share: tiny transformers models of each supported class, the
float64 patch, and the rank body of the pipelined runs (run by
tests/python/runtime/launcher.run_ranks)."""

from __future__ import annotations

from pathlib import Path

import torch
import transformers
from transformers.models.llama import modeling_llama
from transformers.models.mistral import modeling_mistral
from transformers.models.qwen2 import modeling_qwen2

import infinipipe
from infinipipe import _C
from infinipipe.models import hf

SHAPE = dict(
    vocab_size=100,
    hidden_size=64,
    intermediate_size=128,
    num_hidden_layers=4,
    num_attention_heads=4,
    num_key_value_heads=2,
    max_position_embeddings=256,
)
# Llama untied with attention biases; Qwen2 (q/k/v biases of its own) with tied embeddings, as
# its small models are; Mistral with its default sliding window (4096, beyond every test
# sequence: full attention).
ARCHS = {
    "llama": (transformers.LlamaConfig, transformers.LlamaForCausalLM, dict(attention_bias=True)),
    "qwen2": (
        transformers.Qwen2Config,
        transformers.Qwen2ForCausalLM,
        dict(tie_word_embeddings=True),
    ),
    "mistral": (transformers.MistralConfig, transformers.MistralForCausalLM, {}),
}


def hf_config(arch: str, **overrides):
    config_class, _, extra = ARCHS[arch]
    return config_class(**{**SHAPE, **extra, **overrides})


def build_model(arch: str, seed: int = 0, dtype=torch.float64, **overrides):
    """A tiny model in dtype, its norm gains and biases away from their initial ones and ones
    (so that they matter), the same for a seed in every process."""
    _, model_class, _ = ARCHS[arch]
    torch.manual_seed(seed)
    model = model_class(hf_config(arch, **overrides)).to(dtype)
    g = torch.Generator().manual_seed(seed + 1)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.dim() == 1:
                base = 1.0 if name.endswith("norm.weight") else 0.0
                p.copy_(base + 0.2 * torch.randn(p.shape, generator=g, dtype=torch.float64))
    return model


def _rms_forward(self, hidden_states):
    dtype = hidden_states.dtype
    h = hidden_states.to(torch.promote_types(dtype, torch.float32))
    h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + self.variance_epsilon)
    return self.weight * h.to(dtype)


@torch.no_grad()
def _rotary_forward(self, x, position_ids):
    """Default rope, its inverse frequencies computed anew in the compute dtype (the stored
    buffer was computed in float32)."""
    compute = torch.promote_types(x.dtype, torch.float32)
    dim, theta = 2 * self.inv_freq.numel(), self.config.rope_parameters["rope_theta"]
    inv_freq = 1.0 / (theta ** (torch.arange(0, dim, 2, device=x.device).to(compute) / dim))
    freqs = position_ids[..., None].to(compute) * inv_freq
    emb = torch.cat((freqs, freqs), dim=-1)
    return emb.cos().to(x.dtype), emb.sin().to(x.dtype)


def full_precision_patches() -> list[tuple[type, str, object]]:
    """transformers computes RMSNorm and the rotary tables in float32 even in a float64 model
    (on purpose): wherever the pipeline's and the reference's float64 values round to different
    float32 ones, they differ by ~1e-7 (the tiny cases happen to stay near 1e-14 without the
    patch, longer or other ones need not). The float64 tests (here and in test_llama.py)
    patch exactly these two forwards to compute in max(dtype, float32) (the original code for
    float32 and below; default rope only, which the tiny models use); nothing else changes."""
    patches = []
    for norm, rotary in (
        (modeling_llama.LlamaRMSNorm, modeling_llama.LlamaRotaryEmbedding),
        (modeling_qwen2.Qwen2RMSNorm, modeling_qwen2.Qwen2RotaryEmbedding),
        (modeling_mistral.MistralRMSNorm, modeling_mistral.MistralRotaryEmbedding),
    ):
        patches += [(norm, "forward", _rms_forward), (rotary, "forward", _rotary_forward)]
    return patches


def frozen_optimizer(params):
    """SGD with lr 0: the step leaves weights (and gradients) as they were."""
    return torch.optim.SGD(params, lr=0.0)


def make_batch(lengths: list[int], seed: int) -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return [torch.randint(0, SHAPE["vocab_size"], (n,), generator=g) for n in lengths]


def make_plan(trainer: infinipipe.Trainer, lengths: list[int], spec: dict):
    return _C.plan.plan_step(
        lengths,
        trainer.cost,
        1e9,
        spec["method"],
        k=spec.get("k", 1),
        token_cap=spec.get("token_cap", 0),
        chunk_tokens=spec.get("chunk_tokens", 0),
        uniform_recompute=spec.get("recompute", 0),
    )


def pipeline_parity(
    sources: dict, cases: list[dict], out: str, timeout_s: float = 60.0, spread_head: bool = False
) -> dict:
    """For each architecture, a Trainer whose stages are built from its save_pretrained
    directory (meta device, this stage's tensors only), one step per case under the case's
    plan; then every rank saves its stage into out/<arch> (hf.save_stage). Returns per
    architecture and case this rank's loss, gradients by name, the plan's chunk kinds and
    recompute table. spread_head: every stage holds the head's replica and each plan runs its
    chunks' heads on the stages in turn (spread_bodies.spread)."""
    import spread_bodies  # tests/python/runtime, on the ranks' path

    for cls, attr, fn in full_precision_patches():
        setattr(cls, attr, fn)
    records: dict = {}
    for arch, path in sources.items():
        trainer = infinipipe.Trainer(
            hf.stage_factory(path, dtype=torch.float64, device="cpu", spread_head=spread_head),
            frozen_optimizer,
            plan=infinipipe.PlanConfig(spread_head=spread_head),
            runtime=infinipipe.RuntimeConfig(timeout_s=timeout_s),
        )
        for case in cases:
            plan = make_plan(trainer, case["lengths"], case["plan"])
            if spread_head:
                plan = spread_bodies.spread(plan, "round-robin")
            result = trainer.step(make_batch(case["lengths"], case["seed"]), plan=plan)
            records[arch, case["name"]] = dict(
                loss=result.loss,
                grads={n: p.grad.clone() for n, p in trainer.module.named_parameters()},
                kinds=list(plan.chunk_kinds),
                recompute=[list(row) for row in plan.recompute],
                tied=[(tuple(p.shape), peer) for p, peer in trainer.module.tied_parameters()],
            )
        hf.save_stage(trainer.module, Path(out) / arch, timeout_s=timeout_s)
    return records


def one_device_parity(source: str, cases: list[dict], device: str, timeout_s: float = 60.0):
    """One rank: per case (a dtype, lengths, seed and plan spec), a Trainer of the save_pretrained
    directory `source` in the case's dtype on `device` (bfloat16 with float32 masters), one step;
    returns per case the loss and the gradients by name, on the CPU, in float32."""
    out = []
    for case in cases:
        trainer = infinipipe.Trainer(
            hf.stage_factory(source, dtype=getattr(torch, case["dtype"]), device=device),
            frozen_optimizer,
            runtime=infinipipe.RuntimeConfig(timeout_s=timeout_s),
        )
        plan = make_plan(trainer, case["lengths"], case["plan"])
        result = trainer.step(make_batch(case["lengths"], case["seed"]), plan=plan)
        out.append(
            dict(
                loss=result.loss,
                grads={n: p.grad.float().cpu() for n, p in trainer.module.named_parameters()},
                kinds=list(plan.chunk_kinds),
                device=str(next(trainer.module.parameters()).device),
            )
        )
    return out
