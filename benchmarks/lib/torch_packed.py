"""The packed peer of the measured comparison: documents trained as torchtitan does, through
torch.distributed.pipelining, on the same LLaMA, weights and layers as InfiniPipe.

Packing (pack_rows): the step's documents, in batch order, make one token stream cut into rows of
`row_length` tokens; a document crossing a row boundary is cut there (a document longer than a
row spans several rows), and the last row is padded. Every row is one microbatch. Attention is
document-causal: each piece of a document in a row attends only to itself (the stage's chunk
attention, the same kernel InfiniPipe runs, over one slice per piece), so a cut document's later
pieces do not see its earlier ones. Rotary positions restart at 0 in each piece; under RoPE the
attention within a piece depends only on relative positions, so this equals the positions in
the document up to rounding. Targets are each token's next token in its document, also across a
cut (the first token of the next piece, in the next row): the same target tokens and the same
step-mean loss normaliser as every other method; only the attention context of cut pieces differs.

Every rank knows the whole batch, so each computes the rows' layout itself; the schedule passes
the row index of each microbatch to every stage as a keyword tensor, and the stage looks its row's
context up by it (whatever order a schedule runs forwards in; checkpoint recompute gets the
context as an argument of the checkpointed layer).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.pipelining import (
    Schedule1F1B,
    ScheduleGPipe,
    ScheduleInterleaved1F1B,
    ScheduleInterleavedZeroBubble,
    ScheduleZBVZeroBubble,
)

from infinipipe.models import llama
from lib.peer_layers import Layers, check_batch
from lib.torch_pipelining import PAD, run_schedule, static_stage

# name: (schedule class, stages per rank, placement): "loop" puts stage r + k * ranks on rank r,
# "v" stages r and 2 * ranks - 1 - r (the V shape ZB-V needs).
SCHEDULES = {
    "1f1b": (Schedule1F1B, 1, "loop"),
    "gpipe": (ScheduleGPipe, 1, "loop"),
    "interleaved_1f1b": (ScheduleInterleaved1F1B, 2, "loop"),
    "interleaved_zb": (ScheduleInterleavedZeroBubble, 2, "loop"),
    "zbv": (ScheduleZBVZeroBubble, 2, "v"),
}

Piece = tuple[int, int, int]  # (document, start, end) of a document's tokens in a row


def pack_rows(lengths: Sequence[int], row_length: int) -> list[list[Piece]]:
    """The documents' token stream cut into rows of `row_length`: each row's pieces in order (the
    last row may be shorter: it is padded)."""
    rows: list[list[Piece]] = [[]]
    free = row_length
    for doc, n in enumerate(lengths):
        start = 0
        while start < n:
            if free == 0:
                rows.append([])
                free = row_length
            take = min(n - start, free)
            rows[-1].append((doc, start, start + take))
            start, free = start + take, free - take
    return rows


def row_tensors(
    sequences: Sequence[torch.Tensor], rows: list[list[Piece]], row_length: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """tokens and targets [rows, row_length]: pads (and targets of pads and of each document's
    last token) are PAD and IGNORE_INDEX."""
    tokens = torch.full((len(rows), row_length), PAD, dtype=torch.long)
    targets = torch.full((len(rows), row_length), llama.IGNORE_INDEX, dtype=torch.long)
    for r, row in enumerate(rows):
        at = 0
        for doc, start, end in row:
            s = sequences[doc]
            tokens[r, at : at + end - start] = s[start:end]
            nxt = s[start + 1 : end + 1]
            targets[r, at : at + nxt.numel()] = nxt
            at += end - start
    return tokens, targets


PAD_SLICE = 64  # padding attends in blocks this long: next to nothing, whatever its length


def row_context(row: list[Piece], row_length: int) -> llama.ChunkContext:
    """One slice per piece, as a whole sequence of its own (so attention stays inside it and
    positions start at 0), and the padding in slices of PAD_SLICE tokens."""
    lengths = [end - start for _, start, end in row]
    pad = row_length - sum(lengths)
    lengths += [PAD_SLICE] * (pad // PAD_SLICE) + ([pad % PAD_SLICE] if pad % PAD_SLICE else [])
    return llama.ChunkContext([(i, 0, n) for i, n in enumerate(lengths)])


class PackedStage(nn.Module):
    """A LlamaStage as pipelining wants it: forward(x, rows) with x [1, L] token ids (first
    stage) or [1, L, hidden] states, rows [1] the microbatch's row index in `contexts`."""

    def __init__(self, stage: llama.LlamaStage, checkpoint_layers: int, contexts: list) -> None:
        super().__init__()
        self.stage = stage
        self.layers = Layers(stage, checkpoint_layers)
        self.contexts = contexts  # the step's row contexts, shared by the rank's stages

    def forward(self, x: torch.Tensor, rows: torch.Tensor) -> torch.Tensor:
        ctx = self.contexts[int(rows[0])]
        hidden = self.stage.embed(x[0]) if self.stage.has_embedding else x[0]
        hidden = self.layers(hidden, ctx)[None]
        # Not a view: zero-bubble schedules detach a stage's output in place.
        return self.stage.head(hidden) if self.stage.has_head else hidden.clone()


def stage_indices(rank: int, ranks: int, per_rank: int, placement: str) -> list[int]:
    if placement == "v":
        return [rank, 2 * ranks - 1 - rank]
    return [rank + k * ranks for k in range(per_rank)]


def microbatch_count(schedule: str, rows: int, ranks: int) -> int:
    """The fewest microbatches >= rows the schedule runs (the rest are all-pad rows): at least one
    per rank, and the interleaved ones want a multiple of their rounds."""
    n = max(rows, ranks)
    if SCHEDULES[schedule][1] > 1:
        while n % max(1, n // ranks):
            n += 1
    return n


class TorchPacked:
    """`schedule` (a SCHEDULES name) over `group` on each step's documents packed into rows of
    `row_length`, one row per microbatch; weights from llama.build_stage's seed, the layers split
    evenly over the schedule's stages (with 2 stages per rank, each rank holds the same number
    of layers as with one). checkpoint_layers: a stage's first decoder layers run under
    torch.utils.checkpoint. Every rank must call step() with the same batch."""

    MAX_CACHED = 4

    def __init__(
        self,
        config: llama.LlamaConfig,
        group: Any,
        *,
        schedule: str = "1f1b",
        row_length: int = 4096,
        checkpoint_layers: int = 0,
        seed: int = 0,
        lr: float = 1e-2,
    ) -> None:
        self.config, self.group, self.schedule_name = config, group, schedule
        self.row_length = int(row_length)
        self.cls, per_rank, placement = SCHEDULES[schedule]
        self.rank, ranks = dist.get_rank(group), dist.get_world_size(group)
        self.num_stages = ranks * per_rank
        split = llama.even_layer_split(config.layers, self.num_stages)
        self.indices = stage_indices(self.rank, ranks, per_rank, placement)
        self.contexts: list[llama.ChunkContext] = []
        self.modules = [
            PackedStage(
                llama.build_stage(config, split, i, seed=seed), checkpoint_layers, self.contexts
            )
            for i in self.indices
        ]
        self.optimizer = torch.optim.AdamW(self.parameters(), lr=lr)
        holder = {i: r for r in range(ranks) for i in stage_indices(r, ranks, per_rank, placement)}
        self.first, self.last = 0 in self.indices, self.num_stages - 1 in self.indices
        self.last_rank = dist.get_global_rank(group, holder[self.num_stages - 1])
        self._schedules: dict[int, Any] = {}
        self._normaliser = 1

    def parameters(self) -> list[torch.Tensor]:
        return [p for m in self.modules for p in m.parameters()]

    def _loss(self, logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        # As the padded peer's: summed and divided by the step's target count (scale_grads off).
        return llama.chunk_loss(
            logits.reshape(-1, logits.shape[-1]), targets.reshape(-1), self._normaliser
        )

    def _schedule(self, microbatches: int) -> Any:
        if microbatches not in self._schedules:
            if len(self._schedules) >= self.MAX_CACHED:
                self._schedules.pop(next(iter(self._schedules)))
            stages = [
                static_stage(m, m.stage, i, self.num_stages, self.group, (1, self.row_length))
                for m, i in zip(self.modules, self.indices)
            ]
            self._schedules[microbatches] = self.cls(
                stages if len(stages) > 1 else stages[0],
                microbatches,
                loss_fn=self._loss,
                scale_grads=False,
            )
        return self._schedules[microbatches]

    def step(self, batch: list[torch.Tensor], measure_memory: bool = False) -> dict:
        """One training step; returns what TorchPipelining.step does (padded_tokens: the rows'
        tokens) and cut_tokens, the tokens of document pieces that lost earlier context."""
        sequences = check_batch(batch, self.config.vocab)
        rows = pack_rows([s.numel() for s in sequences], self.row_length)
        ranks = dist.get_world_size(self.group)
        rows += [
            [] for _ in range(microbatch_count(self.schedule_name, len(rows), ranks) - len(rows))
        ]
        tokens, targets = row_tensors(sequences, rows, self.row_length)
        self.contexts[:] = [row_context(row, self.row_length) for row in rows]
        self._normaliser = llama.count_targets(s.numel() for s in sequences)

        start = time.perf_counter()
        schedule = self._schedule(len(rows))
        setup_s = time.perf_counter() - start
        result = run_schedule(
            schedule,
            self.optimizer,
            [m.layers for m in self.modules],
            self.group,
            self.last_rank,
            inputs=(tokens,) if self.first else (),
            target=targets if self.last else None,
            measure_memory=measure_memory,
            rows=torch.arange(len(rows)),
        )
        return dict(
            result,
            setup_s=setup_s,
            padded_tokens=tokens.numel(),
            tokens=sum(s.numel() for s in sequences),
            cut_tokens=sum(e - s for row in rows for _, s, e in row if s > 0),
        )
