"""The LLaMA-style stage model: parity with transformers' LlamaForCausalLM, stage splits, rotary
offsets and the chunked loss. Run with PYTHONPATH=python."""

import random

import hf_bodies
import pytest
import torch
import torch.nn.functional as F
from llama_fixtures import model_with_random_norms, rel

from infinipipe import Error
from infinipipe.models import llama
from infinipipe.models.llama import (
    IGNORE_INDEX,
    ChunkContext,
    LlamaConfig,
    build_full_model,
    build_stage,
    chunk_loss,
    chunk_targets,
    count_targets,
    even_layer_split,
    from_hf_state_dict,
    reference_chunk_attention,
    reference_loss,
    split_stages,
    stage_state_dict,
    to_hf_state_dict,
)

SMALL = dict(vocab=97, hidden=64, layers=4, heads=4, kv_heads=2, ffn=96)


def random_sequences(lengths, vocab, seed):
    g = torch.Generator().manual_seed(seed)
    return [torch.randint(0, vocab, (n,), generator=g) for n in lengths]


def random_chunks(lengths, seed):
    """An arbitrary split of a batch into chunks: every sequence cut at random points into
    slices, slices interleaved across sequences (keeping each sequence's order), and the result
    cut into chunks at random points. Returns lists of (seq_id, start, length)."""
    rng = random.Random(seed)
    pending = []
    for seq_id, n in enumerate(lengths):
        cuts = sorted(rng.sample(range(1, n), k=min(n - 1, rng.randint(0, 3)))) if n > 1 else []
        bounds = [0] + cuts + [n]
        pending.append([(seq_id, a, b - a) for a, b in zip(bounds, bounds[1:])])
    order = []
    while any(pending):
        queue = rng.choice([q for q in pending if q])
        order.append(queue.pop(0))
    chunks, current = [], []
    for s in order:
        current.append(s)
        if rng.random() < 0.4:
            chunks.append(current)
            current = []
    if current:
        chunks.append(current)
    return chunks


def chunk_context(chunk):
    """The context of a chunk of (seq_id, start, length) slices."""
    return ChunkContext([(i, a, a + n) for i, a, n in chunk])


# --------------------------------------------------------------------------------------------
# transformers parity


@pytest.fixture
def hf_full_precision(monkeypatch):
    """transformers' RMSNorm and rotary tables in float64 for a float64 model (hf_bodies)."""
    for cls, attr, fn in hf_bodies.full_precision_patches():
        monkeypatch.setattr(cls, attr, fn)


def hf_model(ours, config):
    import transformers  # pinned in tests/python/requirements.txt

    model = transformers.LlamaForCausalLM(config.to_hf()).to(config.dtype)
    model.load_state_dict(to_hf_state_dict(ours.state_dict()), strict=True)
    return model


def hf_logits(model, tokens):
    # One sequence per call: batch of one, explicit positions, no padding mask needed.
    positions = torch.arange(tokens.numel())[None]
    return model(input_ids=tokens[None], position_ids=positions, use_cache=False).logits[0]


TOL = {torch.float64: 1e-9, torch.float32: 1e-5}


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32], ids=["f64", "f32"])
def test_logits_match_transformers_one_sequence(dtype, request):
    if dtype == torch.float64:
        request.getfixturevalue("hf_full_precision")
    config = LlamaConfig.tiny(dtype=dtype)
    ours = model_with_random_norms(config, seed=3)
    theirs = hf_model(ours, config)
    tokens = random_sequences([45], config.vocab, seed=4)[0]
    with torch.no_grad():
        expected = hf_logits(theirs, tokens)
        got = ours(tokens, ChunkContext.packed([tokens.numel()]))
    assert got.dtype == dtype and got.shape == expected.shape
    assert rel(got, expected) < TOL[dtype]


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32], ids=["f64", "f32"])
def test_packed_logits_match_transformers_per_sequence(dtype, request):
    if dtype == torch.float64:
        request.getfixturevalue("hf_full_precision")
    config = LlamaConfig(**SMALL, dtype=dtype)
    ours = model_with_random_norms(config, seed=5)
    theirs = hf_model(ours, config)
    seqs = random_sequences([7, 1, 23, 12], config.vocab, seed=6)
    tokens, ctx = llama.pack_sequences(seqs)
    with torch.no_grad():
        expected = torch.cat([hf_logits(theirs, s) for s in seqs])
        got = ours(tokens, ctx)
    assert rel(got, expected) < TOL[dtype]


def test_gradients_match_transformers_float64(hf_full_precision):
    config = LlamaConfig(**SMALL, dtype=torch.float64)
    ours = model_with_random_norms(config, seed=7)
    theirs = hf_model(ours, config)
    seqs = random_sequences([9, 30, 2, 14], config.vocab, seed=8)

    loss = reference_loss(ours, seqs)
    loss.backward()

    # Independent of our loss helper: plain shifted cross-entropy per sequence, mean over all
    # target tokens of the batch.
    total = sum(F.cross_entropy(hf_logits(theirs, s)[:-1], s[1:], reduction="sum") for s in seqs)
    hf_loss = total / sum(s.numel() - 1 for s in seqs)
    hf_loss.backward()

    assert rel(loss.detach(), hf_loss.detach()) < 1e-12
    hf_grads = from_hf_state_dict({n: p.grad for n, p in theirs.named_parameters()})
    names = [n for n, _ in ours.named_parameters()]
    assert sorted(names) == sorted(hf_grads)
    for name, p in ours.named_parameters():
        assert p.grad is not None, name
        assert rel(p.grad, hf_grads[name]) < 1e-9, name


def test_config_shapes_and_transformers_config():
    tiny = LlamaConfig.tiny()
    assert (tiny.layers, tiny.hidden, tiny.heads, tiny.kv_heads, tiny.ffn, tiny.vocab) == (
        8,
        128,
        4,
        2,
        352,
        512,
    )
    assert tiny.head_dim == 32 and tiny.rope_theta == 10000.0 and tiny.rms_eps == 1e-6
    import transformers  # noqa: F401  (pinned in tests/python/requirements.txt)

    hf = tiny.to_hf()
    assert (
        hf.num_hidden_layers,
        hf.hidden_size,
        hf.num_attention_heads,
        hf.num_key_value_heads,
        hf.intermediate_size,
        hf.vocab_size,
    ) == (8, 128, 4, 2, 352, 512)
    assert hf.tie_word_embeddings is False and hf.attention_bias is False
    assert hf.mlp_bias is False and hf.hidden_act == "silu"
    assert hf.rope_parameters["rope_theta"] == 10000.0
    assert LlamaConfig.from_hf(hf) == tiny


def test_state_dict_names_round_trip():
    model = build_full_model(LlamaConfig(**SMALL))
    state = model.state_dict()
    hf = to_hf_state_dict(state)
    assert "model.embed_tokens.weight" in hf and "lm_head.weight" in hf
    assert "model.norm.weight" in hf
    for i in range(SMALL["layers"]):
        for part in (
            "self_attn.q_proj",
            "self_attn.k_proj",
            "self_attn.v_proj",
            "self_attn.o_proj",
            "mlp.gate_proj",
            "mlp.up_proj",
            "mlp.down_proj",
            "input_layernorm",
            "post_attention_layernorm",
        ):
            assert f"model.layers.{i}.{part}.weight" in hf
    assert len(hf) == len(state)
    assert from_hf_state_dict(hf).keys() == state.keys()


# --------------------------------------------------------------------------------------------
# Stages


@pytest.mark.parametrize(
    "config,split",
    [
        (LlamaConfig(**SMALL, dtype=torch.float64), [1, 2, 1]),
        (LlamaConfig.tiny(), 3),
        (LlamaConfig.tiny(), 1),
    ],
)
def test_chained_stages_equal_full_model(config, split):
    full = build_full_model(config, seed=11)
    stages = split_stages(config, split, seed=11)
    counts = even_layer_split(config.layers, split) if isinstance(split, int) else split
    assert [len(s.layer_indices) for s in stages] == counts
    assert stages[0].has_embedding and stages[-1].has_head
    assert not any(s.has_embedding for s in stages[1:])
    assert not any(s.has_head for s in stages[:-1])

    # Same seed: each stage holds exactly its slice of the full model's weights.
    full_state = full.state_dict()
    for s in stages:
        expected = stage_state_dict(full_state, s.layer_indices)
        got = s.state_dict()
        assert got.keys() == expected.keys()
        assert all(torch.equal(got[k], expected[k]) for k in got)
        assert (
            build_stage(config, split, stages.index(s), seed=11).state_dict().keys() == got.keys()
        )

    seqs = random_sequences([13, 4, 20], config.vocab, seed=12)
    tokens, ctx = llama.pack_sequences(seqs)
    with torch.no_grad():
        expected = full(tokens, ctx)
        x = tokens
        for s in stages:
            x = s(x, ctx)
        assert torch.equal(x, expected)

        # Piece by piece, as the executor drives a stage.
        x = tokens
        for s in stages:
            if s.has_embedding:
                x = s.embed(x)
            for i in s.layer_indices:
                x = s.layer(i, x, ctx)
            if s.has_head:
                x = s.head(x)
        assert torch.equal(x, expected)


def test_stage_loads_weights_from_full_state():
    config = LlamaConfig(**SMALL)
    full = model_with_random_norms(config, seed=2)
    stage = llama.LlamaStage(config, 1, 3, has_embedding=False, has_head=False, seed=None)
    stage.load_state_dict(stage_state_dict(full.state_dict(), range(1, 3)), strict=True)
    assert sorted(stage.state_dict()) == sorted(
        k for k in full.state_dict() if k.startswith(("layers.1.", "layers.2."))
    )


def test_even_layer_split_matches_planner():
    assert even_layer_split(8, 3) == [2, 3, 3]
    assert even_layer_split(8, 2) == [4, 4]
    assert even_layer_split(7, 4) == [1, 2, 2, 2]
    assert even_layer_split(10, 4) == [2, 3, 3, 2]
    with pytest.raises(ValueError, match="every stage needs a layer"):
        even_layer_split(2, 3)


# --------------------------------------------------------------------------------------------
# Rotary positions


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32, torch.bfloat16])
def test_rotary_with_offset_equals_full_sequence_restricted(dtype):
    head_dim, n = 32, 300
    inv_freq = llama.rotary_inv_freq(head_dim, 10000.0, dtype)
    cos_full, sin_full = llama.rotary_cos_sin(torch.arange(n), inv_freq, dtype)
    x = torch.randn(n, 4, head_dim, dtype=torch.float64).to(dtype)
    full = llama.apply_rotary(x, cos_full, sin_full)
    for start, end in [(0, 1), (0, n), (17, 18), (100, 233), (299, 300)]:
        cos, sin = llama.rotary_cos_sin(torch.arange(start, end), inv_freq, dtype)
        assert torch.equal(cos, cos_full[start:end]) and torch.equal(sin, sin_full[start:end])
        assert torch.equal(llama.apply_rotary(x[start:end], cos, sin), full[start:end])

    # A chunk's positions: each slice counts from its own start.
    ctx = ChunkContext([(5, 100, 103), (2, 0, 2), (9, 7, 8)])
    assert ctx.positions.tolist() == [100, 101, 102, 0, 1, 7]
    assert [tuple(s) for s in ctx.slices] == [(5, 100, 103), (2, 0, 2), (9, 7, 8)]
    assert ctx.num_tokens == 6


# --------------------------------------------------------------------------------------------
# Loss over chunks


@pytest.mark.parametrize("seed", range(4))
def test_chunk_loss_sums_to_unpipelined_mean(seed):
    config = LlamaConfig(**SMALL, dtype=torch.float64)
    model = build_full_model(config, seed=seed)
    lengths = [1, 17, 5, 30, 2][: 3 + seed % 3]
    seqs = random_sequences(lengths, config.vocab, seed=seed)
    with torch.no_grad():
        mean = reference_loss(model, seqs)
        per_seq = [model(s, ChunkContext.packed([s.numel()])) for s in seqs]
        normaliser = count_targets(lengths)
        total = 0.0
        chunks = random_chunks(lengths, seed)
        assert sum(len(c) for c in chunks) >= len(lengths)
        for chunk in chunks:
            ctx = chunk_context(chunk)
            logits = torch.cat([per_seq[i][a : a + n] for i, a, n in chunk])
            total = total + chunk_loss(logits, chunk_targets(ctx, seqs), normaliser)
    assert rel(total, mean) < 1e-12


def test_chunk_targets_cross_slice_boundaries():
    seqs = {4: torch.tensor([10, 11, 12, 13, 14]), 9: [20, 21]}
    ctx = ChunkContext([(4, 0, 2), (9, 0, 2), (4, 2, 5)])
    assert chunk_targets(ctx, seqs).tolist() == [11, 12, 21, IGNORE_INDEX, 13, 14, IGNORE_INDEX]
    assert count_targets([5, 2, 1]) == 5


@pytest.mark.parametrize("seed", range(3))
def test_chunked_run_with_reference_chunk_attention_equals_unpipelined(seed):
    """The attention seam end to end: chunks of arbitrary slices run in order through chained
    stages, each slice attending to its sequence's earlier keys/values, give the unpipelined
    loss and gradients."""
    config = LlamaConfig(**SMALL, dtype=torch.float64)
    full = model_with_random_norms(config, seed=20 + seed)
    lengths = [26, 3, 11, 1, 8]
    seqs = random_sequences(lengths, config.vocab, seed=30 + seed)
    mean = reference_loss(full, seqs)
    mean.backward()
    expected = {n: p.grad.clone() for n, p in full.named_parameters()}

    stages = split_stages(config, [2, 1, 1], seed=None)
    for s in stages:
        s.load_state_dict(stage_state_dict(full.state_dict(), s.layer_indices))
        s.attention_fn = reference_chunk_attention
    state, total = {}, 0.0
    normaliser = count_targets(lengths)
    for chunk in random_chunks(lengths, seed):
        ctx = chunk_context(chunk)
        ctx.state = state
        x = torch.cat([seqs[i][a : a + n] for i, a, n in chunk])
        for s in stages:
            x = s(x, ctx)
        total = total + chunk_loss(x, chunk_targets(ctx, seqs), normaliser)
    total.backward()

    assert rel(total.detach(), mean.detach()) < 1e-12
    for s in stages:
        for name, p in s.named_parameters():
            assert rel(p.grad, expected[name]) < 1e-9, name


# --------------------------------------------------------------------------------------------
# Errors


def test_clear_errors():
    config = LlamaConfig(**SMALL)
    model = build_full_model(config)
    with pytest.raises(RuntimeError, match="no K/V buffer"):  # a slice needs K/V buffers
        model(torch.zeros(3, dtype=torch.long), ChunkContext([(0, 4, 7)]))
    with pytest.raises(ValueError, match="outside the vocabulary"):
        model(torch.tensor([1, 97]), ChunkContext.packed([2]))
    with pytest.raises(Error, match="empty or negative"):
        ChunkContext([(0, 0, 2), (3, 2, 1)])
    with pytest.raises(Error, match="target count must be positive"):
        chunk_loss(torch.zeros(1, 5), torch.tensor([IGNORE_INDEX]), 0)
    with pytest.raises(Error, match="outside sequence 0 of 2 tokens"):
        chunk_targets(ChunkContext([(0, 1, 3)]), [[1, 2]])
    with pytest.raises(ValueError, match="sum to 4"):
        split_stages(config, [1, 2])
    with pytest.raises(ValueError, match="last_layer is exclusive"):
        llama.LlamaStage(config, 2, 2, False, False)
    with pytest.raises(ValueError, match="kv_heads"):
        LlamaConfig(vocab=10, hidden=64, layers=1, heads=4, kv_heads=3, ffn=8)
    stage = split_stages(config, 2)[1]
    with pytest.raises(IndexError, match="not on this stage"):
        stage.layer(0, torch.zeros(1, 64), ChunkContext.packed([1]))
    state = {}
    with pytest.raises(ValueError, match="covered"):
        model.attention_fn = reference_chunk_attention
        ctx = ChunkContext([(0, 4, 7)])
        ctx.state = state
        model(torch.zeros(3, dtype=torch.long), ctx)
