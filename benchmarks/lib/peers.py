"""Peer baselines for the measured comparison: what a user would run today instead of InfiniPipe.

- TorchPipelining: torch.distributed.pipelining's Schedule1F1B on the same LLaMA, weights and
  layer split. Pipelining needs static shapes, so each step's sequences are right-padded to the
  step's longest sequence and cut into microbatches of `microbatch_size` rows.
- Unpipelined: the whole model on one process, one sequence at a time (no padding), gradients
  accumulated over the step: the reference both pipelines must reproduce.

Both optimise the same loss as infinipipe.Trainer: next-token cross-entropy summed over the step's
target tokens and divided by their count (llama.chunk_loss), and step AdamW once per step.

    python benchmarks/lib/peers.py --smoke   # 2 processes (Gloo): pipelined == unpipelined

Needs only infinipipe.models.llama, except `measure_memory`, which reuses
infinipipe.MemoryMeter (and so needs the compiled infinipipe._C).
"""

from __future__ import annotations

import argparse
import contextlib
import math
import os
import socket
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.pipelining import PipelineStage, Schedule1F1B
from torch.nn import functional as F
from torch.utils.checkpoint import checkpoint

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "python"))
from infinipipe.models import llama  # noqa: E402

PAD = 0  # any id in the vocabulary: pads come after the real tokens and carry no targets


def check_batch(batch: Any, vocab: int) -> list[torch.Tensor]:
    """The batch as 1-D int64 tensors; ValueError naming the problem otherwise."""
    if isinstance(batch, torch.Tensor) or not isinstance(batch, Sequence):
        raise ValueError(f"a batch must be a list of 1-D token tensors, got {type(batch).__name__}")
    if len(batch) == 0:
        raise ValueError("the batch is empty: give at least one token sequence")
    out = []
    for i, seq in enumerate(batch):
        t = torch.as_tensor(seq)
        if t.dim() != 1 or t.numel() == 0 or t.is_floating_point() or t.dtype == torch.bool:
            raise ValueError(
                f"sequence {i} must be a non-empty 1-D integer tensor, got "
                f"{t.dtype} of shape {tuple(t.shape)}"
            )
        if int(t.min()) < 0 or int(t.max()) >= vocab:
            raise ValueError(f"sequence {i} has token ids outside the vocabulary [0, {vocab})")
        out.append(t.to(torch.long))
    if llama.count_targets(t.numel() for t in out) == 0:
        raise ValueError("the batch has no target tokens (every sequence has one token)")
    return out


# --------------------------------------------------------------------------------------------
# Activation checkpointing, visible to the memory meter


class _MeteredRecompute:
    """Recompute context for torch.utils.checkpoint. Checkpoint recomputes a layer under its own
    saved-tensor hooks, which hide the recomputed activations from an outer MemoryMeter (whereas
    InfiniPipe's executor recomputes where its meter sees them). This puts the meter in front of
    checkpoint's hooks during recomputation, so the peak includes the recomputed layer."""

    def __init__(self, meter: Any) -> None:
        self.meter = meter
        self.hooks = None

    def __enter__(self) -> None:
        inner = torch._C._autograd._top_saved_tensors_default_hooks(False)
        meter = self.meter
        if inner is None:  # not inside checkpoint's recomputation: nothing to chain
            self.hooks = meter.hooks()
        else:
            inner_pack, inner_unpack = inner
            self.hooks = torch.autograd.graph.saved_tensors_hooks(
                lambda x: meter._pack(inner_pack(x)), lambda h: inner_unpack(meter._unpack(h))
            )
        self.hooks.__enter__()

    def __exit__(self, *exc: Any) -> None:
        self.hooks.__exit__(*exc)


class _NothingHeld:
    """MemoryMeter's executor. Only what autograd saves is counted (the comparison's measure):
    not the schedule's receive buffers, nor the stage outputs it keeps until their backward."""

    @staticmethod
    def held_tensors() -> list:
        return []


def _memory_meter(parameters: Sequence[torch.Tensor]) -> Any:
    try:
        from infinipipe.memory_meter import MemoryMeter
    except ImportError as e:
        raise RuntimeError(
            "measure_memory reuses infinipipe.MemoryMeter, which needs the "
            f"compiled module infinipipe._C: {e}"
        ) from None
    return MemoryMeter(_NothingHeld(), parameters)


class _Layers:
    """Runs a LlamaStage's decoder layers, the first `checkpoint_layers` of them checkpointed."""

    def __init__(self, stage: llama.LlamaStage, checkpoint_layers: int) -> None:
        if checkpoint_layers < 0:
            raise ValueError(f"checkpoint_layers must be >= 0, got {checkpoint_layers}")
        self.stage = stage
        self.checkpointed = set(list(stage.layer_indices)[:checkpoint_layers])
        self.meter = None  # set while a step measures memory

    def __call__(self, hidden: torch.Tensor, ctx: llama.ChunkContext) -> torch.Tensor:
        for i in self.stage.layer_indices:
            if i in self.checkpointed:
                meter, kwargs = self.meter, {}
                if meter is not None:
                    kwargs["context_fn"] = lambda: (
                        contextlib.nullcontext(),
                        _MeteredRecompute(meter),
                    )
                hidden = checkpoint(self.stage.layer, i, hidden, ctx, use_reentrant=False, **kwargs)
            else:
                hidden = self.stage.layer(i, hidden, ctx)
        return hidden


# --------------------------------------------------------------------------------------------
# torch.distributed.pipelining


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
        self.layers = _Layers(stage, checkpoint_layers)
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
        """The stage and schedule of a step shape. Shapes are given up front (static metadata):
        pipelining then needs no shape-inference forward, only its one-time stage handshake."""
        key = (microbatches, length)
        if key not in self._schedules:
            if len(self._schedules) >= self.MAX_CACHED_SHAPES:
                self._schedules.pop(next(iter(self._schedules)))
            c, rows = self.config, self.microbatch_size
            stage = self.module.stage
            hidden = torch.empty(
                rows, length, c.hidden, dtype=c.dtype, device="meta", requires_grad=True
            )
            inputs = (
                torch.empty(rows, length, dtype=torch.long, device="meta")
                if stage.has_embedding
                else hidden
            )
            outputs = (
                torch.empty(rows, length, c.vocab, dtype=c.dtype, device="meta", requires_grad=True)
                if stage.has_head
                else hidden
            )
            pipe_stage = PipelineStage(
                self.module,
                self.rank,
                self.num_stages,
                torch.device("cpu"),
                input_args=inputs,
                output_args=outputs,
                group=self.group,
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

        meter = _memory_meter(self.parameters()) if measure_memory else None
        losses: list[torch.Tensor] = []
        dist.barrier(group=self.group)  # both stages start the timed step together
        start = time.perf_counter()
        self.optimizer.zero_grad(set_to_none=True)
        self.module.layers.meter = meter
        try:
            with meter.hooks() if meter is not None else contextlib.nullcontext():
                # Only the first stage takes inputs, only the last targets and losses.
                schedule.step(
                    *((tokens,) if self.rank == 0 else ()),
                    target=targets if self.rank == self.num_stages - 1 else None,
                    losses=losses,
                    return_outputs=False,
                )
        finally:
            self.module.layers.meter = None
        self.optimizer.step()
        step_s = time.perf_counter() - start

        loss = torch.stack(losses).sum().detach() if losses else torch.zeros(())
        dist.broadcast(loss, src=self.last_rank, group=self.group)
        result = dict(
            loss=float(loss),
            step_s=step_s,
            setup_s=setup_s,
            padded_tokens=tokens.numel(),
            tokens=sum(s.numel() for s in sequences),
        )
        if meter is not None:
            result["peak_activation_bytes"] = meter.peak_bytes
        return result


# --------------------------------------------------------------------------------------------
# Unpipelined reference


class Unpipelined:
    """The whole model on one process, the step's sequences one at a time, unpadded."""

    def __init__(
        self,
        config: llama.LlamaConfig,
        *,
        seed: int = 0,
        lr: float = 1e-2,
        checkpoint_layers: int = 0,
    ) -> None:
        self.config = config
        self.model = llama.build_full_model(config, seed=seed)
        self.model.attention_fn = llama.varlen_causal_attention  # SDPA, as a plain model runs
        self.layers = _Layers(self.model, checkpoint_layers)
        self.optimizer = torch.optim.AdamW(self.model.parameters(), lr=lr)

    def parameters(self) -> list[torch.Tensor]:
        return list(self.model.parameters())

    def step(self, batch: list[torch.Tensor]) -> dict:
        """One training step: loss (the step's mean), step_s (forwards, backwards and the
        optimizer step), tokens."""
        sequences = check_batch(batch, self.config.vocab)
        normaliser = llama.count_targets(s.numel() for s in sequences)
        start = time.perf_counter()
        self.optimizer.zero_grad(set_to_none=True)
        total = 0.0
        for s in sequences:
            if s.numel() < 2:
                continue  # no target: contributes nothing
            ctx = llama.ChunkContext.packed([s.numel()])
            logits = self.model.head(self.layers(self.model.embed(s), ctx))
            loss = llama.chunk_loss(logits, llama.chunk_targets(ctx, [s]), normaliser)
            loss.backward()
            total += float(loss.detach())
        self.optimizer.step()
        return dict(
            loss=total, step_s=time.perf_counter() - start, tokens=sum(s.numel() for s in sequences)
        )


# --------------------------------------------------------------------------------------------
# Smoke: pipelined == unpipelined on 2 processes

SMOKE_STEPS = ([50, 300, 17, 120], [200, 33, 90, 260, 7])
SMOKE_CONFIGS = [(mbs, ckpt) for mbs in (1, 2) for ckpt in (0, 1)]  # microbatch_size, ckpt
RTOL = 1e-4


def smoke_batches(config: llama.LlamaConfig) -> list[list[torch.Tensor]]:
    g = torch.Generator().manual_seed(0)
    return [
        [torch.randint(config.vocab, (n,), generator=g) for n in lengths] for lengths in SMOKE_STEPS
    ]


def _check_gradients(stage: nn.Module, reference: dict[str, torch.Tensor], what: str) -> None:
    """The stage's gradients against the unpipelined model's. The losses alone would not catch
    a wrongly scaled gradient: AdamW's update is nearly invariant to the gradient's scale."""
    for name, p in stage.named_parameters():
        want = reference[name]
        error = float((p.grad - want).norm()) if p.grad is not None else float("inf")
        if not error <= RTOL * float(want.norm()) + 1e-9:
            raise AssertionError(
                f"{what}: gradient of {name} differs from the unpipelined one "
                f"(|diff| {error:.3g}, |reference| {float(want.norm()):.3g})"
            )


def _smoke_rank(
    rank: int, port: int, expected: list[float], gradients: dict[str, torch.Tensor]
) -> None:
    """One rank: every smoke configuration for both steps; raises on the first mismatch (then
    mp.spawn reports it and ends the other rank)."""
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=2)
    config = llama.LlamaConfig.tiny()
    batches = smoke_batches(config)
    for mbs, ckpt in SMOKE_CONFIGS:
        peer = TorchPipelining(
            config, 2, dist.group.WORLD, microbatch_size=mbs, checkpoint_layers=ckpt
        )
        for i, (batch, want) in enumerate(zip(batches, expected)):
            r = peer.step(batch)
            what = f"TorchPipelining (microbatch_size {mbs}, checkpoint_layers {ckpt}) step {i}"
            if rank == 0:
                print(
                    f"{what}: loss {r['loss']:.6f} (unpipelined {want:.6f}), "
                    f"{r['padded_tokens']} padded tokens for {r['tokens']}, step "
                    f"{r['step_s']:.3f} s, setup {r['setup_s']:.4f} s",
                    flush=True,
                )
            if not math.isclose(r["loss"], want, rel_tol=RTOL):
                # The loss is broadcast, so every rank stops here together.
                raise AssertionError(
                    f"{what}: loss {r['loss']!r} differs from the "
                    f"unpipelined {want!r} by more than rel. {RTOL}"
                )
            if i == 0:
                _check_gradients(peer.module.stage, gradients, f"{what}, rank {rank}")
    dist.barrier()
    dist.destroy_process_group()
    # Skip interpreter finalisation: Gloo's threads sometimes abort the process there
    # ("terminate called without an active exception") after everything has passed.
    sys.stdout.flush()
    os._exit(0)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def smoke() -> int:
    import torch.multiprocessing as mp

    torch.set_num_threads(1)
    start = time.perf_counter()
    config = llama.LlamaConfig.tiny()
    reference = Unpipelined(config)
    expected, gradients = [], {}
    for b in smoke_batches(config):
        expected.append(reference.step(b)["loss"])
        if not gradients:  # the first step's (optimizer.step leaves them in place)
            gradients = {n: p.grad.clone() for n, p in reference.model.named_parameters()}
    print(f"unpipelined losses: {[round(x, 6) for x in expected]}", flush=True)
    try:
        mp.spawn(_smoke_rank, args=(_free_port(), expected, gradients), nprocs=2, join=True)
    except mp.ProcessRaisedException as e:
        print(f"SMOKE FAILED: {str(e).strip().splitlines()[-1]}", file=sys.stderr)
        return 1
    except mp.ProcessExitedException as e:
        print(f"SMOKE FAILED: a rank died: {e}", file=sys.stderr)
        return 1
    print(
        f"smoke OK: TorchPipelining's losses and gradients match Unpipelined's within rel. "
        f"{RTOL} ({time.perf_counter() - start:.1f} s)"
    )
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--smoke",
        action="store_true",
        help="2 processes: check the pipelined losses against the unpipelined",
    )
    args = parser.parse_args()
    if not args.smoke:
        parser.error(
            "nothing to do: the peers are a library for measured_comparison.py; --smoke checks them"
        )
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    return smoke()


if __name__ == "__main__":
    sys.exit(main())
