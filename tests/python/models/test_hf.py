"""Unmodified transformers models (LlamaForCausalLM, Qwen2ForCausalLM, MistralForCausalLM)
trained through InfiniPipe's executor (infinipipe.models.hf), against transformers' own
unpipelined forward and backward.

float64 throughout, relative error < 1e-9 (max |ours - reference| / max |reference|). The float64
cases patch exactly two forwards of transformers (hf_bodies.full_precision_patches): RMSNorm
and the rotary tables, which transformers computes in float32 on purpose even in a float64
model. The reference is transformers' forward, one sequence at a time, with the loss
`model(input_ids, labels=...)` computes (summed over the batch's target tokens, divided by
their count), taken in float64 from the logits because transformers' loss upcasts to float32
only. Needs infinipipe._C built with INFINIPIPE_WITH_TORCH=ON and transformers (pinned in
tests/python/requirements.txt).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import hf_bodies
import pytest
import torch
import torch.nn.functional as F
import transformers
from hf_bodies import build_model, make_batch

from infinipipe import Error
from infinipipe.models import hf
from infinipipe.models.hf import files
from infinipipe.models.llama import ChunkContext

HERE = Path(__file__).resolve().parent
RUNTIME_TESTS = HERE.parent / "runtime"
sys.path.insert(0, str(RUNTIME_TESTS))
from launcher import REPO, check_all_ok, run_ranks  # noqa: E402

TOLERANCE = 1e-9
ARCHS = list(hf_bodies.ARCHS)


@pytest.fixture
def float64_exact(monkeypatch):
    for cls, attr, fn in hf_bodies.full_precision_patches():
        monkeypatch.setattr(cls, attr, fn)


def rel(a: torch.Tensor, b: torch.Tensor) -> float:
    a, b = a.detach(), b.detach()
    return float((a - b).abs().max() / b.abs().max().clamp_min(1e-300))


def reference(model, batch: list[torch.Tensor]) -> tuple[float, dict[str, torch.Tensor]]:
    """transformers' loss of the batch (mean over all its target tokens) and the gradients of
    every parameter by name (a tied LM head under its own name too)."""
    model.zero_grad(set_to_none=True)
    total = sum(s.numel() - 1 for s in batch)
    loss = 0.0
    for seq in batch:
        logits = model(input_ids=seq[None], use_cache=False).logits[0]
        loss = loss + F.cross_entropy(logits[:-1], seq[1:], reduction="sum") / total
        # What transformers' own loss gives (upcast to float32, hence the looser bound; a 16-bit
        # model's logits are rounded before the upcast, so it is not compared).
        if logits.dtype in (torch.float32, torch.float64):
            with torch.no_grad():
                theirs = model(input_ids=seq[None], labels=seq[None], num_items_in_batch=total)
                mine = F.cross_entropy(logits[:-1], seq[1:], reduction="sum").item() / total
            assert abs(theirs.loss.item() - mine) < 1e-5 * max(1.0, abs(mine))
    loss.backward()
    grads = {n: p.grad.clone() for n, p in model.named_parameters()}
    if model.config.tie_word_embeddings:
        grads["lm_head.weight"] = grads["model.embed_tokens.weight"]
    return loss.item(), grads


def run_stages(stages, batch):
    """Every stage's pieces in order on one chunk of whole sequences; returns the logits."""
    ctx = ChunkContext.packed([s.numel() for s in batch])
    hidden = stages[0].embed(torch.cat(batch), ctx)
    for stage in stages:
        for i in range(stage.num_layers):
            hidden = stage.layer(i, hidden, ctx)
    return stages[-1].head(hidden, ctx)


def batch_loss(logits, batch):
    targets = torch.cat([torch.cat([s[1:], torch.tensor([-100])]) for s in batch])
    return F.cross_entropy(logits, targets, reduction="sum") / sum(s.numel() - 1 for s in batch)


@pytest.mark.parametrize("arch", ARCHS)
def test_stages_match_transformers(arch, float64_exact):
    """Three stage objects of an in-memory model, run piece by piece on packed whole sequences:
    logits, loss and every gradient equal transformers'. A tied embedding (Qwen2) gets its two
    gradients summed as the Trainer does through tied_parameters()."""
    model = build_model(arch)
    stages = [hf.from_model(model, [1, 2, 1], i, device="cpu") for i in range(3)]
    batch = make_batch([9, 4, 15], seed=3)
    loss = batch_loss(run_stages(stages, batch), batch)
    loss.backward()
    ref_loss, ref_grads = reference(model, batch)
    assert abs(loss.item() - ref_loss) < TOLERANCE * abs(ref_loss)
    if model.config.tie_word_embeddings:
        (embed, peer0), (head, peer2) = stages[0].tied_parameters() + stages[2].tied_parameters()
        assert (peer0, peer2) == (2, 0) and stages[1].tied_parameters() == []
        summed = embed.grad + head.grad
        embed.grad, head.grad = summed, summed.clone()  # what the Trainer's exchange does
    else:
        assert all(s.tied_parameters() == [] for s in stages)
    for stage in stages:
        for name, p in stage.named_parameters():
            assert rel(p.grad, ref_grads[name]) < TOLERANCE, (name, rel(p.grad, ref_grads[name]))
    names = {n for s in stages for n, _ in s.named_parameters()}
    assert names == set(ref_grads)
    assert model.config._attn_implementation == "sdpa"  # the model given is left as it was


def test_one_stage_ties_one_parameter():
    model = build_model("qwen2")
    stage = hf.from_model(model, [4], 0, device="cpu")
    assert stage.lm_head.weight is stage.model.embed_tokens.weight
    assert stage.tied_parameters() == []
    assert stage.model.embed_tokens.weight is not model.model.embed_tokens.weight  # a copy


def save_sharded(model, directory: Path) -> Path:
    """transformers' own save_pretrained, in several shards with an index."""
    model.save_pretrained(directory, max_shard_size="100KB")
    assert (directory / files.INDEX).is_file()
    return directory


@pytest.mark.parametrize("arch", ["llama", "qwen2"])
def test_meta_build_reads_only_its_stage(arch, tmp_path, monkeypatch):
    """Built from a sharded save_pretrained directory, stage 1 of [1, 2, 1] reads exactly its
    own tensors (each once) and holds exactly the model's values; a last stage of a tied model
    takes its LM head from the saved embedding (the files leave lm_head out)."""
    model = build_model(arch)
    directory = save_sharded(model, tmp_path / arch)
    read: list[str] = []
    original = files.read_tensors

    def spy(available, names):
        for name, tensor in original(available, names):
            read.append(name)
            yield name, tensor

    monkeypatch.setattr(files, "read_tensors", spy)
    stage = hf.from_pretrained(directory, [1, 2, 1], 1, dtype=torch.float64, device="cpu")
    expected = {
        n for n in model.state_dict() if n.startswith(("model.layers.1.", "model.layers.2."))
    }
    assert sorted(read) == sorted(expected)
    state = model.state_dict()
    for name, p in stage.named_parameters():
        assert p.device.type == "cpu" and p.dtype == torch.float64
        assert torch.equal(p.detach(), state[name]), name
    assert set(stage.state_dict()) == expected
    assert stage.config._attn_implementation == hf.attention.NAME

    read.clear()
    last = hf.from_pretrained(directory, [1, 2, 1], 2, dtype=torch.float32, device="cpu")
    head_source = (
        "model.embed_tokens.weight" if model.config.tie_word_embeddings else "lm_head.weight"
    )
    assert sorted(read) == sorted(
        [n for n in state if n.startswith("model.layers.3.")] + ["model.norm.weight", head_source]
    )
    assert torch.equal(last.lm_head.weight, state[head_source].float())


@pytest.mark.parametrize("arch", ARCHS)
def test_save_then_from_pretrained_gives_the_same_logits(arch, tmp_path):
    """Stages saved together (one shard per stage and an index; one file for a single stage)
    load with AutoModelForCausalLM.from_pretrained into the same weights and logits."""
    model = build_model(arch)
    tokens = make_batch([12], seed=4)[0][None]
    expected = model(input_ids=tokens).logits
    for split in ([2, 2], [4]):
        stages = [hf.from_model(model, split, i, device="cpu") for i in range(len(split))]
        out = hf.save_pretrained(stages, tmp_path / f"{arch}-{len(split)}")
        saved = sorted(p.name for p in out.glob("*.safetensors"))
        if len(split) == 1:
            assert saved == ["model.safetensors"] and not (out / files.INDEX).exists()
        else:
            index = json.loads((out / files.INDEX).read_text())
            assert sorted(set(index["weight_map"].values())) == saved and len(saved) == 2
            assert ("lm_head.weight" in index["weight_map"]) != model.config.tie_word_embeddings
        loaded = transformers.AutoModelForCausalLM.from_pretrained(out, dtype=torch.float64)
        assert type(loaded) is type(model)
        assert torch.equal(loaded(input_ids=tokens).logits, expected)
        for name, value in model.state_dict().items():
            assert torch.equal(loaded.state_dict()[name], value), name
        with pytest.raises(Error, match="exists"):
            hf.save_pretrained(stages, out)


# --------------------------------------------------------------------------------------------
# Refusals


def test_unsupported_model_class_is_named():
    config = hf_bodies.hf_config("llama", num_labels=2)
    model = transformers.LlamaForSequenceClassification(config)
    with pytest.raises(
        Error,
        match="LlamaForSequenceClassification is not supported.*LlamaForCausalLM, Qwen2ForCausalLM, MistralForCausalLM",
    ):
        hf.from_model(model, [2, 2], 0)
    with pytest.raises(Error, match="LlamaForSequenceClassification"):
        hf.stage_factory(model)


@pytest.mark.parametrize(
    "overrides, message",
    [
        (dict(head_dim=32), "head_dim 32 x 4 heads != hidden_size 64"),
        (dict(attention_dropout=0.1), "attention_dropout=0.1 is not supported"),
        (
            dict(rope_parameters=dict(rope_type="dynamic", factor=2.0, rope_theta=10000.0)),
            "rope_type 'dynamic' is not supported",
        ),
    ],
    ids=["head_dim", "attention_dropout", "dynamic_rope"],
)
def test_config_refusals_name_the_feature(overrides, message):
    model = build_model("llama", dtype=torch.float32, **overrides)
    for call in (
        lambda: hf.model_shape(model),
        lambda: hf.stage_factory(model),
        lambda: hf.from_model(model, [2, 2], 1),
    ):
        with pytest.raises(Error, match=message):
            call()


def test_sliding_window_runs_inside_the_window_only(float64_exact):
    """Mistral's window of 8: a sequence of 8 tokens is full causal attention (equal to
    transformers'), one of 9 is refused. Qwen2's sliding layers (from max_window_layers 2) are
    refused by layer, full-attention layers run."""
    model = build_model("mistral", sliding_window=8)
    stages = [hf.from_model(model, [4], 0, device="cpu")]
    seq = make_batch([8], seed=5)
    assert rel(run_stages(stages, seq), model(input_ids=seq[0][None]).logits[0]) < TOLERANCE
    with pytest.raises(
        Error,
        match="sliding-window attention over a sequence longer than its window \\(9 tokens, window 8\\)",
    ):
        run_stages(stages, make_batch([9], seed=5))

    qwen = build_model("qwen2", use_sliding_window=True, sliding_window=8, max_window_layers=2)
    stages = [hf.from_model(qwen, [2, 2], i, device="cpu") for i in range(2)]
    batch = make_batch([12], seed=5)
    ctx = ChunkContext.packed([12])
    hidden = stages[0].embed(batch[0], ctx)
    for i in range(2):  # layers 0 and 1: full attention
        hidden = stages[0].layer(i, hidden, ctx)
    with pytest.raises(Error, match="transformers layer 2: sliding-window"):
        stages[1].layer(0, hidden, ctx)


def test_attention_outside_a_stage_and_bad_directories(tmp_path):
    model = build_model("llama", dtype=torch.float32)
    model.config._attn_implementation = hf.attention.NAME
    with pytest.raises(Error, match="runs only inside an InfiniPipe stage"):
        model(input_ids=torch.tensor([[1, 2, 3]]))
    with pytest.raises(Error, match="holds no config.json"):
        hf.stage_factory(tmp_path)
    model.config.save_pretrained(tmp_path)
    with pytest.raises(Error, match="neither model.safetensors.index.json nor model.safetensors"):
        hf.from_pretrained(tmp_path, [4], 0, device="cpu")


# --------------------------------------------------------------------------------------------
# Pipelined steps on real processes


CASES = [
    # Every sequence cut into two slices, no recompute.
    dict(name="seq1f1b-k2", lengths=[50, 7, 13, 21], seed=1, plan=dict(method="seq1f1b", k=2)),
    # Chunks of 16 tokens: the long sequence split, short ones packed; one layer recomputed on
    # every stage and chunk.
    dict(
        name="chunkflow-16-recompute",
        lengths=[50, 7, 13, 21],
        seed=2,
        plan=dict(method="chunkflow", chunk_tokens=16, recompute=1),
    ),
]


@pytest.mark.parametrize("stages", [2, pytest.param(4, marks=pytest.mark.slow)])
def test_pipelined_steps_match_transformers(stages, tmp_path, float64_exact):
    check_pipelined_steps(stages, tmp_path, ARCHS)


def test_pipelined_steps_with_spread_head_match_transformers(tmp_path, float64_exact):
    """The same with the spread head (docs/design.md, "Spread head") on 2 stages: every stage
    holds the head's replica (hf.stage_factory(..., spread_head=True)), each chunk's head runs
    on the stages in turn, and after the step every replica holds the unpipelined head's
    gradient; the save keeps the last stage's copy. Models with untied embeddings (tied ones are
    refused: see test_spread_head_refuses_tied_embeddings)."""
    untied = [a for a in ARCHS if not build_model(a).config.tie_word_embeddings]
    assert untied
    check_pipelined_steps(2, tmp_path, untied, spread_head=True)


def test_spread_head_refuses_tied_embeddings(tmp_path):
    tied = [a for a in ARCHS if build_model(a).config.tie_word_embeddings]
    assert tied
    with pytest.raises(Error, match="tie_word_embeddings"):
        hf.build_stage(build_model(tied[0]), 2, 0, spread_head=True)


def check_pipelined_steps(stages, tmp_path, archs, spread_head=False):
    """Each architecture, built on every rank from a sharded save_pretrained directory, runs
    each case as one Trainer step (the executor, Gloo): the loss and every parameter's gradient
    equal transformers'; Qwen2's tied embedding ends with the summed gradient on both stages.
    Then every rank saves its stage (hf.save_stage) and from_pretrained gives the same logits."""
    models = {arch: build_model(arch) for arch in archs}
    sources = {arch: str(save_sharded(m, tmp_path / "in" / arch)) for arch, m in models.items()}
    results = run_ranks(
        "hf_bodies:pipeline_parity",
        stages,
        args=dict(sources=sources, cases=CASES, out=str(tmp_path / "out"), spread_head=spread_head),
        timeout_s=150,
        extra_env={"PYTHONPATH": ":".join([str(REPO / "python"), str(RUNTIME_TESTS), str(HERE)])},
    )
    records = check_all_ok(results)
    for arch, model in models.items():
        for case in CASES:
            ref_loss, ref_grads = reference(model, make_batch(case["lengths"], case["seed"]))
            seen = set()
            for rank, by_case in enumerate(records):
                record = by_case[arch, case["name"]]
                assert abs(record["loss"] - ref_loss) < TOLERANCE * ref_loss, (arch, rank)
                for name, grad in record["grads"].items():
                    error = rel(grad, ref_grads[name])
                    assert error < TOLERANCE, (arch, case["name"], rank, name, error)
                    seen.add(name)
                tied = model.config.tie_word_embeddings and rank in (0, stages - 1)
                assert len(record["tied"]) == int(tied)
                # With the spread head every rank's replica holds the whole head gradient.
                assert ("lm_head.weight" in record["grads"]) == (spread_head or rank == stages - 1)
            assert seen == set(ref_grads), arch
            kinds = set(records[0][arch, case["name"]]["kinds"])
            recompute = records[0][arch, case["name"]]["recompute"]
            assert "split" in kinds, (case["name"], kinds)
            if case["plan"].get("recompute"):
                assert {"packed", "hybrid"} & kinds and all(
                    n >= 1 for row in recompute for n in row
                )
        tokens = make_batch([20], seed=9)[0][None]
        loaded = transformers.AutoModelForCausalLM.from_pretrained(
            tmp_path / "out" / arch, dtype=torch.float64
        )
        assert torch.equal(loaded(input_ids=tokens).logits, model(input_ids=tokens).logits)
