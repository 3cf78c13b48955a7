"""The lean layer (LlamaConfig.lean_layer; models/llama/layers.py, LeanRMSNorm, LeanSwiGLU and
Refill): what a layer keeps changes, not what it computes. What it keeps is checked against the
cost model in tests/python/test_profile.py, the pipelines with it in tests/python/runtime and
test_cpp_llama.py."""

import pytest
import torch
from llama_fixtures import model_with_random_norms, rel

from infinipipe.models import llama
from infinipipe.models.llama import LlamaConfig

SMALL = dict(vocab=97, hidden=64, layers=4, heads=4, kv_heads=2, ffn=96)


def random_sequences(lengths: list[int], seed: int) -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return [torch.randint(0, SMALL["vocab"], (n,), generator=g) for n in lengths]


@pytest.mark.parametrize(
    "dtype,grad_tol", [(torch.float64, 1e-12), (torch.float32, 1e-5), (torch.bfloat16, 2e-2)]
)
def test_lean_layer_equals_the_eager_one(dtype, grad_tol):
    """LlamaConfig.lean_layer changes what a layer keeps, not what it computes: the same loss to
    the bit (the forward is the same arithmetic), the same gradients but for the norm backward's
    order of rounding."""
    losses, grads = {}, {}
    for lean in (False, True):
        model = model_with_random_norms(
            LlamaConfig(**SMALL, dtype=dtype, lean_layer=lean), seed=3, noise_dtype=torch.float64
        )
        loss = llama.reference_loss(model, random_sequences([13, 4, 20], seed=4))
        loss.backward()
        losses[lean] = loss.item()
        grads[lean] = {n: p.grad.float() for n, p in model.named_parameters()}
    assert losses[True] == losses[False]
    assert grads[True].keys() == grads[False].keys()
    for name, eager in grads[False].items():
        assert rel(grads[True][name], eager) < grad_tol, (name, rel(grads[True][name], eager))
    norms = [n for n in grads[False] if n.endswith("norm.weight")]
    assert norms and all(grads[False][n].abs().max() > 0 for n in norms)


def test_refilled_inputs_serve_every_backward_of_a_kept_graph():
    """The lean layer's GEMM inputs (two norm outputs and the SwiGLU product per layer) are
    freed after the forward and refilled once, when the gradient first reaches the layer
    (layers.Refill): a graph kept and differentiated twice gets the same gradients both
    times."""
    config = LlamaConfig(**SMALL, dtype=torch.float64, lean_layer=True)
    model = model_with_random_norms(config, seed=3, noise_dtype=torch.float64)
    saved: dict[int, torch.UntypedStorage] = {}

    def pack(t: torch.Tensor) -> torch.Tensor:
        saved.setdefault(t.untyped_storage()._cdata, t.untyped_storage())
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        loss = llama.reference_loss(model, random_sequences([13, 4, 20], seed=4))

    def freed() -> int:
        return sum(s.nbytes() == 0 for s in saved.values())

    assert freed() == 3 * config.layers
    loss.backward(retain_graph=True)
    assert freed() == 0
    first = {n: p.grad.clone() for n, p in model.named_parameters()}
    model.zero_grad()
    loss.backward()
    for name, p in model.named_parameters():
        assert torch.equal(p.grad, first[name]), name
