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
