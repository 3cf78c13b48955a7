"""fp32 master weights for a stage trained in bfloat16 (or float16).

The stage's parameters, activations and gradients are 16-bit; the optimizer steps float32
copies of the parameters (the master weights) and writes them back rounded. The model's own
reductions are float32 already (RMSNorm statistics and rotary tables in layers.py, the softmax
in the chunk attention kernels, the loss in runtime/next_token_loss.cc). Memory per parameter
with Adam: 2 (weight) + 2 (gradient) + 4 (master) + 8 (two moments) = 16 bytes, as the cost
model counts it (cost/cost_model.cc, model_state_bytes_per_param for 2-byte elements); the
master gradients (4 more) exist only during optimizer_step. float16 gets no loss scaling:
prefer bfloat16.
"""

from __future__ import annotations

from collections.abc import Iterable

import torch

HALF_DTYPES = (torch.bfloat16, torch.float16)


def default_master_dtype(dtype: torch.dtype) -> torch.dtype | None:
    """float32 masters for 16-bit models, none for float32/float64 ones."""
    return torch.float32 if dtype in HALF_DTYPES else None


class MasterWeights:
    """Master copies of `parameters` in `dtype`; give `params` to the optimizer."""

    def __init__(self, parameters: Iterable[torch.Tensor], dtype: torch.dtype = torch.float32):
        self.model = list(parameters)
        self.dtype = dtype
        self.params = [
            torch.nn.Parameter(p.detach().to(dtype).clone(), requires_grad=p.requires_grad)
            for p in self.model
        ]
        self.by_model = {id(p): m for p, m in zip(self.model, self.params)}

    def master_of(self, parameter: torch.Tensor) -> torch.Tensor | None:
        return self.by_model.get(id(parameter))

    def step(self, optimizer: torch.optim.Optimizer) -> None:
        """The model's gradients (in float32) to the masters, the optimizer's step on them, the
        masters back to the model (rounded); the master gradients are released after."""
        for p, m in zip(self.model, self.params):
            m.grad = None if p.grad is None else p.grad.detach().to(self.dtype)
        optimizer.step()
        with torch.no_grad():
            for p, m in zip(self.model, self.params):
                p.copy_(m)
                m.grad = None

    def refresh_from_model(self) -> None:
        """Masters := the model's weights (after loading weights into the model)."""
        with torch.no_grad():
            for p, m in zip(self.model, self.params):
                m.copy_(p)
