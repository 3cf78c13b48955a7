"""Rank bodies for test_mixed_precision.py: a few AdamW steps of the tiny LLaMA in float32 and in
bfloat16 with float32 master weights, on the same batches and (rounded) initial weights."""

from __future__ import annotations

import torch

import infinipipe
from infinipipe.models import llama

STEPS = 5
# a split sequence (cut by the chunkflow cap: K/V buffers) beside packed short ones; the same
# batch every step, so the loss must fall
LENGTHS = [70, 9, 23, 5]


def batch(vocab: int) -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(1000)
    return [torch.randint(0, vocab, (n,), generator=g) for n in LENGTHS]


def train(dtype: str) -> dict:
    config = llama.LlamaConfig.tiny(vocab=211)
    trainer = infinipipe.Trainer(
        config,
        lambda params: torch.optim.AdamW(params, lr=1e-3),
        plan=infinipipe.PlanConfig(method="chunkflow", chunk_tokens=32),
        runtime=infinipipe.RuntimeConfig(dtype=getattr(torch, dtype), timeout_s=120),
    )
    out: dict = {"stage": trainer.stage_index, "losses": []}
    if trainer.stage.master is not None:
        out["master_dtypes"] = sorted({str(m.dtype) for m in trainer.stage.master.params})
        out["optimizer_steps_masters"] = all(
            any(p is m for m in trainer.stage.master.params)
            for g in trainer.optimizer.param_groups
            for p in g["params"]
        )
    for step in range(STEPS):
        result = trainer.step(batch(config.vocab))
        out["losses"].append(result.loss)
        if step == 0:
            out["param_dtypes"] = sorted({str(p.dtype) for p in trainer.parameters})
            out["grad_dtypes"] = sorted(
                {str(p.grad.dtype) for p in trainer.parameters if p.grad is not None}
            )
    if trainer.stage.master is not None:
        # the model's weights are its masters rounded; the master gradients are released
        out["weights_are_rounded_masters"] = all(
            torch.equal(p, m.to(p.dtype))
            for p, m in zip(trainer.parameters, trainer.stage.master.params)
        )
        out["master_grads_released"] = all(m.grad is None for m in trainer.stage.master.params)
    out["weights"] = {
        name: p.detach().float().clone() for name, p in trainer.module.named_parameters()
    }
    # model state held between steps: weights, gradients, masters, the optimizer's moments
    # (not its scalar step counters), against what the cost model counts for this stage
    held = sum(p.nbytes + p.grad.nbytes for p in trainer.parameters)
    if trainer.stage.master is not None:
        held += sum(m.nbytes for m in trainer.stage.master.params)
    for state in trainer.optimizer.state.values():
        held += sum(t.nbytes for t in state.values() if torch.is_tensor(t) and t.dim() > 0)
    out["model_state_measured"] = held
    out["model_state_predicted"] = trainer.cost.model_state_bytes(trainer.stage_index)
    return out


def resume(directory: str) -> dict:
    """bf16 with masters: 2 steps, save, 2 more steps; a fresh trainer loads the checkpoint and
    takes the same 2 steps. Returns both runs' last losses and whether the loaded masters equal
    the saved ones bitwise (the bf16 weights alone would have lost their low bits)."""
    config = llama.LlamaConfig.tiny(vocab=211)

    def new_trainer() -> infinipipe.Trainer:
        return infinipipe.Trainer(
            config,
            lambda params: torch.optim.AdamW(params, lr=1e-3),
            plan=infinipipe.PlanConfig(method="chunkflow", chunk_tokens=32),
            runtime=infinipipe.RuntimeConfig(dtype=torch.bfloat16, timeout_s=120),
        )

    first = new_trainer()
    for _ in range(2):
        first.step(batch(config.vocab))
    first.save_checkpoint(directory)
    saved = [m.detach().clone() for m in first.master.params]
    after = [first.step(batch(config.vocab)).loss for _ in range(2)]
    second = new_trainer()
    second.load_checkpoint(directory)
    loaded_equal = all(torch.equal(a, b) for a, b in zip(saved, second.master.params))
    differ_from_weights = any(
        not torch.equal(m, p.float()) for m, p in zip(second.master.params, second.parameters)
    )
    resumed = [second.step(batch(config.vocab)).loss for _ in range(2)]
    return dict(
        after=after,
        resumed=resumed,
        loaded_equal=loaded_equal,
        differ_from_weights=differ_from_weights,
    )
