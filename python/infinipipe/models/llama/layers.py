"""The decoder's blocks, with transformers' numerics: RMSNorm and rotary tables in at least
float32, grouped-query attention through an attention core (attention.py), SwiGLU MLP."""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import nn

from .config import LlamaConfig

# The chunk's rotary tables (cos, sin), each [T, head_dim].
Rotary = tuple[torch.Tensor, torch.Tensor]
# The chunk's attention on this layer: (q [T, heads, d], k, v [T, kv_heads, d]) -> [T, heads, d].
Attend = Callable[[torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor]


def _compute_dtype(dtype: torch.dtype) -> torch.dtype:
    """At least float32, as transformers does for norms and rotary tables."""
    return torch.promote_types(dtype, torch.float32)


def rms_rstd(x: torch.Tensor, eps: float) -> torch.Tensor:
    """1 / sqrt(mean(x^2) + eps) per row, in at least float32, as the eager norm computes it."""
    h = x.to(_compute_dtype(x.dtype))
    return torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + eps)


def lean_rms_norm_value(
    x: torch.Tensor, weight: torch.Tensor, rstd: torch.Tensor, out: torch.Tensor | None = None
) -> torch.Tensor:
    """The norm's output by the eager norm's arithmetic, written into `out` when given, so that
    a refill (Refill) reproduces the forward's value bit for bit."""
    return torch.mul(weight, (x.to(rstd.dtype) * rstd).to(x.dtype), out=out)


class Refill:
    """The lean layer's GEMM inputs (the two norms' outputs and the SwiGLU product), dropped
    after the layer's forward and refilled when the gradient reaches the layer's output, so
    that autograd holds them only while their GEMMs' backward needs them: from the layer's
    backward (with zero bubble, from its B until its W) instead of from the forward on.

    The tensors autograd saved keep their metadata and version; only their storage is freed
    (resized to zero bytes) and, before the layer's first backward node runs, reallocated and
    written by the forward's own arithmetic from what the layer keeps anyway (the norms'
    inputs, gate and up), through a fresh alias so that no version counter moves. Megatron-LM's
    output-discarding checkpoint frees and refills storage the same way. The C++ stage's
    Refill (src/models/lean_layer.h) is the same.

    It assumes autograd keeps what the layer saves: the executor's recompute runs a checkpointed
    layer's first forward without a graph (nothing dropped). Under torch.utils.checkpoint the
    drop would save nothing and the recipes would hold gate and up until the backward."""

    def __init__(self) -> None:
        self._dropped: list[tuple[torch.Tensor, int, Callable[[torch.Tensor], object]]] = []

    def keep(self, tensor: torch.Tensor, compute: Callable[[torch.Tensor], object]) -> None:
        """To drop `tensor` at `attach`; `compute(into)` writes its value into `into`."""
        self._dropped.append((tensor.detach(), tensor.untyped_storage().nbytes(), compute))

    def attach(self, output: torch.Tensor) -> None:
        """Drop the kept tensors and refill them when the gradient reaches `output`."""
        for tensor, _, _ in self._dropped:
            tensor.untyped_storage().resize_(0)
        output.register_hook(self._refill)

    def _refill(self, grad: torch.Tensor) -> None:
        with torch.no_grad():
            for tensor, nbytes, compute in self._dropped:
                storage = tensor.untyped_storage()
                storage.resize_(nbytes)
                into = tensor.new_empty(0).set_(
                    storage, tensor.storage_offset(), tensor.shape, tensor.stride()
                )
                compute(into)
        self._dropped = []  # one backward; and what the recipes hold goes now


class LeanRMSNorm(torch.autograd.Function):
    """The lean layer's RMSNorm (LlamaConfig.lean_layer): the eager norm's arithmetic, keeping
    only its input and rstd; the backward recomputes the normalised value n = x * rstd and
    returns dx = rstd * (dn - n * mean(dn * n)), dn the gradient reaching n, and the gain's
    gradient. The C++ stage's lean::rms_norm (src/models/lean_layer.cc) is the same."""

    @staticmethod
    def forward(ctx, x: torch.Tensor, weight: torch.Tensor, rstd: torch.Tensor) -> torch.Tensor:
        ctx.save_for_backward(x, weight, rstd)
        return lean_rms_norm_value(x, weight, rstd)

    @staticmethod
    def backward(ctx, dy: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, None]:
        x, weight, rstd = ctx.saved_tensors
        n = x.to(rstd.dtype) * rstd
        n_out = n.to(x.dtype)
        dweight = (dy * n_out).reshape(-1, n_out.shape[-1]).sum(0)
        dn = (dy * weight).to(rstd.dtype)
        dx = rstd * (dn - n * (dn * n).mean(-1, keepdim=True))
        return dx.to(x.dtype), dweight, None


class LeanSwiGLU(torch.autograd.Function):
    """The lean layer's SwiGLU product silu(gate) * up, keeping gate and up only: the backward
    recomputes SiLU's output with the forward's kernel, so its gradients are the eager ones."""

    @staticmethod
    def forward(ctx, gate: torch.Tensor, up: torch.Tensor) -> torch.Tensor:
        ctx.save_for_backward(gate, up)
        return F.silu(gate) * up

    @staticmethod
    def backward(ctx, dy: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        gate, up = ctx.saved_tensors
        return torch.ops.aten.silu_backward(dy * up, gate), dy * F.silu(gate)


class RMSNorm(nn.Module):
    def __init__(
        self,
        size: int,
        eps: float = 1e-6,
        dtype: torch.dtype | None = None,
        device: torch.device | str | None = None,
        lean: bool = False,
    ) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(size, dtype=dtype, device=device))
        self.eps = eps
        self.lean = lean

    def forward(self, x: torch.Tensor, refill: Refill | None = None) -> torch.Tensor:
        if self.lean:
            with torch.no_grad():
                rstd = rms_rstd(x, self.eps)
            out = LeanRMSNorm.apply(x, self.weight, rstd)
            if refill is not None:
                x, weight = x.detach(), self.weight.detach()
                refill.keep(out, lambda into: lean_rms_norm_value(x, weight, rstd, into))
            return out
        input_dtype = x.dtype
        h = x.to(_compute_dtype(input_dtype))
        variance = h.pow(2).mean(-1, keepdim=True)
        h = h * torch.rsqrt(variance + self.eps)
        return self.weight * h.to(input_dtype)

    def extra_repr(self) -> str:
        return f"{tuple(self.weight.shape)}, eps={self.eps}" + (", lean" if self.lean else "")


def rotary_inv_freq(
    head_dim: int,
    theta: float,
    dtype: torch.dtype = torch.float32,
    device: torch.device | str | None = None,
) -> torch.Tensor:
    """Inverse frequencies [head_dim / 2] in the compute dtype of `dtype` (>= float32)."""
    cdt = _compute_dtype(dtype)
    exponents = torch.arange(0, head_dim, 2, dtype=torch.int64, device=device).to(cdt) / head_dim
    return 1.0 / (theta**exponents)


def rotary_cos_sin(
    positions: torch.Tensor, inv_freq: torch.Tensor, dtype: torch.dtype
) -> tuple[torch.Tensor, torch.Tensor]:
    """cos, sin tables [T, head_dim] for explicit positions [T]; computed elementwise per row,
    so the table of positions start..end-1 is exactly rows start..end-1 of a full one."""
    freqs = positions[:, None].to(inv_freq.dtype) * inv_freq[None, :]
    emb = torch.cat((freqs, freqs), dim=-1)
    return emb.cos().to(dtype), emb.sin().to(dtype)


def rotate_half(x: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


def apply_rotary(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """x [T, heads, d]; cos/sin [T, d]."""
    cos = cos.unsqueeze(1)
    sin = sin.unsqueeze(1)
    return x * cos + rotate_half(x) * sin


class Attention(nn.Module):
    def __init__(self, config: LlamaConfig, device: torch.device | str | None = None) -> None:
        super().__init__()
        kw = dict(bias=False, dtype=config.dtype, device=device)
        self.heads, self.kv_heads, self.head_dim = config.heads, config.kv_heads, config.head_dim
        self.q_proj = nn.Linear(config.hidden, config.heads * config.head_dim, **kw)
        self.k_proj = nn.Linear(config.hidden, config.kv_heads * config.head_dim, **kw)
        self.v_proj = nn.Linear(config.hidden, config.kv_heads * config.head_dim, **kw)
        self.o_proj = nn.Linear(config.heads * config.head_dim, config.hidden, **kw)

    def forward(self, x: torch.Tensor, rotary: Rotary, attend: Attend) -> torch.Tensor:
        cos, sin = rotary
        t = x.shape[0]
        q = apply_rotary(self.q_proj(x).view(t, self.heads, self.head_dim), cos, sin)
        k = apply_rotary(self.k_proj(x).view(t, self.kv_heads, self.head_dim), cos, sin)
        v = self.v_proj(x).view(t, self.kv_heads, self.head_dim)
        out = attend(q, k, v)
        return self.o_proj(out.reshape(t, self.heads * self.head_dim))


class MLP(nn.Module):
    """SwiGLU: down(silu(gate(x)) * up(x))."""

    def __init__(self, config: LlamaConfig, device: torch.device | str | None = None) -> None:
        super().__init__()
        kw = dict(bias=False, dtype=config.dtype, device=device)
        self.gate_proj = nn.Linear(config.hidden, config.ffn, **kw)
        self.up_proj = nn.Linear(config.hidden, config.ffn, **kw)
        self.down_proj = nn.Linear(config.ffn, config.hidden, **kw)
        self.lean = config.lean_layer

    def forward(self, x: torch.Tensor, refill: Refill | None = None) -> torch.Tensor:
        gate, up = self.gate_proj(x), self.up_proj(x)
        if not self.lean:
            return self.down_proj(F.silu(gate) * up)
        product = LeanSwiGLU.apply(gate, up)
        if refill is not None:
            gate, up = gate.detach(), up.detach()
            refill.keep(product, lambda into: torch.mul(F.silu(gate), up, out=into))
        return self.down_proj(product)


class DecoderLayer(nn.Module):
    """Pre-norm attention and SwiGLU MLP, each with a residual connection."""

    def __init__(self, config: LlamaConfig, device: torch.device | str | None = None) -> None:
        super().__init__()
        self.self_attn = Attention(config, device)
        self.mlp = MLP(config, device)
        norm = (config.hidden, config.rms_eps, config.dtype, device, config.lean_layer)
        self.input_layernorm = RMSNorm(*norm)
        self.post_attention_layernorm = RMSNorm(*norm)
        self.lean = config.lean_layer

    def forward(self, hidden: torch.Tensor, rotary: Rotary, attend: Attend) -> torch.Tensor:
        # The lean layer drops its GEMM inputs until the backward (Refill); nothing to drop
        # when no graph is recorded (evaluation, a checkpointed layer's first forward).
        refill = Refill() if self.lean and torch.is_grad_enabled() else None
        hidden = hidden + self.self_attn(self.input_layernorm(hidden, refill), rotary, attend)
        out = hidden + self.mlp(self.post_attention_layernorm(hidden, refill), refill)
        if refill is not None and out.requires_grad:
            refill.attach(out)
        return out
