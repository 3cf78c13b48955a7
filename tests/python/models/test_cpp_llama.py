"""The C++ LibTorch LlamaStage against the Python LlamaStage: same weights by name, same
outputs and gradients (float64, relative error < 1e-9), piece by piece (embed, every layer,
head) on a chunk of whole sequences and on a hybrid chunk holding a later slice of a split
sequence; and a 2-process pipelined step with the C++ stage on every rank against the
unpipelined Python model. Needs infinipipe._C built with INFINIPIPE_WITH_TORCH=ON."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

from infinipipe import _C
from infinipipe.models import cpp, llama

HERE = Path(__file__).resolve().parent
RUNTIME_TESTS = HERE.parent / "runtime"
sys.path.insert(0, str(RUNTIME_TESTS))
import bodies  # noqa: E402
from launcher import REPO, check_all_ok, run_ranks  # noqa: E402
from llama_fixtures import model_with_random_norms, rel  # noqa: E402

CONFIG = llama.LlamaConfig(
    vocab=97, hidden=32, layers=3, heads=4, kv_heads=2, ffn=64, dtype=torch.float64
)
TOLERANCE = 1e-9


def python_model(seed: int = 0) -> llama.LlamaStage:
    """The full Python model with norm gains away from one, so that they matter."""
    return model_with_random_norms(CONFIG, seed, noise_dtype=torch.float64)


def cpp_copy(model: llama.LlamaStage) -> _C.models.LlamaStage:
    stage = cpp.stage(
        CONFIG, model.first_layer, model.last_layer, model.has_embedding, model.has_head, seed=None
    )
    return cpp.load_from(stage, model)


def test_names_and_seeded_weights_match_python():
    """Every split's C++ stages hold the Python stages' parameters: same names in the same
    order, and the seeded initialisation gives bit-identical weights."""
    for split in ([3], [1, 2], [1, 1, 1]):
        for index, py_stage in enumerate(llama.split_stages(CONFIG, split, seed=5)):
            c_stage = cpp.build_stage(CONFIG, split, index, seed=5)
            py_params = list(py_stage.named_parameters())
            c_params = c_stage.named_parameters()
            assert [n for n, _ in c_params] == [n for n, _ in py_params]
            for (name, c), (_, p) in zip(c_params, py_params):
                assert c.dtype == p.dtype and c.shape == p.shape, name
                assert torch.equal(c, p.detach()), name
                assert c.requires_grad, name
            assert c_stage.num_layers == len(py_stage.layer_indices)
            assert (c_stage.has_embedding, c_stage.has_head) == (
                index == 0,
                index == len(split) - 1,
            )


def test_load_state_dict_checks_names_and_shapes():
    model = python_model()
    stage = cpp.stage(CONFIG, 1, 2, False, False, seed=None)
    full = model.state_dict()
    with pytest.raises(_C.Error, match="unexpected weights"):
        stage.load_state_dict(full)
    stage.load_state_dict(full, strict=False)  # takes layer 1, ignores the rest
    assert torch.equal(
        stage.state_dict()["layers.1.mlp.up_proj.weight"], full["layers.1.mlp.up_proj.weight"]
    )
    with pytest.raises(_C.Error, match="lack"):
        stage.load_state_dict({"layers.1.mlp.up_proj.weight": full["layers.1.mlp.up_proj.weight"]})
    bad = llama.stage_state_dict(full, range(1, 2))
    bad["layers.1.mlp.up_proj.weight"] = torch.zeros(3, 3, dtype=torch.float64)
    with pytest.raises(_C.Error, match="shape"):
        stage.load_state_dict(bad)


def run_pieces(embed, layer, head, tokens, ctx, first_layer: int, layers: int):
    """embed, every layer, head; returns every piece's output."""
    outs = [embed(tokens, ctx)]
    for i in range(layers):
        outs.append(layer(i, outs[-1], ctx))
    outs.append(head(outs[-1], ctx))
    return outs


def python_pieces(model: llama.LlamaStage):
    return (
        lambda t, ctx: model.embed(t),
        lambda i, h, ctx: model.layer(model.first_layer + i, h, ctx),
        lambda h, ctx: model.head(h),
    )


def cpp_pieces(stage):
    return stage.embed, stage.layer, stage.head


def compare_grads(model: llama.LlamaStage, stage) -> None:
    c_grads = dict((n, p.grad) for n, p in stage.named_parameters())
    for name, p in model.named_parameters():
        assert c_grads[name] is not None, name
        assert rel(c_grads[name], p.grad) < TOLERANCE, (name, rel(c_grads[name], p.grad))


def test_whole_sequences_match_python_piece_by_piece():
    """A packed chunk of whole sequences: the Python model with its own (SDPA) attention, the
    C++ one with the chunk attention kernel; outputs of every piece and all gradients agree."""
    model = python_model()
    model.attention_fn = llama.varlen_causal_attention
    stage = cpp_copy(model)
    lengths = [7, 13, 4, 9]
    g = torch.Generator().manual_seed(3)
    tokens = torch.randint(0, CONFIG.vocab, (sum(lengths),), generator=g)
    py_ctx = llama.ChunkContext.packed(lengths)
    c_ctx = llama.ChunkContext.packed(lengths)
    assert torch.equal(c_ctx.positions, torch.cat([torch.arange(n) for n in lengths]))

    py_outs = run_pieces(*python_pieces(model), tokens, py_ctx, 0, CONFIG.layers)
    c_outs = run_pieces(*cpp_pieces(stage), tokens, c_ctx, 0, CONFIG.layers)
    for i, (c, p) in enumerate(zip(c_outs, py_outs)):
        assert c.shape == p.shape and c.dtype == p.dtype
        assert rel(c, p) < TOLERANCE, (i, rel(c, p))
    weights = torch.randn(py_outs[-1].shape, generator=g, dtype=torch.float64)
    (py_outs[-1] * weights).sum().backward()
    (c_outs[-1] * weights).sum().backward()
    compare_grads(model, stage)


def test_middle_stage_layers_and_input_gradient_match_python():
    """A stage without embedding or head: layer outputs and the gradient of its input."""
    model = python_model()
    py_stage = llama.LlamaStage(CONFIG, 1, 3, False, False, seed=None)
    py_stage.load_state_dict(llama.stage_state_dict(model.state_dict(), range(1, 3), False, False))
    py_stage.attention_fn = llama.varlen_causal_attention
    stage = cpp.stage(CONFIG, 1, 3, False, False, seed=None)
    cpp.load_from(stage, py_stage)
    lengths = [11, 6]
    py_ctx = llama.ChunkContext.packed(lengths)
    c_ctx = llama.ChunkContext.packed(lengths)
    g = torch.Generator().manual_seed(4)
    x = torch.randn(sum(lengths), CONFIG.hidden, generator=g, dtype=torch.float64)
    x_py, x_c = x.clone().requires_grad_(), x.clone().requires_grad_()
    h_py, h_c = x_py, x_c
    for i in range(2):
        h_py = py_stage.layer(1 + i, h_py, py_ctx)
        h_c = stage.layer(i, h_c, c_ctx)
        assert rel(h_c, h_py) < TOLERANCE, i
    weights = torch.randn(h_py.shape, generator=g, dtype=torch.float64)
    (h_py * weights).sum().backward()
    (h_c * weights).sum().backward()
    assert rel(x_c.grad, x_py.grad) < TOLERANCE
    compare_grads(py_stage, stage)


def test_slice_of_a_split_sequence_matches_python():
    """Sequence 0 (length 21) cut at 8: chunk A holds its first slice, chunk B its second slice
    (positions 8..20) and a whole sequence. The C++ stage runs the chunk attention with K/V
    buffers (backward of B before A, as the executor does); the Python model runs the plain
    autograd reference chunk attention and one backward. Every piece and gradient agree."""
    model = python_model()
    stage = cpp_copy(model)
    g = torch.Generator().manual_seed(5)
    seq0 = torch.randint(0, CONFIG.vocab, (21,), generator=g)
    seq1 = torch.randint(0, CONFIG.vocab, (6,), generator=g)
    chunk_a = [(0, 0, 8, 21)]  # (seq, start, end, seq_length)
    chunk_b = [(0, 8, 21), (1, 0, 6)]
    tokens_a, tokens_b = seq0[:8], torch.cat([seq0[8:], seq1])

    state: dict = {}
    model.attention_fn = llama.reference_chunk_attention
    py_a, py_b = llama.ChunkContext(chunk_a), llama.ChunkContext(chunk_b)
    py_a.state = py_b.state = state
    kv = [
        _C.SequenceKV(21, CONFIG.kv_heads, CONFIG.head_dim, torch.float64)
        for _ in range(CONFIG.layers)
    ]
    c_a = llama.ChunkContext(chunk_a, kv=[[kv[layer]] for layer in range(3)], chunk=0)
    c_b = llama.ChunkContext(chunk_b, kv=[[kv[layer], None] for layer in range(3)], chunk=1)
    assert torch.equal(c_b.positions, torch.cat([torch.arange(8, 21), torch.arange(6)]))

    py_outs_a = run_pieces(*python_pieces(model), tokens_a, py_a, 0, CONFIG.layers)
    py_outs_b = run_pieces(*python_pieces(model), tokens_b, py_b, 0, CONFIG.layers)
    c_outs_a = run_pieces(*cpp_pieces(stage), tokens_a, c_a, 0, CONFIG.layers)
    c_outs_b = run_pieces(*cpp_pieces(stage), tokens_b, c_b, 0, CONFIG.layers)
    for i, (c, p) in enumerate(zip(c_outs_a + c_outs_b, py_outs_a + py_outs_b)):
        assert rel(c, p) < TOLERANCE, (i, rel(c, p))

    w_a = torch.randn(py_outs_a[-1].shape, generator=g, dtype=torch.float64)
    w_b = torch.randn(py_outs_b[-1].shape, generator=g, dtype=torch.float64)
    ((py_outs_a[-1] * w_a).sum() + (py_outs_b[-1] * w_b).sum()).backward()
    (c_outs_b[-1] * w_b).sum().backward()
    (c_outs_a[-1] * w_a).sum().backward()
    compare_grads(model, stage)


def test_rotary_positions_start_at_the_slice_offset():
    """The second slice alone, rotated from position 8, differs from the same tokens taken as
    a sequence of their own (positions 0..): positions really come from the context."""
    stage = cpp.stage(CONFIG, 0, 1, True, False, seed=0)
    tokens = torch.randint(0, CONFIG.vocab, (5,), generator=torch.Generator().manual_seed(6))
    kv = _C.SequenceKV(13, CONFIG.kv_heads, CONFIG.head_dim, torch.float64)
    first = llama.ChunkContext([(0, 0, 8, 13)], kv=[[kv]])
    with torch.no_grad():
        stage.layer(0, stage.embed(torch.zeros(8, dtype=torch.long), first), first)
        later = llama.ChunkContext([(0, 8, 13)], kv=[[kv]], chunk=1)
        alone = llama.ChunkContext([(1, 0, 5)])
        a = stage.layer(0, stage.embed(tokens, later), later)
        b = stage.layer(0, stage.embed(tokens, alone), alone)
    assert rel(a, b) > 1e-3


def test_bad_calls_raise_clear_errors():
    stage = cpp.stage(CONFIG, 1, 2, False, True, seed=0)
    ctx = llama.ChunkContext([(0, 0, 4)])
    with pytest.raises(_C.Error, match="no embedding"):
        stage.embed(torch.zeros(4, dtype=torch.long), ctx)
    with pytest.raises(_C.Error, match="local layer 1 does not exist"):
        stage.layer(1, torch.zeros(4, CONFIG.hidden, dtype=torch.float64), ctx)
    with pytest.raises(_C.Error, match="expected"):
        stage.layer(0, torch.zeros(5, CONFIG.hidden, dtype=torch.float64), ctx)
    first = cpp.stage(CONFIG, 0, 1, True, False, seed=0)
    with pytest.raises(_C.Error, match="outside the vocabulary"):
        first.embed(torch.tensor([1, 2, CONFIG.vocab, 3]), ctx)


# --------------------------------------------------------------------------------------------
# Pipelined, two processes, the C++ stage on every rank


PIPELINE_CASES = [
    dict(
        name="short", dtype="float64", lengths=[5, 17, 33, 9, 24], seed=0, plan=dict(method="epp")
    ),
    dict(
        name="long-sliced",
        dtype="float64",
        lengths=[300],
        seed=1,
        plan=dict(method="chunkflow", chunk_tokens=64),
    ),
    dict(
        name="hybrid-checkpointed",
        dtype="float64",
        lengths=[200, 40, 25, 13],
        seed=2,
        plan=dict(method="chunkflow", chunk_tokens=96, recompute="pattern"),
    ),
    # The lean layer's C++ functions (src/models/lean_layer.cc) against the Python model's,
    # recomputed and split into B and W.
    dict(
        name="hybrid-checkpointed-lean-zero-bubble",
        dtype="float64-lean",
        lengths=[200, 40, 25, 13],
        seed=2,
        plan=dict(method="chunkflow", chunk_tokens=96, recompute="pattern", zero_bubble="h1"),
    ),
]


def test_two_stage_pipeline_with_cpp_stages_matches_unpipelined_python():
    runs = check_all_ok(
        run_ranks(
            "cpp_llama_bodies:cpp_parity",
            2,
            dict(cases=PIPELINE_CASES),
            timeout_s=240,
            extra_env={
                "PYTHONPATH": ":".join([str(REPO / "python"), str(RUNTIME_TESTS), str(HERE)])
            },
        )
    )
    for index, case in enumerate(PIPELINE_CASES):
        per_rank = [r[index] for r in runs]
        assert all(r["runs_in_cpp"] and r["module_type"] == "LlamaStage" for r in per_rank)
        model = llama.build_full_model(bodies.model_config(case["dtype"]), seed=0)
        batch = bodies.make_batch(case["lengths"], case["seed"])
        loss = llama.reference_loss(model, batch)
        loss.backward()
        for r in per_rank:
            assert abs(r["loss"] - loss.item()) <= TOLERANCE * abs(loss.item()), case["name"]
        grads = {}
        for r in per_rank:
            grads.update(r["grads"])
        names = [n for n, _ in model.named_parameters()]
        assert sorted(grads) == sorted(names)
        for name, p in model.named_parameters():
            assert rel(grads[name], p.grad) < TOLERANCE, (case["name"], name)
        kinds = set(per_rank[0]["kinds"])
        if case["name"] != "short":
            assert "split" in kinds or "hybrid" in kinds, (case["name"], kinds)
        if case["plan"].get("recompute"):
            assert any(n > 0 for row in per_rank[0]["recompute"] for n in row)
