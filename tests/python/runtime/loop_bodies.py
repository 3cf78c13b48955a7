"""Rank bodies for test_training_loop.py: the step split into its parts (gradient
accumulation, global clipping, evaluation), on the tiny float64 model of bodies.py."""

from __future__ import annotations

import torch
from bodies import frozen_optimizer, make_batch, model_config

import infinipipe
from infinipipe.training.memory_meter import MemoryMeter

# A split sequence (cut by the chunkflow cap) beside packed short ones, so K/V buffers are used.
BATCHES = [([70, 9, 23, 5], 1), ([40, 33, 8], 2)]


def grads_of(trainer: infinipipe.Trainer) -> dict[str, torch.Tensor]:
    return {
        name: p.grad.detach().clone()
        for name, p in trainer.module.named_parameters()
        if p.grad is not None
    }


def training_loop() -> dict:
    trainer = infinipipe.Trainer(
        model_config("float64"),
        frozen_optimizer,
        plan=infinipipe.PlanConfig(method="chunkflow", chunk_tokens=32),
        runtime=infinipipe.RuntimeConfig(timeout_s=60),
    )
    batches = [make_batch(lengths, seed) for lengths, seed in BATCHES]
    out: dict = {"stage": trainer.stage_index}

    # Two forward-backwards accumulate: the gradients of the sum of the two batches' mean losses.
    trainer.zero_grad()
    out["losses"] = [trainer.forward_backward(b).loss for b in batches]
    out["accumulated"] = grads_of(trainer)
    out["norm"] = trainer.grad_norm()

    # Evaluation: the same loss as a training forward, gradients untouched, nothing saved for
    # a backward (MemoryMeter sees every tensor autograd saves).
    meter = MemoryMeter(trainer.stage.executor, trainer.parameters)
    trainer.stage.executor.set_after_action(meter.sample)
    with meter.hooks():
        evaluation = trainer.evaluate(batches)
    trainer.stage.executor.set_after_action(None)
    out["eval_loss"], out["eval_tokens"] = evaluation.loss, evaluation.tokens
    out["eval_perplexity"] = evaluation.perplexity
    out["eval_saved_bytes"] = meter.peak_saved_bytes
    after = grads_of(trainer)
    out["grads_untouched"] = all(torch.equal(after[n], g) for n, g in out["accumulated"].items())

    # Clipping to half the norm: returns the norm before clipping, scales every stage.
    out["clip_returned"] = trainer.clip_grad_norm_(out["norm"] / 2)
    out["clipped"] = grads_of(trainer)
    out["norm_after_clip"] = trainer.grad_norm()
    # A max_norm above the norm leaves the gradients as they are.
    out["clip_noop"] = trainer.clip_grad_norm_(out["norm"] * 10)
    out["unchanged_by_noop"] = all(
        torch.equal(g, out["clipped"][n]) for n, g in grads_of(trainer).items()
    )
    # step() starts from zero: its gradients are the one batch's alone.
    trainer.step(batches[0])
    out["step_grads"] = grads_of(trainer)
    return out


def bad_clip() -> str:
    trainer = infinipipe.Trainer(
        model_config("float64"), frozen_optimizer, runtime=infinipipe.RuntimeConfig(timeout_s=30)
    )
    try:
        trainer.clip_grad_norm_(float("nan"))
    except ValueError as e:
        return str(e)
    return "no error"


def tied_exchange() -> list[float]:
    """Stages 0 and 2 of 3 sum two tied tensors (twice, with indices 0 and 1); stage 1 is not
    involved. Returns this rank's tensors after the exchange."""
    trainer = infinipipe.Trainer(
        model_config("float64"), frozen_optimizer, runtime=infinipipe.RuntimeConfig(timeout_s=30)
    )
    stage = trainer.stage_index
    mine = [torch.full((3,), float(10 * stage + i), dtype=torch.float64) for i in range(2)]
    if stage != 1:
        for index, t in enumerate(mine):
            trainer.stage.executor.add_peer_tensor(t, 2 - stage, index)
    return [t.tolist() for t in mine]


def planning_ahead() -> dict:
    """The same batches stepped with plans made inline, then through trainer.prefetching: the
    same plans and losses (the weights are frozen), and each prefetched plan made on the
    planning-ahead thread."""
    import threading

    trainer = infinipipe.Trainer(
        model_config("float64"), frozen_optimizer, runtime=infinipipe.RuntimeConfig(timeout_s=60)
    )
    batches = [make_batch(lengths, seed) for lengths, seed in BATCHES * 2]
    inline = [trainer.step(b) for b in batches]
    planned_on = []
    plan_lengths = trainer.planner._ahead._plan_lengths

    def recorded(lengths):
        planned_on.append(threading.current_thread().name)
        return plan_lengths(lengths)

    trainer.planner._ahead._plan_lengths = recorded
    ahead = [trainer.step(b) for b in trainer.prefetching(batches)]
    return {
        "inline": [(r.loss, r.plan["hash"], r.planning_hidden_s) for r in inline],
        "ahead": [(r.loss, r.plan["hash"], r.planning_s, r.planning_hidden_s) for r in ahead],
        "planned_on": planned_on,
    }


def collector_paused() -> dict:
    """Whether Python's garbage collector was on in each layer call of a step and of an
    evaluation, with pause_gc on and off (the default), and after each run; then with the
    collector turned off by the caller beforehand."""
    import gc

    batch = make_batch(*BATCHES[0])
    out: dict = {}
    for pause in (True, False):
        trainer = infinipipe.Trainer(
            model_config("float64"),
            frozen_optimizer,
            runtime=infinipipe.RuntimeConfig(timeout_s=60, pause_gc=pause),
        )
        seen: list[bool] = []
        layer = trainer.module.layer

        def spied(*args, layer=layer, seen=seen):
            seen.append(gc.isenabled())
            return layer(*args)

        trainer.module.layer = spied  # the stage adapter looks it up at every call
        trainer.step(batch)
        out[f"step {pause}"] = (seen[:], gc.isenabled())
        seen.clear()
        trainer.evaluate([batch])
        out[f"evaluate {pause}"] = (seen[:], gc.isenabled())
        if pause:
            gc.disable()  # the caller's choice: the trainer leaves the collector off
            trainer.step(batch)
            out["caller's off"] = gc.isenabled()
            gc.enable()
        trainer.close()
    return out


def profiled_cost() -> dict:
    """PlanConfig(cost_model="profile") on the tiny float32 model: the cost model every rank
    plans with, and how the trainer describes it."""
    trainer = infinipipe.Trainer(
        model_config("float32"),
        frozen_optimizer,
        plan=infinipipe.PlanConfig(cost_model="profile"),
        runtime=infinipipe.RuntimeConfig(timeout_s=120),
    )
    result = trainer.step(make_batch([40, 9], 0))
    return {
        "cost": trainer.cost.to_json(),
        "name": trainer.planner.cost_model_name,
        "reported": result.plan["cost_model"],
        "predicted_s": result.predicted_s,
    }


def stale_profile() -> dict:
    """A cached profile checked after 2 steps (the first left out), with prefetching: each
    step's cost model name, hidden planning and times, and the cost model planned with at the
    end."""
    trainer = infinipipe.Trainer(
        model_config("float32"),
        frozen_optimizer,
        plan=infinipipe.PlanConfig(cost_model="profile", profile_check_steps=2),
        runtime=infinipipe.RuntimeConfig(timeout_s=120),
    )
    batches = [make_batch([40 + i, 9], i) for i in range(6)]  # distinct lengths: plans too
    results = [trainer.step(b) for b in trainer.prefetching(batches)]
    return {
        "names": [r.plan["cost_model"] for r in results],
        "hidden": [r.planning_hidden_s for r in results],
        "times": [(r.step_s, r.predicted_s) for r in results],
        "cost": trainer.cost.to_json(),
    }


def _tensors(state: dict) -> dict[str, torch.Tensor]:
    """Every tensor of a (nested) state dict, by its path, cloned."""
    out = {}
    for key, value in state.items():
        if isinstance(value, dict):
            out.update({f"{key}.{k}": v for k, v in _tensors(value).items()})
        elif isinstance(value, torch.Tensor):
            out[str(key)] = value.detach().clone()
    return out


def _same(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> bool:
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def nonfinite_steps(poison_rank: int) -> dict:
    """AdamW with max_nonfinite_skips=2: step 1 trains; in step 2 one gradient is made NaN on
    `poison_rank` only; step 3 trains again; then that rank's weights are made infinite, so that
    every loss is NaN: steps 4 and 5 are skipped and step 6 raises. Returns what every step did
    and whether the weights and the optimizer's state moved."""
    trainer = infinipipe.Trainer(
        model_config("float64"),
        lambda params: torch.optim.AdamW(params, lr=1e-2),
        plan=infinipipe.PlanConfig(method="chunkflow", chunk_tokens=32),
        runtime=infinipipe.RuntimeConfig(timeout_s=60, max_nonfinite_skips=2),
    )
    batches = [make_batch(lengths, seed) for lengths, seed in BATCHES]
    poisoned = trainer.rank == poison_rank

    def snapshot() -> dict[str, torch.Tensor]:
        return {**_tensors(trainer.module.state_dict()), **_tensors(trainer.optimizer.state_dict())}

    out: dict = {"skipped": [trainer.step(batches[0]).skipped]}
    before = snapshot()
    trainer.zero_grad()
    out["loss_2"] = trainer.forward_backward(batches[1]).loss
    if poisoned:
        trainer.parameters[-1].grad.view(-1)[0] = float("nan")
    out["skipped"].append(not trainer.optimizer_step())
    out["unchanged_after_skip"] = _same(before, snapshot())
    out["skipped"].append(trainer.step(batches[1]).skipped)
    after_clean = snapshot()
    out["moved_after_clean"] = not _same(before, after_clean)
    if poisoned:
        with torch.no_grad():
            trainer.parameters[-1].fill_(float("inf"))
    after_clean = snapshot()
    try:
        while True:
            result = trainer.step(batches[0])
            out["skipped"].append(result.skipped)
            out.setdefault("losses", []).append(result.loss)
    except infinipipe.NonfiniteError as e:
        out["error"], out["error_step"] = str(e), e.step
    out["unchanged_after_error"] = _same(after_clean, snapshot())
    out["steps"], out["skipped_steps"] = trainer.steps, trainer.skipped_steps
    return out
