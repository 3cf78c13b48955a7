"""Peer baselines for the measured comparison: what a user would run today instead of InfiniPipe.

- TorchPipelining (lib/torch_pipelining.py): torch.distributed.pipelining's Schedule1F1B on the
  same LLaMA, weights and layer split, each step's sequences right-padded to the step's longest.
- TorchPacked (lib/torch_packed.py): torch.distributed.pipelining on the step's documents packed
  into rows of a fixed length, document-causal, as torchtitan trains (its own loss: documents are
  cut at row boundaries; tests/python/test_peers.py checks it against an unpipelined run of the
  same rows).
- Unpipelined (here): the whole model on one process, one sequence at a time (no padding),
  gradients accumulated over the step: the reference both pipelines must reproduce.

Both optimise the same loss as infinipipe.Trainer: next-token cross-entropy summed over the step's
target tokens and divided by their count (llama.chunk_loss), and step AdamW once per step.

    python benchmarks/lib/peers.py --smoke   # 2 processes (Gloo): pipelined == unpipelined

Needs only infinipipe.models.llama, except `measure_memory`, which reuses
infinipipe.MemoryMeter (and so needs the compiled infinipipe._C).
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import tempfile
import time
from pathlib import Path

import torch
import torch.distributed as dist
from torch import nn

# Run as a script (the smoke check), this file finds infinipipe and lib/ itself.
BENCHMARKS = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(BENCHMARKS.parent / "python"), str(BENCHMARKS)]
from infinipipe.models import llama  # noqa: E402
from lib.peer_layers import Layers, check_batch  # noqa: E402
from lib.ranks import leave  # noqa: E402
from lib.torch_pipelining import TorchPipelining  # noqa: E402


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
        self.layers = Layers(self.model, checkpoint_layers)
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
    rank: int, rendezvous: str, expected: list[float], gradients: dict[str, torch.Tensor]
) -> None:
    """One rank: every smoke configuration for both steps; raises on the first mismatch (then
    mp.spawn reports it and ends the other rank)."""
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{rendezvous}", rank=rank, world_size=2)
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
    leave()  # skips interpreter teardown, where Gloo's threads can abort after all has passed


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
        # A file rendezvous: a TCP port picked here could be taken before rank 0 binds it.
        with tempfile.TemporaryDirectory() as tmp:
            rendezvous = os.path.join(tmp, "rendezvous")
            mp.spawn(_smoke_rank, args=(rendezvous, expected, gradients), nprocs=2, join=True)
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
