"""Test bodies for the spread head (test_spread_head.py), run inside the ranks that
launcher.run_ranks starts: steps whose chunks' LM heads run on stages other than the last
(docs/design.md, "Spread head"), on a Trainer(spread_head=True) whose every stage holds a head
replica."""

from __future__ import annotations

import json
from typing import Any

import bodies
import torch

import infinipipe
from infinipipe import _C
from infinipipe.models import llama

HEAD_NAMES = ("norm.weight", "lm_head.weight")


def head_stages(placement: str, num_chunks: int, num_stages: int) -> list[int]:
    """Per chunk, the stage its head runs on: "round-robin" (chunk c on stage c mod d, the last
    stage's local H included), "first" (every chunk on stage 0), "last" (every chunk's H on the
    last stage itself), "none-odd" (odd chunks on stage 0, even ones in the last stage's F)."""
    last = num_stages - 1
    if placement == "round-robin":
        return [c % num_stages for c in range(num_chunks)]
    if placement == "first":
        return [0] * num_chunks
    if placement == "last":
        return [last] * num_chunks
    if placement == "none-odd":
        return [0 if c % 2 else -1 for c in range(num_chunks)]
    raise ValueError(f"unknown head placement {placement!r}")


def spread_schedule(stages: list[list[str]], heads: list[int]) -> list[list[str]]:
    """The schedule with chunk c's head on stage heads[c] (-1: left in the last stage's F). On
    the last stage F c is followed by SEND_H c@o, and RECV_HG c@o is posted just before B c;
    stage o posts RECV_H c right after its own F c (forward order on both ends of the channel)
    and runs H c and SEND_HG c just before its B c (backward order on both ends), where its
    input from the last stage has long been sent and the last stage's B c is waiting for it. A
    head on the last stage runs right after its F c."""
    last = len(stages) - 1
    out = [list(s) for s in stages]

    def insert_after(stage: int, action: str, new: list[str]) -> None:
        i = out[stage].index(action) + 1
        out[stage][i:i] = new

    def insert_before(stage: int, action: str, new: list[str]) -> None:
        i = out[stage].index(action)
        out[stage][i:i] = new

    for c, o in enumerate(heads):
        if o < 0:
            continue
        if o == last:
            insert_after(last, f"F{c}", [f"H{c}"])
            continue
        insert_after(last, f"F{c}", [f"SEND_H{c}@{o}"])
        insert_before(last, f"B{c}", [f"RECV_HG{c}@{o}"])
        insert_after(o, f"F{c}", [f"RECV_H{c}@{last}"])
        insert_before(o, f"B{c}", [f"H{c}", f"SEND_HG{c}@{last}"])
    return out


def spread(plan: Any, placement: str) -> Any:
    """`plan` with its heads placed by `placement` (head_stages), validated."""
    text = json.loads(plan.to_json())
    heads = head_stages(placement, plan.num_chunks, len(plan.layers_per_stage))
    text["schedule"]["stages"] = spread_schedule(text["schedule"]["stages"], heads)
    del text["hash"]  # the executable part changed
    spread_plan = _C.plan.Plan.from_json(json.dumps(text))
    spread_plan.validate()
    return spread_plan


def planned_heads(plan: Any) -> list[int]:
    """Per chunk, the stage of its H action (-1: none), read from the schedule's text."""
    heads = [-1] * plan.num_chunks
    for stage, actions in enumerate(plan.schedule):
        for action in actions:
            if action.startswith("H"):
                heads[int(action[1:])] = stage
    return heads


def make_spread_plan(trainer: infinipipe.Trainer, batch: list[torch.Tensor], spec: dict) -> Any:
    """A case's plan: bodies.make_plan's, its heads placed by spec["heads"]; or, with
    spec["planner"], the trainer's own planner (PlanConfig.spread_head)."""
    if spec.get("planner"):
        return trainer.plan(batch)
    plan = bodies.make_plan(trainer, [t.numel() for t in batch], spec)
    return spread(plan, spec["heads"])


def new_trainer(layer_split: list[int] | None, timeout_s: float) -> infinipipe.Trainer:
    return infinipipe.Trainer(
        bodies.model_config("float64"),
        bodies.frozen_optimizer,
        layer_split=layer_split,
        spread_head=True,
        timeout_s=timeout_s,
        plan=infinipipe.PlanConfig(memory_budget_gib=1),
    )


def parity(cases: list[dict], layer_split: list[int] | None = None, timeout_s: float = 60.0):
    """Every case as one training step on a spread-head trainer. Per case: this rank's stage,
    loss and evaluation loss, its gradients straight from the executor (the head replica's
    holding only the heads this stage ran), the head replica's gradients after the trainer's
    summing, the plan's head stages and this stage's stats."""
    trainer = new_trainer(layer_split, timeout_s)
    records = []
    for case in cases:
        batch = bodies.make_batch(case["lengths"], case["seed"])
        plan = make_spread_plan(trainer, batch, case["plan"])
        trainer.zero_grad()
        result = trainer.forward_backward(batch, plan=plan)
        grads = {
            n: p.grad.detach().clone()
            for n, p in trainer.module.named_parameters()
            if p.grad is not None
        }
        trainer.optimizer_step()  # lr 0: only sums the head replicas' gradients
        summed = {
            n: torch.zeros_like(p) if p.grad is None else p.grad.detach().clone()
            for n, p in trainer.module.named_parameters()
            if n in HEAD_NAMES
        }
        evaluated = trainer.executor.evaluate(plan, batch, 0)
        records.append(
            dict(
                name=case["name"],
                stage=trainer.stage_index,
                loss=result.loss,
                eval_loss=evaluated["loss"],
                grads=grads,
                summed_head=summed,
                heads=planned_heads(plan),
                recompute=plan.recompute,
                kinds=list(plan.chunk_kinds),
                stats=result.stats,
            )
        )
    return records


def adamw(params):
    return torch.optim.AdamW(params, lr=1e-2, weight_decay=0.1)


def training(steps: list[dict], timeout_s: float = 60.0) -> dict:
    """Optimizer steps (AdamW) on a spread-head trainer, each on its own batch and plan; returns
    this rank's stage, the losses and its parameters after the last step."""
    trainer = infinipipe.Trainer(
        bodies.model_config("float64"),
        adamw,
        spread_head=True,
        timeout_s=timeout_s,
        plan=infinipipe.PlanConfig(memory_budget_gib=1),
    )
    losses = []
    for step in steps:
        batch = bodies.make_batch(step["lengths"], step["seed"])
        plan = make_spread_plan(trainer, batch, step["plan"])
        losses.append(trainer.step(batch, plan=plan).loss)
    return dict(
        stage=trainer.stage_index,
        losses=losses,
        params={n: p.detach().clone() for n, p in trainer.module.named_parameters()},
    )


def reference_training(steps: list[dict]) -> tuple[list[float], dict[str, torch.Tensor]]:
    """The same steps on the unpipelined model with the same optimizer."""
    model = llama.build_full_model(bodies.model_config("float64"))
    optimizer = adamw(model.parameters())
    losses = []
    for step in steps:
        optimizer.zero_grad()
        loss = llama.reference_loss(model, bodies.make_batch(step["lengths"], step["seed"]))
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    return losses, {n: p.detach().clone() for n, p in model.named_parameters()}
