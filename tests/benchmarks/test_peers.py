"""The measured comparison's peers (benchmarks/lib/peers.py): the pipelined peer's smoke check on 2
processes, and the unpipelined reference against a loss and AdamW step computed by hand."""

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from infinipipe.models import llama

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))
from lib import peers  # noqa: E402


@pytest.mark.slow  # 2 processes over every peer configuration (the benchmarks' smoke runs them too)
def test_smoke_pipelined_matches_unpipelined():
    env = dict(
        os.environ,
        OMP_NUM_THREADS="1",
        PYTHONPATH=os.pathsep.join([str(ROOT / "python"), os.environ.get("PYTHONPATH", "")]),
    )
    proc = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "lib" / "peers.py"), "--smoke"],
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert proc.returncode == 0, f"stdout:\n{proc.stdout}\nstderr:\n{proc.stderr[-4000:]}"
    assert "smoke OK" in proc.stdout


@pytest.mark.parametrize("checkpoint_layers", [0, 2])
def test_unpipelined_matches_hand_computed_step(checkpoint_layers):
    torch.manual_seed(0)
    config = llama.LlamaConfig.tiny(layers=3)
    batch = [torch.randint(config.vocab, (n,)) for n in (5, 1, 40, 17)]
    peer = peers.Unpipelined(config, lr=1e-2, checkpoint_layers=checkpoint_layers)

    # By hand: each sequence through the full model, cross-entropy summed over all next-token
    # targets of the step and divided by their count, then one AdamW step.
    model = llama.build_full_model(config, seed=0)
    total = sum(s.numel() - 1 for s in batch)
    loss = (
        sum(
            F.cross_entropy(
                model(s, llama.ChunkContext.packed([s.numel()]))[:-1], s[1:], reduction="sum"
            )
            for s in batch
        )
        / total
    )
    loss.backward()
    torch.optim.AdamW(model.parameters(), lr=1e-2).step()

    result = peer.step(batch)
    assert result["tokens"] == sum(s.numel() for s in batch)
    assert result["loss"] == pytest.approx(loss.detach().item(), rel=1e-5)
    for (name, got), (_, want) in zip(peer.model.named_parameters(), model.named_parameters()):
        torch.testing.assert_close(got.grad, want.grad, rtol=1e-4, atol=1e-7, msg=name)
        # AdamW moves each weight by about lr whatever its gradient's size, so float rounding
        # in gradients near its eps (1e-8) shows as ~1e-5 here; a wrong step would show as ~lr.
        torch.testing.assert_close(got, want, rtol=0, atol=1e-4, msg=name)


def test_bad_batches_are_rejected_clearly():
    peer = peers.Unpipelined(llama.LlamaConfig.tiny(layers=1))
    with pytest.raises(ValueError, match="empty"):
        peer.step([])
    with pytest.raises(ValueError, match="no target tokens"):
        peer.step([torch.tensor([3])])
    with pytest.raises(ValueError, match="outside the vocabulary"):
        peer.step([torch.tensor([3, 512])])


# The packed peer (benchmarks/lib/torch_packed.py): its packing, and its pipelined training step
# against an unpipelined reference with the same rows and mask, on 2 real Gloo ranks.

PACKED_LENGTHS = (50, 300, 17, 120, 9, 200, 1)  # 300 spans three rows of 128; 1 has no target
PACKED_ROW = 128


def _packed_batch(config):
    g = torch.Generator().manual_seed(0)
    return [torch.randint(config.vocab, (n,), generator=g) for n in PACKED_LENGTHS]


def test_packing_rows_tokens_and_masks():
    from lib import torch_packed as tp

    config = llama.LlamaConfig.tiny(layers=1)
    batch = _packed_batch(config)
    rows = tp.pack_rows(PACKED_LENGTHS, PACKED_ROW)
    tokens, targets = tp.row_tensors(batch, rows, PACKED_ROW)
    assert tokens.shape == targets.shape == (len(rows), PACKED_ROW)
    assert len(rows) == -(-sum(PACKED_LENGTHS) // PACKED_ROW)  # only the last row has padding
    assert all(sum(e - s for _, s, e in row) == PACKED_ROW for row in rows[:-1])
    # Every token once, in stream order, and each one's target its next token in its document.
    assert torch.equal(tokens.reshape(-1)[: sum(PACKED_LENGTHS)], torch.cat(batch))
    stream_targets = torch.cat(
        [torch.cat([s[1:], torch.tensor([llama.IGNORE_INDEX])]) for s in batch]
    )
    assert torch.equal(targets.reshape(-1)[: sum(PACKED_LENGTHS)], stream_targets)
    assert (targets.reshape(-1)[sum(PACKED_LENGTHS) :] == llama.IGNORE_INDEX).all()
    assert int((targets != llama.IGNORE_INDEX).sum()) == llama.count_targets(PACKED_LENGTHS)

    # The row's attention against a dense mask: causal within the same piece of a document
    # (padding in pieces of PAD_SLICE tokens), nothing across documents or across a cut.
    g = torch.Generator().manual_seed(1)
    for row in rows:
        ctx = tp.row_context(row, PACKED_ROW)
        piece = torch.empty(PACKED_ROW, dtype=torch.long)
        at = 0
        for k, (_, s, e) in enumerate(row):
            piece[at : at + e - s] = k
            at += e - s
        piece[at:] = len(row) + torch.arange(PACKED_ROW - at) // tp.PAD_SLICE
        q = torch.randn(PACKED_ROW, 4, 32, generator=g, dtype=torch.float64)
        k, v = (torch.randn(PACKED_ROW, 2, 32, generator=g, dtype=torch.float64) for _ in "kv")
        i = torch.arange(PACKED_ROW)
        mask = (piece[:, None] == piece[None, :]) & (i[None, :] <= i[:, None])
        dense = F.scaled_dot_product_attention(
            q.transpose(0, 1)[None],
            k.transpose(0, 1)[None],
            v.transpose(0, 1)[None],
            attn_mask=mask[None],
            scale=32**-0.5,
            enable_gqa=True,
        )[0].transpose(0, 1)
        torch.testing.assert_close(ctx.attention(0, q, k, v), dense, rtol=1e-10, atol=1e-12)


PACKED_CASES = [
    (s, ckpt)
    for s in ("1f1b", "gpipe", "interleaved_1f1b", "interleaved_zb", "zbv")
    for ckpt in (0, 1)
]


def packed_rank(cases):
    """One rank (run_ranks body): each case's packed step against the unpipelined reference on
    the same rows; returns, per case, the loss and the largest relative gradient error."""
    import torch.distributed as dist
    from lib import torch_packed as tp

    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    config = llama.LlamaConfig.tiny(layers=4, dtype=torch.float64)
    batch = _packed_batch(config)
    rows = tp.pack_rows(PACKED_LENGTHS, PACKED_ROW)
    tokens, targets = tp.row_tensors(batch, rows, PACKED_ROW)
    model = llama.build_full_model(config, seed=0)
    model.attention_fn = llama.varlen_causal_attention  # SDPA per piece: another kernel
    normaliser = llama.count_targets(PACKED_LENGTHS)
    want = sum(
        llama.chunk_loss(model(tokens[r], tp.row_context(row, PACKED_ROW)), targets[r], normaliser)
        for r, row in enumerate(rows)
    )
    want.backward()
    grads = {n: p.grad for n, p in model.named_parameters()}
    out = []
    for schedule, ckpt in cases:
        peer = tp.TorchPacked(
            config,
            dist.group.WORLD,
            schedule=schedule,
            row_length=PACKED_ROW,
            checkpoint_layers=ckpt,
        )
        result = peer.step(batch)
        errors = [
            float((p.grad - grads[n]).norm() / grads[n].norm())
            for m in peer.modules
            for n, p in m.stage.named_parameters()
        ]
        out.append(
            dict(
                loss=result["loss"],
                want=float(want),
                grad_error=max(errors),
                cut=result["cut_tokens"],
            )
        )
    dist.destroy_process_group()
    return out


@pytest.mark.slow  # 2 processes over every packed case
def test_packed_peer_matches_unpipelined_reference():
    runtime = ROOT / "tests" / "python" / "runtime"  # the ranks' launcher, as the runtime tests'
    sys.path.insert(0, str(runtime))
    from launcher import check_all_ok, run_ranks

    here = Path(__file__).resolve().parent
    path = os.pathsep.join(str(p) for p in (ROOT / "python", runtime, here, ROOT / "benchmarks"))
    values = check_all_ok(
        run_ranks("test_peers:packed_rank", 2, dict(cases=PACKED_CASES), 240, dict(PYTHONPATH=path))
    )
    for rank, per_case in enumerate(values):
        for (schedule, ckpt), r in zip(PACKED_CASES, per_case):
            what = f"rank {rank}, {schedule}, checkpoint_layers {ckpt}"
            assert r["loss"] == pytest.approx(r["want"], rel=1e-12), what
            assert r["grad_error"] < 1e-10, what
            assert r["cut"] > 0  # the batch does cut documents
