"""Chunk attention (src/kernels/chunk_attention.cc) against plain causal attention.

Run with PYTHONPATH=python after building the module (DEVELOPERS.md). Every test runs three
backends: "flash" (ATen's CPU flash kernels per slice), "varlen" (the CUDA path's layout: the
chunk as one variable-length call over K/V gathered from the buffers, each entry through the CPU
flash kernels, gradients scattered back; docs/runtime.md, "On GPUs") and "math" (explicit
matmul/softmax). The CUDA kernels themselves: test_chunk_attention_cuda.py.
"""

import random

import pytest
import torch
import torch.utils.checkpoint

from infinipipe import _C  # built by setup.sh (DEVELOPERS.md); a missing build must fail, not skip

SequenceKV, Slice, chunk_attention = _C.SequenceKV, _C.Slice, _C.chunk_attention

BACKENDS = ["flash", "varlen", "math"]
# bf16 keeps 8 bits of mantissa, fp16 11: 16-bit inputs are checked within their rounding of the
# float64 reference computed from the same (rounded) values; the kernels reduce them in float32
TOL = {torch.float64: 1e-9, torch.float32: 1e-4, torch.bfloat16: 1.5e-2, torch.float16: 2e-3}
HEADS = [(4, 4), (4, 2), (6, 1)]  # (heads, kv_heads): MHA, GQA, MQA


def reference(q, k, v, scale):
    """Plain causal attention of one whole sequence, computed in float64 from the same values."""
    q, k, v = q.double(), k.double(), v.double()
    g = q.shape[1] // k.shape[1]
    k, v = k.repeat_interleave(g, dim=1), v.repeat_interleave(g, dim=1)
    s = torch.einsum("ihd,jhd->hij", q, k) * scale
    n = q.shape[0]
    s = s.masked_fill(torch.ones(n, n, dtype=torch.bool, device=q.device).triu(1), float("-inf"))
    return torch.einsum("hij,jhd->ihd", s.softmax(-1), v)


def rel_err(a, b):
    """max |a - b| / max |b|; a reference that is zero in theory (dk of a one-token sequence)
    is compared absolutely, at 1e-6 times the tolerance."""
    a, b = a.detach().double().cpu(), b.detach().double().cpu()
    return ((a - b).abs().max() / b.abs().max().clamp_min(1e-6)).item()


def make_seq(n, heads, kv_heads, dim, dtype, gen):
    def t(h):
        return torch.randn(n, h, dim, dtype=torch.float64, generator=gen).to(dtype).requires_grad_()

    return t(heads), t(kv_heads), t(kv_heads)


def random_cuts(n, k, rng):
    """k slices [(start, end)] covering [0, n)."""
    k = max(1, min(k, n))
    points = sorted(rng.sample(range(1, n), k - 1)) if k > 1 else []
    bounds = [0] + points + [n]
    return list(zip(bounds[:-1], bounds[1:]))


def run_schedule(seqs, chunks, forward_order, backward_order, grads, scale, backend, split):
    """Runs chunks (lists of (seq, start, end)) through chunk_attention, forwards then backwards
    in the given orders. Sequences in `split` get a SequenceKV. Returns per-sequence outputs
    (detached) and the buffers."""
    dtype = seqs[0][0].dtype
    bufs = {
        i: SequenceKV(
            seqs[i][0].shape[0], seqs[i][1].shape[1], seqs[i][0].shape[2], dtype, seqs[i][0].device
        )
        for i in split
    }
    outs = [torch.zeros_like(q).detach() for q, _, _ in seqs]
    results = {}
    for c in forward_order:
        qs, ks, vs, slices, kvs = [], [], [], [], []
        for i, a, b in chunks[c]:
            q, k, v = seqs[i]
            qs.append(q[a:b]), ks.append(k[a:b]), vs.append(v[a:b])
            slices.append((i, a, b))
            kvs.append(bufs.get(i))
        o = chunk_attention(
            torch.cat(qs), torch.cat(ks), torch.cat(vs), slices, kvs, scale, backend
        )
        results[c] = o
        row = 0
        for i, a, b in chunks[c]:
            outs[i][a:b] = o[row : row + b - a].detach()
            row += b - a
    for c in backward_order:
        g = torch.cat([grads[i][a:b] for i, a, b in chunks[c]])
        results.pop(c).backward(g)
    return outs, bufs


def check_against_reference(seqs, outs, grads, scale, tol):
    for (q, k, v), out, g in zip(seqs, outs, grads):
        q64, k64, v64 = (t.detach().double().requires_grad_() for t in (q, k, v))
        ref = reference(q64, k64, v64, scale)
        ref.backward(g.double().to(ref.device))
        assert rel_err(out, ref) < tol
        for t, r in ((q, q64), (k, k64), (v, v64)):
            assert t.grad is not None
            assert rel_err(t.grad, r.grad) < tol


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
@pytest.mark.parametrize("heads,kv_heads", HEADS)
@pytest.mark.parametrize("seed", range(4))
def test_split_sequence_equals_full_attention(backend, dtype, heads, kv_heads, seed):
    rng, gen = random.Random(seed), torch.Generator().manual_seed(seed)
    n = rng.randint(2, 90)
    cuts = random_cuts(n, rng.randint(2, 7), rng)
    seq = make_seq(n, heads, kv_heads, 8, dtype, gen)
    grads = [torch.randn(n, heads, 8, dtype=torch.float64, generator=gen).to(dtype)]
    chunks = [[(0, a, b)] for a, b in cuts]
    order = list(range(len(chunks)))
    scale = 0.35
    outs, bufs = run_schedule([seq], chunks, order, order[::-1], grads, scale, backend, {0})
    check_against_reference([seq], outs, grads, scale, TOL[dtype])
    # the buffer holds the whole sequence's K/V; its accumulators are handed back and empty
    assert torch.equal(bufs[0].k, seq[1].detach()) and torch.equal(bufs[0].v, seq[2].detach())
    assert not bufs[0].dk.any() and not bufs[0].dv.any()


@pytest.mark.parametrize("backend", BACKENDS)
def test_long_sequence_across_kernel_blocks(backend):
    # long enough to cross the flash kernel's query and key blocks, cut off their boundaries
    gen = torch.Generator().manual_seed(7)
    n, cuts = 1500, [(0, 333), (333, 600), (600, 1100), (1100, 1499), (1499, 1500)]
    seq = make_seq(n, 4, 2, 16, torch.float64, gen)
    grads = [torch.randn(n, 4, 16, dtype=torch.float64, generator=gen)]
    chunks = [[(0, a, b)] for a, b in cuts]
    order = list(range(len(chunks)))
    outs, _ = run_schedule([seq], chunks, order, order[::-1], grads, 0.25, backend, {0})
    check_against_reference([seq], outs, grads, 0.25, 1e-9)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
@pytest.mark.parametrize("heads,kv_heads", HEADS)
def test_packed_whole_sequences(backend, dtype, heads, kv_heads):
    rng, gen = random.Random(1), torch.Generator().manual_seed(1)
    lengths = [rng.randint(1, 40) for _ in range(6)]
    seqs = [make_seq(n, heads, kv_heads, 8, dtype, gen) for n in lengths]
    grads = [
        torch.randn(n, heads, 8, dtype=torch.float64, generator=gen).to(dtype) for n in lengths
    ]
    chunks = [[(i, 0, n) for i, n in enumerate(lengths)]]
    outs, _ = run_schedule(seqs, chunks, [0], [0], grads, 0.3, backend, set())
    check_against_reference(seqs, outs, grads, 0.3, TOL[dtype])


@pytest.mark.parametrize("backend", BACKENDS)
def test_packed_sequences_do_not_leak(backend):
    gen = torch.Generator().manual_seed(2)
    lengths = [5, 9, 3, 7]
    T = sum(lengths)
    q = torch.randn(T, 4, 8, dtype=torch.float64, generator=gen)
    k = torch.randn(T, 2, 8, dtype=torch.float64, generator=gen)
    v = torch.randn(T, 2, 8, dtype=torch.float64, generator=gen)
    slices = [(i, 0, n) for i, n in enumerate(lengths)]  # rows 0, 5, 14, 17
    out = chunk_attention(q, k, v, slices, [], 0.0, backend)
    # perturbing sequence 1 changes only its rows
    k2, v2, q2 = k.clone(), v.clone(), q.clone()
    for t in (k2, v2, q2):
        t[5:14] += 1.0
    out2 = chunk_attention(q2, k2, v2, slices, [], 0.0, backend)
    mask = torch.zeros(T, dtype=torch.bool)
    mask[5:14] = True
    assert torch.equal(out[~mask], out2[~mask])
    assert not torch.equal(out[mask], out2[mask])
    # the gradient of sequence 2's output reaches only sequence 2's inputs
    qg, kg, vg = (t.clone().requires_grad_() for t in (q, k, v))
    o = chunk_attention(qg, kg, vg, slices, [], 0.0, backend)
    o[14:17].sum().backward()
    for t in (qg, kg, vg):
        outside = torch.ones(T, dtype=torch.bool)
        outside[14:17] = False
        assert not t.grad[outside].any()
        assert t.grad[14:17].any()


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32, torch.bfloat16, torch.float16])
def test_hybrid_chunk(backend, dtype):
    # a long sequence in three slices; its tail shares a chunk with two whole sequences (tail in
    # the middle of the rows), and the first slice's chunk holds a whole sequence too
    gen = torch.Generator().manual_seed(3)
    lengths = [70, 12, 20, 9]
    seqs = [make_seq(n, 4, 2, 8, dtype, gen) for n in lengths]
    grads = [torch.randn(n, 4, 8, dtype=torch.float64, generator=gen).to(dtype) for n in lengths]
    chunks = [[(0, 0, 30), (3, 0, 9)], [(0, 30, 51)], [(1, 0, 12), (0, 51, 70), (2, 0, 20)]]
    outs, bufs = run_schedule(seqs, chunks, [0, 1, 2], [2, 1, 0], grads, 0.3, backend, {0})
    assert outs[0].dtype == dtype and seqs[0][0].grad.dtype == dtype
    check_against_reference(seqs, outs, grads, 0.3, TOL[dtype])
    assert not bufs[0].dk.any()


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("seed", range(6))
def test_random_schedule_of_several_split_sequences(backend, seed):
    """Several long sequences cut at random, slices interleaved across chunks with whole
    sequences; forward in chunk order, backward sequences first-in-first-out and slices
    last-in-first-out (docs/design.md, "1F1B chunk scheduler")."""
    rng, gen = random.Random(100 + seed), torch.Generator().manual_seed(100 + seed)
    n_long, n_short = rng.randint(1, 3), rng.randint(0, 6)
    lengths = [rng.randint(20, 120) for _ in range(n_long)] + [
        rng.randint(1, 25) for _ in range(n_short)
    ]
    dtype = torch.float64
    seqs = [make_seq(n, 4, 2, 8, dtype, gen) for n in lengths]
    grads = [torch.randn(n, 4, 8, dtype=dtype, generator=gen) for n in lengths]
    slices = {i: random_cuts(lengths[i], rng.randint(1, 5), rng) for i in range(n_long)}
    # forward: slice j of every long sequence, sequences in order, j ascending
    chunks, key = [], []
    for j in range(max(len(s) for s in slices.values())):
        for i in range(n_long):
            if j < len(slices[i]):
                a, b = slices[i][j]
                chunks.append([(i, a, b)])
                key.append((i, -j))
    for _ in range(rng.randint(0, 2)):
        chunks.append([])
        key.append((rng.random() * n_long, 0))
    for s in range(n_long, n_long + n_short):
        c = rng.randrange(len(chunks))
        chunks[c].insert(rng.randint(0, len(chunks[c])), (s, 0, lengths[s]))
    keep = [c for c in range(len(chunks)) if chunks[c]]
    backward = sorted(keep, key=lambda c: key[c])
    split = {i for i in range(n_long) if len(slices[i]) > 1}
    outs, bufs = run_schedule(seqs, chunks, keep, backward, grads, 0.3, backend, split)
    check_against_reference(seqs, outs, grads, 0.3, 1e-9)
    for b in bufs.values():
        assert not b.dk.any() and not b.dv.any()


class AttnLayer(torch.nn.Module):
    """A toy attention layer: projections to q, k, v, then chunk attention."""

    def __init__(self, dim, heads, kv_heads, head_dim, dtype):
        super().__init__()
        self.h, self.kvh, self.d = heads, kv_heads, head_dim
        self.wq = torch.nn.Linear(dim, heads * head_dim, bias=False, dtype=dtype)
        self.wk = torch.nn.Linear(dim, kv_heads * head_dim, bias=False, dtype=dtype)
        self.wv = torch.nn.Linear(dim, kv_heads * head_dim, bias=False, dtype=dtype)

    def qkv(self, x):
        n = x.shape[0]
        return (
            self.wq(x).view(n, self.h, self.d),
            self.wk(x).view(n, self.kvh, self.d),
            self.wv(x).view(n, self.kvh, self.d),
        )

    def forward(self, x, slices, kv, backend):
        return chunk_attention(*self.qkv(x), slices, kv, 0.0, backend).flatten(1)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("mode", ["twice", "checkpoint", "checkpoint_reentrant"])
def test_recompute(backend, mode):
    """A checkpointed layer re-runs its forward (rewriting the slice's K/V) before its backward:
    gradients of inputs and weights stay exact."""
    torch.manual_seed(4)
    dtype = torch.float64
    n, cuts = 50, [(0, 17), (17, 36), (36, 50)]
    layer = AttnLayer(12, 4, 2, 8, dtype)
    x = torch.randn(n, 12, dtype=dtype, requires_grad=True)
    g = torch.randn(n, 32, dtype=dtype)
    kv = SequenceKV(n, 2, 8, dtype)
    outs = []
    for a, b in cuts:
        slices = [(0, a, b, n)]
        xs = x[a:b]
        if mode == "twice":
            layer(xs, slices, [kv], backend)  # a first forward whose graph is dropped
            o = layer(xs, slices, [kv], backend)
        else:
            o = torch.utils.checkpoint.checkpoint(
                layer, xs, slices, [kv], backend, use_reentrant=(mode == "checkpoint_reentrant")
            )
        outs.append(o)
    for (a, b), o in reversed(list(zip(cuts, outs))):
        o.backward(g[a:b])
    got = [x.grad.clone()] + [p.grad.clone() for p in layer.parameters()]
    x.grad = None
    layer.zero_grad()
    q, k, v = layer.qkv(x)
    reference(q, k, v, 8**-0.5).flatten(1).backward(g)
    want = [x.grad] + [p.grad for p in layer.parameters()]
    for a, b in zip(got, want):
        assert rel_err(a, b) < 1e-9


@pytest.mark.parametrize("backend", BACKENDS)
def test_default_scale(backend):
    gen = torch.Generator().manual_seed(5)
    q, k, v = make_seq(5, 2, 2, 4, torch.float64, gen)
    out = chunk_attention(q, k, v, [(0, 0, 5)], backend=backend)  # scale 1/sqrt(4)
    assert rel_err(out, reference(q, k, v, 0.5)) < 1e-12


def test_inference_without_grad_writes_buffer():
    gen = torch.Generator().manual_seed(6)
    q, k, v = (t.detach() for t in make_seq(12, 2, 1, 4, torch.float32, gen))
    kv = SequenceKV(12, 1, 4, torch.float32)
    with torch.no_grad():
        o1 = chunk_attention(q[:5], k[:5], v[:5], [(0, 0, 5, 12)], [kv])
        o2 = chunk_attention(q[5:], k[5:], v[5:], [(0, 5, 12)], [kv])
    assert not o1.requires_grad
    assert rel_err(torch.cat([o1, o2]), reference(q, k, v, 0.5)) < 1e-5
    assert torch.equal(kv.k, k)


def test_errors():
    q, k, v = torch.randn(8, 4, 4), torch.randn(8, 2, 4), torch.randn(8, 2, 4)
    kv = SequenceKV(8, 2, 4, torch.float32)
    with pytest.raises(RuntimeError, match="no K/V buffer"):
        chunk_attention(q, k, v, [(0, 3, 11)])
    with pytest.raises(RuntimeError, match="must tile the rows"):
        chunk_attention(q, k, v, [(0, 0, 5), (1, 0, 4)])
    with pytest.raises(RuntimeError, match="must tile the rows"):
        chunk_attention(q, k, v, [(0, 0, 5)])
    with pytest.raises(RuntimeError, match="empty or negative"):
        chunk_attention(q, k, v, [(0, 0, 8), (1, 0, 0)])
    with pytest.raises(RuntimeError, match="one per slice"):
        chunk_attention(q, k, v, [(0, 0, 8)], [None, None])
    with pytest.raises(RuntimeError, match="beyond its K/V buffer"):
        chunk_attention(q, k, v, [(0, 4, 12)], [kv])
    with pytest.raises(RuntimeError, match="one K/V buffer"):
        chunk_attention(q, k, v, [(0, 0, 2, 8), (1, 2, 8)], [kv, kv])
    with pytest.raises(RuntimeError, match="multiple of kv_heads"):
        chunk_attention(torch.randn(8, 3, 4), k, v, [(0, 0, 8)])
    with pytest.raises(RuntimeError, match="does not match"):
        chunk_attention(q, k, v, [(0, 0, 8)], [SequenceKV(8, 1, 4, torch.float32)])
    with pytest.raises(RuntimeError, match="dtype"):
        chunk_attention(q, k, v, [(0, 0, 8)], [SequenceKV(8, 2, 4, torch.float64)])
    with pytest.raises(_C.Error, match="backend"):
        chunk_attention(q, k, v, [(0, 0, 8)], backend="cuda")
    with pytest.raises(_C.Error, match="CUDA only"):
        chunk_attention(q, k, v, [(0, 0, 8)], backend="efficient")


def test_sequence_kv_binding():
    kv = SequenceKV(16, 2, 8, torch.float64)
    assert (kv.seq_length, kv.kv_heads, kv.head_dim) == (16, 2, 8)
    assert kv.k.shape == (16, 2, 8) and kv.k.dtype == torch.float64
    assert not kv.k.requires_grad
    # the accumulators wait for the first backward
    assert kv.dk is None and kv.dv is None
    assert kv.nbytes == 2 * 16 * 2 * 8 * 8
    kv.zero_grad()
    assert kv.dk is None


def test_slice_binding():
    s = Slice(3, 4, 9, 20)
    assert (s.seq, s.start, s.end, s.seq_length, s.length, s.context) == (3, 4, 9, 20, 5, 4)
    assert not s.whole and Slice(0, 0, 2).whole  # seq_length defaults to end
    assert tuple(s) == (3, 4, 9) and Slice(*(3, 4, 9), 20) == s
    with pytest.raises(TypeError, match="slices"):  # not a (seq, start, end) tuple
        chunk_attention(*make_seq(2, 1, 1, 4, torch.float32, torch.Generator()), [(0, 2)])


@pytest.mark.parametrize("backend", BACKENDS)
def test_accumulators_appear_at_the_first_backward_only(backend):
    """Forwards of every slice leave the buffer at K/V only (what the cost model's memory
    timeline counts before a sequence's first backward); the first backward allocates dK/dV,
    which hold the earlier slices' contributions until their own backwards clear them."""
    gen = torch.Generator().manual_seed(5)
    n, cuts = 40, [(0, 15), (15, 28), (28, 40)]
    q, k, v = make_seq(n, 4, 2, 8, torch.float64, gen)
    kv = SequenceKV(n, 2, 8, torch.float64)
    outs = []
    for a, b in cuts:
        outs.append(chunk_attention(q[a:b], k[a:b], v[a:b], [(0, a, b, n)], [kv], 0.3, backend))
        assert kv.dk is None and kv.nbytes == 2 * n * 2 * 8 * 8
    outs[2].backward(torch.randn(12, 4, 8, dtype=torch.float64, generator=gen))
    assert kv.dk.shape == kv.k.shape and kv.nbytes == 4 * n * 2 * 8 * 8
    assert kv.dk[:28].abs().sum() > 0 and not kv.dk[28:].any()
    for i in (1, 0):
        a, b = cuts[i]
        outs[i].backward(torch.randn(b - a, 4, 8, dtype=torch.float64, generator=gen))
    assert not kv.dk.any() and not kv.dv.any()


# --- the varlen layout (attention_layout.h) ---------------------------------------------------


def test_varlen_layout_of_a_hybrid_chunk():
    """A whole sequence, a split sequence's middle slice (context 30), a whole one: its offsets,
    each entry's rows of the gathered K/V, and the gather's source."""
    slices = [(3, 0, 9), (0, 30, 51, 70), (4, 0, 5)]
    layout = _C.kernels.varlen_layout(slices, [False, True, False])
    assert layout["cu_seq_q"] == [0, 9, 30, 35]
    assert layout["cu_seq_k"] == [0, 9, 9 + 51, 9 + 51 + 5]
    assert (layout["max_q"], layout["max_k"]) == (21, 51)
    assert (layout["total_q"], layout["total_k"]) == (35, 65)
    assert layout["source"] == "gathered"
    e = layout["entries"]
    assert [x["key_offset"] for x in e] == [0, 9, 60]
    assert [x["key_length"] for x in e] == [9, 51, 5]
    # own rows: the whole ones' keys are their rows; the slice's follow its 30 context rows
    assert [x["own_offset"] for x in e] == [0, 39, 60]


def test_varlen_layout_sources():
    whole = _C.kernels.varlen_layout([(0, 0, 4), (1, 0, 6)], [False, False])
    assert whole["source"] == "chunk_rows" and whole["cu_seq_k"] == whole["cu_seq_q"] == [0, 4, 10]
    one = _C.kernels.varlen_layout([(0, 12, 20, 40)], [True])
    assert one["source"] == "one_buffer" and one["cu_seq_k"] == [0, 20] and one["max_k"] == 20
    first = _C.kernels.varlen_layout([(0, 0, 8, 40), (1, 0, 3)], [True, False])
    assert first["source"] == "gathered" and first["entries"][0]["own_offset"] == 0
    with pytest.raises(_C.Error, match="without a K/V buffer"):
        _C.kernels.varlen_layout([(0, 3, 8)], [False])


def test_varlen_layout_gathers_what_the_per_slice_path_reads():
    """Keys gathered by the layout's rows equal, entry by entry, the keys the CPU path attends
    to: the buffer's [0, end) for a split slice, the slice's own rows otherwise; and a
    bottom-right causal mask per entry is the CPU path's mask."""
    gen = torch.Generator().manual_seed(11)
    n = 40
    k_seq = torch.randn(n, 2, 4, dtype=torch.float64, generator=gen)
    k_whole = torch.randn(7, 2, 4, dtype=torch.float64, generator=gen)
    slices, buffered = [(1, 0, 7), (0, 25, 40)], [False, True]
    layout = _C.kernels.varlen_layout(slices, buffered)
    chunk_k = torch.cat([k_whole, k_seq[25:40]])
    gathered = torch.cat([chunk_k[0:7], k_seq[0:40]])  # what gather_keys builds
    for entry, (_seq, a, b) in zip(layout["entries"], slices):
        keys = gathered[entry["key_offset"] : entry["key_offset"] + entry["key_length"]]
        want = k_seq[:b] if entry["buffered"] else chunk_k[entry["row"] : entry["row"] + b - a]
        assert torch.equal(keys, want)
        own = gathered[entry["own_offset"] : entry["own_offset"] + entry["length"]]
        assert torch.equal(own, chunk_k[entry["row"] : entry["row"] + entry["length"]])
        # bottom-right: query i of the entry sees keys [0, key_length - length + i]
        s, nk = entry["length"], entry["key_length"]
        bottom_right = torch.ones(s, nk, dtype=torch.bool).tril(nk - s)
        per_slice = torch.arange(nk)[None, :] <= (a + torch.arange(s))[:, None]
        assert torch.equal(bottom_right, per_slice)


@pytest.mark.parametrize(
    "device,dtype,head_dim,backend,flash_ok,kernel",
    [
        ("cpu", torch.bfloat16, 64, "auto", True, "cpu_flash"),
        ("cpu", torch.float64, 64, "varlen", True, "varlen_cpu"),
        ("cpu", torch.float32, 64, "math", True, "math"),
        ("cuda", torch.bfloat16, 128, "auto", True, "cuda_flash"),
        ("cuda", torch.float16, 256, "auto", True, "cuda_flash"),
        ("cuda", torch.bfloat16, 264, "auto", True, "cuda_efficient"),  # head_dim > 256
        ("cuda", torch.bfloat16, 100, "auto", True, "cuda_efficient"),  # not a multiple of 8
        ("cuda", torch.bfloat16, 128, "auto", False, "cuda_efficient"),  # device without flash
        ("cuda", torch.float32, 128, "auto", True, "cuda_efficient"),
        ("cuda", torch.float32, 128, "varlen", True, "cuda_efficient"),
        ("cuda", torch.float64, 64, "auto", True, "math"),  # fallback, warned
        ("cuda", torch.float64, 64, "math", True, "math"),  # asked for: no warning
        ("cuda", torch.bfloat16, 128, "efficient", True, "cuda_efficient"),
    ],
)
def test_kernel_choice(device, dtype, head_dim, backend, flash_ok, kernel):
    got, warning = _C.kernels.attention_kernel(device, dtype, head_dim, backend, flash_ok)
    assert got == kernel
    fallback = device == "cuda" and kernel == "math" and backend != "math"
    assert bool(warning) == fallback
    if fallback:
        assert "math path" in warning and "float64" in warning


def test_kernel_choice_refusals():
    with pytest.raises(_C.Error, match="float16 or bfloat16, not float32"):
        _C.kernels.attention_kernel("cuda", torch.float32, 64, "flash")
    with pytest.raises(_C.Error, match="multiple of 8"):
        _C.kernels.attention_kernel("cuda", torch.bfloat16, 100, "flash")
    with pytest.raises(_C.Error, match="float16, bfloat16 or float32, not float64"):
        _C.kernels.attention_kernel("cuda", torch.float64, 64, "efficient")
    with pytest.raises(_C.Error, match="CUDA only"):
        _C.kernels.attention_kernel("cpu", torch.float32, 64, "efficient")
    # the kernel for a real tensor, on this machine's CPU
    assert _C.kernels.attention_kernel_for(torch.zeros(2, 2, 8)) == "cpu_flash"
    assert _C.kernels.attention_kernel_for(torch.zeros(2, 2, 8), "varlen") == "varlen_cpu"
