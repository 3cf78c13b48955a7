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
from infinipipe.distributed.layout import share_indices
from infinipipe.models import cpp, llama

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
    """A case's plan: bodies.make_plan's, its heads placed by spec["heads"] or, without it, by
    the planner (spec["spread_head"]); with spec["trainer_plan"], the trainer's own planner
    (its PlanConfig.spread_head)."""
    if spec.get("trainer_plan"):
        return trainer.plan(batch)
    lengths = [t.numel() for t in batch]
    share = [lengths[i] for i in share_indices(trainer.layout, lengths, trainer.cost)]
    plan = bodies.make_plan(trainer, share, spec)  # with data replicas: this replica's share
    return spread(plan, spec["heads"]) if "heads" in spec else plan


def new_trainer(
    timeout_s: float, parallel: dict | None = None, cpp_stages: bool = False
) -> infinipipe.Trainer:
    """A spread-head trainer of the float64 model with a frozen optimizer; cpp_stages: the C++
    LlamaStage (models.cpp) instead of the Python one."""
    config = bodies.model_config("float64")

    def cpp_stage(stage: int, split: list[int]) -> Any:
        return cpp.build_stage(config, split, stage, spread_head=True)

    return infinipipe.Trainer(
        infinipipe.StageFactory(cpp_stage, config) if cpp_stages else config,
        bodies.frozen_optimizer,
        plan=infinipipe.PlanConfig(memory_budget_gib=1, spread_head=True),
        parallel=infinipipe.Parallel(**(parallel or {})),
        runtime=infinipipe.RuntimeConfig(timeout_s=timeout_s),
    )


def parity(cases: list[dict], timeout_s: float = 60.0, cpp_stages: bool = False):
    """Every case as one training step on a spread-head trainer. Per case: this rank's stage,
    loss and evaluation loss, its gradients straight from the executor (the head replica's
    holding only the heads this stage ran), the head replica's gradients after the trainer's
    summing, the plan's head stages and this stage's stats."""
    trainer = new_trainer(timeout_s, cpp_stages=cpp_stages)
    records = []
    for case in cases:
        batch = bodies.make_batch(case["lengths"], case["seed"])
        plan = make_spread_plan(trainer, batch, case["plan"])
        trainer.zero_grad()
        result = trainer.forward_backward(batch, plan=plan, measure_memory=True)
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
        evaluated = trainer.stage.executor.evaluate(plan, batch, 0)
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
                schedule=plan.schedule[trainer.stage_index],
                chunk_tokens=[sum(end - start for _, start, end in c) for c in plan.chunks],
            )
        )
    return records


def layout_parity(cases: list[dict], parallel: dict, timeout_s: float = 60.0) -> list[dict]:
    """Every case as one step of a spread-head trainer on a layout with sequence ranks or data
    replicas (each replica's share planned and spread); per case this rank's place, loss and
    every gradient after the trainer's reductions (gradient groups, then the head replicas')."""
    trainer = new_trainer(timeout_s, parallel=parallel)
    records = []
    for case in cases:
        batch = bodies.make_batch(case["lengths"], case["seed"])
        plan = make_spread_plan(trainer, batch, case["plan"])
        result = trainer.step(batch, plan=plan)  # lr 0: the reductions alone
        records.append(
            dict(
                name=case["name"],
                stage=trainer.stage_index,
                sequence_rank=trainer.layout.sequence_rank,
                replica=trainer.layout.replica,
                loss=result.loss,
                heads=planned_heads(plan),
                grads={n: p.grad.detach().clone() for n, p in trainer.module.named_parameters()},
            )
        )
    return records


def adamw(params):
    return torch.optim.AdamW(params, lr=1e-2, weight_decay=0.1)


MAX_NORM = 0.2  # below the tiny model's gradient norms: every step clips


def training(steps: list[dict], timeout_s: float = 60.0) -> dict:
    """Optimizer steps (AdamW) on a spread-head trainer, each on its own batch and plan, its
    gradients clipped to MAX_NORM (a norm counting the head once); returns this rank's stage,
    the losses, the norms and its parameters after the last step."""
    trainer = infinipipe.Trainer(
        bodies.model_config("float64"),
        adamw,
        plan=infinipipe.PlanConfig(memory_budget_gib=1, spread_head=True),
        runtime=infinipipe.RuntimeConfig(timeout_s=timeout_s),
    )
    losses, norms = [], []
    for step in steps:
        batch = bodies.make_batch(step["lengths"], step["seed"])
        plan = make_spread_plan(trainer, batch, step["plan"])
        trainer.zero_grad()
        losses.append(trainer.forward_backward(batch, plan=plan).loss)
        norms.append(trainer.clip_grad_norm_(MAX_NORM))
        trainer.optimizer_step()
    held_out = [bodies.make_batch(s["lengths"], s["seed"] + 100) for s in steps]
    return dict(
        stage=trainer.stage_index,
        losses=losses,
        norms=norms,
        held_out_loss=trainer.evaluate(held_out).loss,
        params={n: p.detach().clone() for n, p in trainer.module.named_parameters()},
    )


def reference_training(steps: list[dict]) -> tuple[list[float], list[float], dict, float]:
    """The same steps on the unpipelined model with the same optimizer and clipping: the
    losses, the norms before clipping, the parameters after the last step and the held-out
    loss (training's evaluate: the mean over every held-out batch's target tokens)."""
    model = llama.build_full_model(bodies.model_config("float64"))
    optimizer = adamw(model.parameters())
    losses, norms = [], []
    for step in steps:
        optimizer.zero_grad()
        loss = llama.reference_loss(model, bodies.make_batch(step["lengths"], step["seed"]))
        loss.backward()
        norms.append(float(torch.nn.utils.clip_grad_norm_(model.parameters(), MAX_NORM)))
        optimizer.step()
        losses.append(loss.item())
    params = {n: p.detach().clone() for n, p in model.named_parameters()}
    held_out = [bodies.make_batch(s["lengths"], s["seed"] + 100) for s in steps]
    with torch.no_grad():
        total = sum(
            llama.reference_loss(model, batch).item() * llama.count_targets(len(t) for t in batch)
            for batch in held_out
        )
    tokens = sum(llama.count_targets(len(t) for t in batch) for batch in held_out)
    return losses, norms, params, total / tokens if tokens else float("nan")


def missing_head() -> dict:
    """Errors of heads the stages do not hold, then a good step: a plan running heads on stage 0
    given to a trainer without spread head (refused on every rank), a spread-head trainer whose
    factory builds stage 0 without the head (setup fails on every rank), and last, the executor
    itself given that plan (stage 0 refuses it before any communication; the last stage's wait
    for it runs out its 5 s). Returns each outcome, (type, message) or None."""
    config = bodies.model_config("float64")
    results: dict[str, Any] = {}
    plain = infinipipe.Trainer(
        config, bodies.frozen_optimizer, runtime=infinipipe.RuntimeConfig(timeout_s=5)
    )
    lengths = [30, 12, 7]
    batch = bodies.make_batch(lengths, seed=1)
    plan = spread(bodies.make_plan(plain, lengths, dict(method="epp")), "first")
    results["trainer_refuses"] = bodies._outcome(lambda: plain.step(batch, plan=plan))
    results["good_loss"] = plain.step(batch).loss

    def factory(stage: int, split: list[int]) -> Any:
        return llama.build_stage(config, split, stage)  # no replica: the head on the last only

    results["factory_without_head"] = bodies._outcome(
        lambda: infinipipe.Trainer(
            infinipipe.StageFactory(factory, config),
            bodies.frozen_optimizer,
            plan=infinipipe.PlanConfig(spread_head=True),
            runtime=infinipipe.RuntimeConfig(timeout_s=20),
        )
    )
    results["executor_refuses"] = bodies._outcome(lambda: plain.executor.run(plan, batch, 0))
    return results


def checkpoint_round_trip(directory: str, timeout_s: float = 60.0) -> dict:
    """A spread-head trainer (AdamW) steps once and saves; a fresh spread-head trainer and a
    plain one load it, and a fresh spread-head trainer loads a plain trainer's checkpoint.
    Returns this rank's stage and, per trainer, its weights and optimizer state by name."""
    config = bodies.model_config("float64")
    batch = bodies.make_batch([700], seed=1)

    def trainer(spread_head: bool) -> infinipipe.Trainer:
        return infinipipe.Trainer(
            config,
            adamw,
            plan=infinipipe.PlanConfig(spread_head=spread_head),
            runtime=infinipipe.RuntimeConfig(timeout_s=timeout_s),
        )

    def state(t: infinipipe.Trainer) -> dict:
        names = {id(p): n for n, p in t.module.named_parameters()}
        optimizer = {
            names[id(p)]: {k: v.clone() for k, v in s.items()} for p, s in t.optimizer.state.items()
        }
        weights = {n: p.detach().clone() for n, p in t.module.named_parameters()}
        return dict(weights=weights, optimizer=optimizer)

    saved = trainer(True)
    plan = spread(bodies.make_plan(saved, [700], dict(CHUNKFLOW_SPEC)), "round-robin")
    saved.step(batch, plan=plan)
    saved.save_checkpoint(f"{directory}/spread")
    spread_loaded = trainer(True)
    spread_loaded.load_checkpoint(f"{directory}/spread")
    plain_loaded = trainer(False)
    plain_loaded.load_checkpoint(f"{directory}/spread")
    loaded_plain = state(plain_loaded)
    plain_loaded.step(batch)
    plain_loaded.save_checkpoint(f"{directory}/plain")
    from_plain = trainer(True)
    from_plain.load_checkpoint(f"{directory}/plain")
    return dict(
        stage=saved.stage_index,
        saved=state(saved),
        spread_loaded=state(spread_loaded),
        plain_loaded=loaded_plain,
        plain_saved=state(plain_loaded),
        from_plain=state(from_plain),
    )


CHUNKFLOW_SPEC = dict(method="chunkflow", chunk_tokens=128)
