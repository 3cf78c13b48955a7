"""The pipelined peer of the measured comparison: torch.distributed.pipelining's Schedule1F1B on the
same LLaMA, weights and layer split as InfiniPipe. Pipelining needs static shapes, so each step's
sequences are right-padded to the step's longest sequence and cut into microbatches of
`microbatch_size` rows."""

from __future__ import annotations

import contextlib
import math
import time
from collections.abc import Sequence
from typing import Any

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.pipelining import PipelineStage, Schedule1F1B
from torch.nn import functional as F

from infinipipe.models import llama
from lib.peer_layers import Layers, check_batch, memory_meter

PAD = 0  # any id in the vocabulary: pads come after the real tokens and carry no targets


def padded_causal_attention(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, ctx: llama.ChunkContext, layer_index: int
) -> torch.Tensor:
    """Batched causal SDPA over equal-length padded rows (what a padded-batch model runs).
    Exact for right padding: under the causal mask real tokens never see the pads after them."""
    rows = len(ctx.slices)
    length = ctx.num_tokens // rows
    q4, k4, v4 = (x.view(rows, length, x.shape[1], x.shape[2]).transpose(1, 2) for x in (q, k, v))
    out = F.scaled_dot_product_attention(
        q4, k4, v4, is_causal=True, scale=q.shape[-1] ** -0.5, enable_gqa=q.shape[1] != k.shape[1]
    )
    return out.transpose(1, 2).reshape(q.shape)


class PaddedStage(nn.Module):
    """A LlamaStage as the plain nn.Module pipelining wants: [rows, L] token ids (first stage)
    or [rows, L, hidden] states in, [rows, L, hidden] states or [rows, L, vocab] logits out."""

    def __init__(self, stage: llama.LlamaStage, checkpoint_layers: int = 0) -> None:
        super().__init__()
        self.stage = stage
        self.stage.attention_fn = padded_causal_attention
        self.layers = Layers(stage, checkpoint_layers)
        self._contexts: dict[tuple[int, int], llama.ChunkContext] = {}

    def context(self, rows: int, length: int) -> llama.ChunkContext:
        """One slice per padded row (positions 0..L-1 each); kept, as it caches rotary tables."""
        key = (rows, length)
        if key not in self._contexts:
            if len(self._contexts) >= 8:
                self._contexts.pop(next(iter(self._contexts)))
            self._contexts[key] = llama.ChunkContext([(r, 0, length) for r in range(rows)])
        return self._contexts[key]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        rows, length = x.shape[0], x.shape[1]
        ctx = self.context(rows, length)
        hidden = (
            self.stage.embed(x.reshape(-1))
            if self.stage.has_embedding
            else x.reshape(rows * length, -1)
        )
        hidden = self.layers(hidden, ctx)
        out = self.stage.head(hidden) if self.stage.has_head else hidden
        return out.view(rows, length, -1)


def pad_batch(sequences: Sequence[torch.Tensor], rows: int) -> tuple[torch.Tensor, torch.Tensor]:
    """tokens and targets [rows, L], L the longest sequence: right-padded with PAD; targets are
    the next token, IGNORE_INDEX for each sequence's last token, pads and all-pad filler rows."""
    length = max(s.numel() for s in sequences)
    tokens = torch.full((rows, length), PAD, dtype=torch.long)
    targets = torch.full((rows, length), llama.IGNORE_INDEX, dtype=torch.long)
    for r, s in enumerate(sequences):
        tokens[r, : s.numel()] = s
        targets[r, : s.numel() - 1] = s[1:]
    return tokens, targets


class TorchPipelining:
    """Schedule1F1B over `group` (one stage per rank, built with llama.build_stage's seeded
    weights), on each step's sequences right-padded to the step's longest one.

    checkpoint_layers: decoder layers of each stage (its first ones) run under
        torch.utils.checkpoint (non-reentrant); at least the stage's layer count means all.
    Every rank must call step() with the same batch.
    """

    MAX_CACHED_SHAPES = 4  # each cached schedule keeps receive buffers of its shape

    def __init__(
        self,
        config: llama.LlamaConfig,
        layers_per_stage: int | Sequence[int],
        group: Any,
        *,
        microbatch_size: int = 1,
        checkpoint_layers: int = 0,
        seed: int = 0,
        lr: float = 1e-2,
    ) -> None:
        if microbatch_size < 1:
            raise ValueError(f"microbatch_size must be >= 1, got {microbatch_size}")
        self.config, self.group = config, group
        self.microbatch_size = int(microbatch_size)
        self.rank = dist.get_rank(group)
        self.num_stages = dist.get_world_size(group)
        split = (
            llama.even_layer_split(config.layers, layers_per_stage)
            if isinstance(layers_per_stage, int)
            else list(layers_per_stage)
        )
        if len(split) != self.num_stages:
            raise ValueError(
                f"the layer split {split} has {len(split)} stages but the group has "
                f"{self.num_stages} ranks: one stage per rank"
            )
        stage = llama.build_stage(config, split, self.rank, seed=seed)
        self.module = PaddedStage(stage, checkpoint_layers)
        self.optimizer = torch.optim.AdamW(self.module.parameters(), lr=lr)
        self.last_rank = dist.get_global_rank(group, self.num_stages - 1)
        self._schedules: dict[tuple[int, int], Schedule1F1B] = {}
        self._normaliser = 1

    def parameters(self) -> list[torch.Tensor]:
        """This rank's stage parameters (what the optimizer steps)."""
        return list(self.module.parameters())

    def _loss(self, logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        # Summed over the microbatch and divided by the whole step's target count (with
        # scale_grads=False the schedule neither averages nor rescales), so the microbatch
        # losses add up to the step's mean loss, as in InfiniPipe.
        return llama.chunk_loss(
            logits.reshape(-1, logits.shape[-1]), targets.reshape(-1), self._normaliser
        )

    def _schedule(self, microbatches: int, length: int) -> Schedule1F1B:
        """The stage and schedule of a step shape (cached)."""
        key = (microbatches, length)
        if key not in self._schedules:
            if len(self._schedules) >= self.MAX_CACHED_SHAPES:
                self._schedules.pop(next(iter(self._schedules)))
            pipe_stage = static_stage(
                self.module,
                self.module.stage,
                self.rank,
                self.num_stages,
                self.group,
                (self.microbatch_size, length),
            )
            self._schedules[key] = Schedule1F1B(
                pipe_stage, microbatches, loss_fn=self._loss, scale_grads=False
            )
        return self._schedules[key]

    def step(self, batch: list[torch.Tensor], measure_memory: bool = False) -> dict:
        """One training step on `batch` (a list of 1-D token tensors, the same on every rank).

        Returns loss (the step's mean, the same on every rank), step_s (schedule step and
        optimizer step, from a barrier), setup_s (building this shape's stage and schedule, 0
        when cached), padded_tokens, tokens and, with measure_memory, peak_activation_bytes
        (this rank's peak of autograd's saved tensors, each storage once, parameters excluded).
        """
        sequences = check_batch(batch, self.config.vocab)
        microbatches = math.ceil(len(sequences) / self.microbatch_size)
        if microbatches < self.num_stages:
            raise ValueError(
                f"Schedule1F1B needs at least as many microbatches as stages ({self.num_stages}); "
                f"{len(sequences)} sequences in microbatches of {self.microbatch_size} make "
                f"{microbatches}: use a smaller microbatch_size or more sequences"
            )
        tokens, targets = pad_batch(sequences, microbatches * self.microbatch_size)
        self._normaliser = llama.count_targets(s.numel() for s in sequences)

        start = time.perf_counter()
        schedule = self._schedule(microbatches, tokens.shape[1])
        setup_s = time.perf_counter() - start

        result = run_schedule(
            schedule,
            self.optimizer,
            [self.module.layers],
            self.group,
            self.last_rank,
            inputs=(tokens,) if self.rank == 0 else (),
            target=targets if self.rank == self.num_stages - 1 else None,
            measure_memory=measure_memory,
        )
        return dict(
            result,
            setup_s=setup_s,
            padded_tokens=tokens.numel(),
            tokens=sum(s.numel() for s in sequences),
        )


def static_stage(
    module: nn.Module,
    stage: llama.LlamaStage,
    index: int,
    num_stages: int,
    group: Any,
    shape: tuple[int, int],
) -> PipelineStage:
    """`module` (running `stage`, pipeline stage `index`) as a PipelineStage on microbatches of
    `shape` = (rows, length). Shapes are given up front (static metadata): pipelining then needs
    no shape-inference forward, only its one-time stage handshake."""
    c = stage.config
    hidden = torch.empty(*shape, c.hidden, dtype=c.dtype, device="meta", requires_grad=True)
    inputs = torch.empty(*shape, dtype=torch.long, device="meta") if stage.has_embedding else hidden
    outputs = (
        torch.empty(*shape, c.vocab, dtype=c.dtype, device="meta", requires_grad=True)
        if stage.has_head
        else hidden
    )
    return PipelineStage(
        module,
        index,
        num_stages,
        torch.device("cpu"),
        input_args=inputs,
        output_args=outputs,
        group=group,
    )


def run_schedule(
    schedule: Any,
    optimizer: torch.optim.Optimizer,
    layers: Sequence[Layers],
    group: Any,
    last_rank: int,
    *,
    inputs: tuple,
    target: torch.Tensor | None,
    measure_memory: bool = False,
    **kwargs: Any,
) -> dict:
    """One training step through `schedule`: loss (the step's mean, broadcast from `last_rank`,
    the global rank holding the last stage), step_s (the schedule and optimizer steps, timed from
    a barrier) and, with measure_memory, peak_activation_bytes (this rank's peak of autograd's
    saved tensors).
    `layers` are this rank's stages' layers (their checkpoint recompute reports to the meter);
    `inputs` go to the first stage's rank, `target` to the last's, `kwargs` to every stage."""
    params = [p for g in optimizer.param_groups for p in g["params"]]
    meter = memory_meter(params) if measure_memory else None
    losses: list[torch.Tensor] = []
    dist.barrier(group=group)  # all stages start the timed step together
    start = time.perf_counter()
    optimizer.zero_grad(set_to_none=True)
    for lay in layers:
        lay.meter = meter
    try:
        with meter.hooks() if meter is not None else contextlib.nullcontext():
            schedule.step(*inputs, target=target, losses=losses, return_outputs=False, **kwargs)
    finally:
        for lay in layers:
            lay.meter = None
    optimizer.step()
    step_s = time.perf_counter() - start
    loss = (
        torch.stack(losses).sum().detach().double()
        if losses
        else torch.zeros((), dtype=torch.double)
    )
    dist.broadcast(loss, src=last_rank, group=group)
    result = dict(loss=float(loss), step_s=step_s)
    if meter is not None:
        result["peak_activation_bytes"] = meter.peak_bytes
    return result
