"""Test bodies for the parallel layout (data replicas, sequence ranks), run in the ranks that
launcher.run_ranks starts."""

from __future__ import annotations

import os
import time
from typing import Any

import bodies
import torch

import infinipipe
from infinipipe import _C
from infinipipe.distributed.layout import Parallel
from infinipipe.distributed.rendezvous import destroy_default_group


def _spec_plan(trainer: infinipipe.Trainer, batch: list[torch.Tensor], spec: dict) -> Any:
    """This replica's plan of `batch` from a case's spec (bodies.make_plan over its share).
    spec["wave_per_group"]: the plan's chunks rebuilt with one wave per group of chunks that
    share no sequence (a split sequence's chunks stay in one wave)."""
    share = list(trainer.plan(batch).lengths)
    plan = bodies.make_plan(trainer, share, spec)
    if not spec.get("wave_per_group"):
        return plan
    waves: list[list[int]] = []
    wave_of: dict[int, int] = {}  # sequence -> its wave
    for c, chunk in enumerate(plan.chunks):
        seqs = {seq for seq, _, _ in chunk}
        joined = {wave_of[q] for q in seqs if q in wave_of}
        if joined:  # chunks come in chain order: a continued sequence is in the last wave
            waves[-1].append(c)
        else:
            waves.append([c])
        for q in seqs:
            wave_of[q] = len(waves) - 1
    return _C.plan.build_plan(
        share, plan.chunks, waves, trainer.cost, zero_bubble=spec.get("zero_bubble", "off")
    )


def parity(
    parallel: dict, cases: list[dict], timeout_s: float = 60.0, share_gpus: bool = False
) -> list[dict]:
    """Every case as one step under the layout; per case this rank's loss, gradients (summed
    over the stage's gradient group by the step) and plan."""
    trainers: dict[str, infinipipe.Trainer] = {}
    records = []
    for case in cases:
        dtype = case["dtype"]
        if dtype not in trainers:
            trainers[dtype] = infinipipe.Trainer(
                bodies.model_config(dtype),
                bodies.frozen_optimizer,
                parallel=Parallel(**parallel),
                runtime=infinipipe.RuntimeConfig(timeout_s=timeout_s, share_gpus=share_gpus),
            )
        trainer = trainers[dtype]
        batch = bodies.make_batch(case["lengths"], case["seed"])
        plan = _spec_plan(trainer, batch, case["plan"])
        result = trainer.step(batch, plan=plan, measure_memory=True)
        records.append(
            dict(
                name=case["name"],
                loss=result.loss,
                tokens=result.tokens,
                grads={n: p.grad.detach().clone() for n, p in trainer.module.named_parameters()},
                lengths=list(plan.lengths),
                kinds=list(plan.chunk_kinds),
                waves=len(plan.waves),
                recomputes=any(n > 0 for row in plan.recompute for n in row),
                stage=trainer.stage_index,
                replica=trainer.layout.replica,
                sequence_rank=trainer.layout.sequence_rank,
                memory={k: v for k, v in result.stats.items() if "activation" in k},
                split_graphs=result.stats["split_graphs"],
                unsplit_graphs=result.stats["unsplit_graphs"],
            )
        )
    return records


def optimizer_steps(parallel: dict, zero: int, batches: list[list[int]], lr: float) -> dict:
    """AdamW steps on `batches` (lengths; seeds 0, 1, ...) under the layout; this rank's
    parameters after them and the bytes of its optimizer state; the process's threads before
    the trainer, while it runs, and once it is closed (not deleted) and the default group it
    made destroyed."""
    threads_before = _threads()
    trainer = infinipipe.Trainer(
        bodies.model_config("float64"),
        lambda params: torch.optim.AdamW(params, lr=lr),
        parallel=Parallel(**parallel, zero=zero),
        runtime=infinipipe.RuntimeConfig(timeout_s=60),
    )
    losses = [
        trainer.step(bodies.make_batch(lengths, seed)).loss for seed, lengths in enumerate(batches)
    ]
    optimizer = trainer.optimizer
    local = getattr(optimizer, "optim", optimizer)  # ZeroRedundancyOptimizer: its local shard
    state_bytes = sum(
        t.numel() * t.element_size()
        for state in local.state.values()
        for t in state.values()
        if torch.is_tensor(t) and t.dim() > 0
    )
    params = {n: p.detach().clone() for n, p in trainer.module.named_parameters()}
    threads_running = _threads()
    trainer.close()  # its groups shut down here, not left to the exit
    try:
        trainer.step(bodies.make_batch(batches[0], 0))
        after_close = "no error"
    except infinipipe.Error as e:
        after_close = str(e)
    destroy_default_group()
    # A rank once counted one thread more here, in 600 checks: most likely a joined thread still
    # listed in /proc for a moment. Up to 2 s for the count to fall; a live thread never does.
    deadline = time.monotonic() + 2.0
    while _threads() > threads_before and time.monotonic() < deadline:
        time.sleep(0.01)
    return dict(
        threads=(threads_before, threads_running, _threads()),
        losses=losses,
        params=params,
        state_bytes=state_bytes,
        stage=trainer.stage_index,
        replica=trainer.layout.replica,
        after_close=after_close,
        groups_left=trainer.layout.gradient_group is not None,
    )


def _threads() -> int:
    return len(os.listdir("/proc/self/task"))
