#include "infinipipe/kernels/chunk_attention.h"

#include <ATen/ops/_scaled_dot_product_flash_attention_for_cpu.h>
#include <ATen/ops/_scaled_dot_product_flash_attention_for_cpu_backward.h>
#include <c10/util/Exception.h>
#include <torch/csrc/autograd/custom_function.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <tuple>
#include <utility>

#include "infinipipe/core/error.h"

namespace infinipipe::kernels {

std::shared_ptr<SequenceKV> SequenceKV::create(int64_t seq_length, int64_t kv_heads,
                                               int64_t head_dim, at::ScalarType dtype,
                                               at::Device device) {
  TORCH_CHECK(seq_length > 0 && kv_heads > 0 && head_dim > 0,
              "SequenceKV: seq_length, kv_heads and head_dim must be positive, got ", seq_length,
              ", ", kv_heads, ", ", head_dim);
  auto opts = at::TensorOptions().dtype(dtype).device(device);
  auto kv = std::make_shared<SequenceKV>();
  // K/V are written before they are read. The accumulators wait for the first backward.
  kv->k = at::empty({seq_length, kv_heads, head_dim}, opts);
  kv->v = at::empty({seq_length, kv_heads, head_dim}, opts);
  return kv;
}

void SequenceKV::allocate_grad() {
  if (dk.defined()) return;
  dk = at::zeros_like(k);
  dv = at::zeros_like(v);
}

void SequenceKV::zero_grad() {
  if (!dk.defined()) return;
  dk.zero_();
  dv.zero_();
}

int64_t SequenceKV::nbytes() const {
  int64_t bytes = static_cast<int64_t>(k.nbytes() + v.nbytes());
  if (dk.defined()) bytes += static_cast<int64_t>(dk.nbytes() + dv.nbytes());
  return bytes;
}

namespace {

using at::Tensor;

// Attention of one segment: queries q [s, H, D] at positions [start, start + s) of their
// sequence, keys/values K, V [start + s, kv, D] (positions [0, start + s)), bottom-right causal.
struct SegmentForward {
  Tensor out;  // [s, H, D]
  Tensor lse;  // [H, s], log-sum-exp of the scaled scores of each query row
};

// Gradients of one segment. The key/value gradient is split into the context part
// [0, start) (undefined when start == 0) and the segment's own part [start, start + s).
struct SegmentBackward {
  Tensor dq;              // [s, H, D]
  Tensor dk_ctx, dv_ctx;  // [start, kv, D]
  Tensor dk_own, dv_own;  // [s, kv, D]
};

// [L, H, D] -> [1, H, L, D] (a view, as ATen's SDPA kernels take them)
Tensor to_bhld(const Tensor& t) { return t.transpose(0, 1).unsqueeze(0); }
// [1, H, L, D] -> [L, H, D]
Tensor from_bhld(const Tensor& t) { return t.squeeze(0).transpose(0, 1); }

// --- Flash backend: ATen's CPU flash-attention kernels -----------------------------------------
// The bottom-right causal mask over [0, start + s) is the union of an unmasked block (keys
// [0, start)) and a top-left causal block (keys [start, start + s), as many as the queries). Each
// block is one flash call; the two partial results are merged through their log-sum-exps. The
// flash backward recomputes probabilities as exp(score - lse) and uses rowsum(dO * O): given the
// merged O and lse, each block's backward yields the exact gradients of the full attention.

SegmentForward flash_forward(const Tensor& q, const Tensor& K, const Tensor& V, int64_t start,
                             double scale) {
  const int64_t s = q.size(0);
  auto q4 = to_bhld(q);
  auto diag = at::_scaled_dot_product_flash_attention_for_cpu(
      q4, to_bhld(K.narrow(0, start, s)), to_bhld(V.narrow(0, start, s)), 0.0,
      /*is_causal=*/true, /*attn_mask=*/std::nullopt, scale);
  Tensor out = std::get<0>(diag), lse = std::get<1>(diag);  // [1, H, s, D], [1, H, s]
  if (start > 0) {
    auto ctx = at::_scaled_dot_product_flash_attention_for_cpu(
        q4, to_bhld(K.narrow(0, 0, start)), to_bhld(V.narrow(0, 0, start)), 0.0,
        /*is_causal=*/false, /*attn_mask=*/std::nullopt, scale);
    const Tensor& out_ctx = std::get<0>(ctx);
    const Tensor& lse_ctx = std::get<1>(ctx);
    Tensor merged = at::logaddexp(lse, lse_ctx);
    Tensor w_diag = (lse - merged).exp_().unsqueeze(-1).to(out.scalar_type());
    Tensor w_ctx = (lse_ctx - merged).exp_().unsqueeze(-1).to(out.scalar_type());
    out = out * w_diag + out_ctx * w_ctx;
    lse = merged;
  }
  return {from_bhld(out), lse.squeeze(0)};
}

SegmentBackward flash_backward(const Tensor& dout, const Tensor& q, const Tensor& K,
                               const Tensor& V, const Tensor& out, const Tensor& lse, int64_t start,
                               double scale) {
  const int64_t s = q.size(0);
  auto dout4 = to_bhld(dout), q4 = to_bhld(q), out4 = to_bhld(out);
  auto lse3 = lse.unsqueeze(0);
  SegmentBackward r;
  auto diag = at::_scaled_dot_product_flash_attention_for_cpu_backward(
      dout4, q4, to_bhld(K.narrow(0, start, s)), to_bhld(V.narrow(0, start, s)), out4, lse3, 0.0,
      /*is_causal=*/true, /*attn_mask=*/std::nullopt, scale);
  r.dq = from_bhld(std::get<0>(diag));
  r.dk_own = from_bhld(std::get<1>(diag));
  r.dv_own = from_bhld(std::get<2>(diag));
  if (start > 0) {
    auto ctx = at::_scaled_dot_product_flash_attention_for_cpu_backward(
        dout4, q4, to_bhld(K.narrow(0, 0, start)), to_bhld(V.narrow(0, 0, start)), out4, lse3, 0.0,
        /*is_causal=*/false, /*attn_mask=*/std::nullopt, scale);
    r.dq = r.dq + from_bhld(std::get<0>(ctx));
    r.dk_ctx = from_bhld(std::get<1>(ctx));
    r.dv_ctx = from_bhld(std::get<2>(ctx));
  }
  return r;
}

// --- Math backend: explicit matmul/softmax, any device -----------------------------------------
// Query heads are grouped by kv head (head h uses kv head h / g), so with the queries laid out as
// [kv, g * s, D] every kv head is one batched matmul.

struct MathLayout {
  int64_t s, end, kvh, g;
  Tensor qh, Kh, Vh;  // [kv, g*s, D], [kv, end, D], [kv, end, D]
  Tensor mask;        // [s, end] bool, true where masked (key after the query)
};

MathLayout math_layout(const Tensor& q, const Tensor& K, const Tensor& V, int64_t start) {
  MathLayout m;
  m.s = q.size(0);
  m.end = K.size(0);
  m.kvh = K.size(1);
  m.g = q.size(1) / m.kvh;
  const int64_t D = q.size(2);
  m.qh = q.permute({1, 0, 2}).reshape({m.kvh, m.g * m.s, D});
  m.Kh = K.permute({1, 0, 2});
  m.Vh = V.permute({1, 0, 2});
  // query i sits at position start + i and sees keys j <= start + i
  m.mask = at::ones({m.s, m.end}, q.options().dtype(at::kBool)).triu(start + 1);
  return m;
}

// Masked, scaled scores [kv, g*s, end].
Tensor math_scores(const MathLayout& m, double scale) {
  Tensor S = at::bmm(m.qh, m.Kh.transpose(1, 2)).mul_(scale);
  S.view({m.kvh, m.g, m.s, m.end}).masked_fill_(m.mask, -std::numeric_limits<double>::infinity());
  return S;
}

SegmentForward math_forward(const Tensor& q, const Tensor& K, const Tensor& V, int64_t start,
                            double scale) {
  auto m = math_layout(q, K, V, start);
  Tensor S = math_scores(m, scale);
  Tensor lse = S.logsumexp(-1, /*keepdim=*/true);  // [kv, g*s, 1]
  Tensor P = S.sub_(lse).exp_();
  Tensor O = at::bmm(P, m.Vh);  // [kv, g*s, D]
  const int64_t H = q.size(1), D = q.size(2);
  return {O.view({H, m.s, D}).permute({1, 0, 2}), lse.view({H, m.s})};
}

SegmentBackward math_backward(const Tensor& dout, const Tensor& q, const Tensor& K, const Tensor& V,
                              const Tensor& out, const Tensor& lse, int64_t start, double scale) {
  auto m = math_layout(q, K, V, start);
  const int64_t H = q.size(1), D = q.size(2);
  Tensor P = math_scores(m, scale).sub_(lse.view({m.kvh, m.g * m.s, 1})).exp_();
  Tensor dOh = dout.permute({1, 0, 2}).reshape({m.kvh, m.g * m.s, D});
  Tensor Oh = out.permute({1, 0, 2}).reshape({m.kvh, m.g * m.s, D});
  Tensor rowsum = (dOh * Oh).sum(-1, /*keepdim=*/true);
  Tensor dV = at::bmm(P.transpose(1, 2), dOh);  // [kv, end, D]
  Tensor dS = at::bmm(dOh, m.Vh.transpose(1, 2)).sub_(rowsum).mul_(P).mul_(scale);
  Tensor dq = at::bmm(dS, m.Kh);                  // [kv, g*s, D]
  Tensor dK = at::bmm(dS.transpose(1, 2), m.qh);  // [kv, end, D]
  dK = dK.permute({1, 0, 2});
  dV = dV.permute({1, 0, 2});
  SegmentBackward r;
  r.dq = dq.view({H, m.s, D}).permute({1, 0, 2});
  r.dk_own = dK.narrow(0, start, m.s);
  r.dv_own = dV.narrow(0, start, m.s);
  if (start > 0) {
    r.dk_ctx = dK.narrow(0, 0, start);
    r.dv_ctx = dV.narrow(0, 0, start);
  }
  return r;
}

// --- autograd --------------------------------------------------------------------------------

// One slice as the autograd function runs it: its rows, its place in its sequence, its buffer.
struct Segment {
  int64_t row = 0;
  int64_t start = 0;
  int64_t length = 0;
  std::shared_ptr<SequenceKV> kv;  // null for a whole sequence

  int64_t end() const { return start + length; }
};

struct ChunkPlan : torch::CustomClassHolder {
  std::vector<Segment> segments;
  double scale = 0.0;
  bool flash = true;
};

class ChunkAttentionFunction : public torch::autograd::Function<ChunkAttentionFunction> {
 public:
  static Tensor forward(torch::autograd::AutogradContext* ctx, const Tensor& q, const Tensor& k,
                        const Tensor& v, c10::intrusive_ptr<ChunkPlan> plan) {
    Tensor out = at::zeros_like(q);
    std::vector<Tensor> saved{q, k, v, out};
    for (const Segment& seg : plan->segments) {
      Tensor qs = q.narrow(0, seg.row, seg.length);
      Tensor ks = k.narrow(0, seg.row, seg.length);
      Tensor vs = v.narrow(0, seg.row, seg.length);
      Tensor K = ks, V = vs;
      if (seg.kv) {
        seg.kv->k.narrow(0, seg.start, seg.length).copy_(ks);
        seg.kv->v.narrow(0, seg.start, seg.length).copy_(vs);
        K = seg.kv->k.narrow(0, 0, seg.end());
        V = seg.kv->v.narrow(0, 0, seg.end());
      }
      SegmentForward f = plan->flash ? flash_forward(qs, K, V, seg.start, plan->scale)
                                     : math_forward(qs, K, V, seg.start, plan->scale);
      out.narrow(0, seg.row, seg.length).copy_(f.out);
      saved.push_back(f.lse);
    }
    ctx->save_for_backward(saved);
    // The buffers must outlive the graph, and are deliberately not saved as variables: later
    // slices write into them (bumping their version), outside the range this one reads.
    ctx->saved_data["plan"] = at::IValue::make_capsule(std::move(plan));
    return out;
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grad_outputs) {
    auto plan = c10::static_intrusive_pointer_cast<ChunkPlan>(ctx->saved_data["plan"].toCapsule());
    auto saved = ctx->get_saved_variables();
    const Tensor &q = saved[0], &k = saved[1], &v = saved[2], &out = saved[3];
    Tensor dq = at::zeros_like(q), dk = at::zeros_like(k), dv = at::zeros_like(v);
    Tensor grad = grad_outputs[0];
    if (!grad.defined()) return {dq, dk, dv, Tensor()};
    grad = grad.contiguous();
    for (size_t i = 0; i < plan->segments.size(); ++i) {
      const Segment& seg = plan->segments[i];
      const Tensor& lse = saved[4 + i];
      Tensor qs = q.narrow(0, seg.row, seg.length);
      Tensor K, V;
      if (seg.kv) {
        K = seg.kv->k.narrow(0, 0, seg.end());
        V = seg.kv->v.narrow(0, 0, seg.end());
      } else {
        K = k.narrow(0, seg.row, seg.length);
        V = v.narrow(0, seg.row, seg.length);
      }
      Tensor gs = grad.narrow(0, seg.row, seg.length);
      Tensor os = out.narrow(0, seg.row, seg.length);
      SegmentBackward b = plan->flash
                              ? flash_backward(gs, qs, K, V, os, lse, seg.start, plan->scale)
                              : math_backward(gs, qs, K, V, os, lse, seg.start, plan->scale);
      dq.narrow(0, seg.row, seg.length).copy_(b.dq);
      Tensor dks = dk.narrow(0, seg.row, seg.length);
      Tensor dvs = dv.narrow(0, seg.row, seg.length);
      dks.copy_(b.dk_own);
      dvs.copy_(b.dv_own);
      if (seg.kv) {
        seg.kv->allocate_grad();
        // hand over what later slices accumulated for this one, and clear it
        Tensor acc_k = seg.kv->dk.narrow(0, seg.start, seg.length);
        Tensor acc_v = seg.kv->dv.narrow(0, seg.start, seg.length);
        dks.add_(acc_k);
        dvs.add_(acc_v);
        acc_k.zero_();
        acc_v.zero_();
        if (seg.start > 0) {
          seg.kv->dk.narrow(0, 0, seg.start).add_(b.dk_ctx);
          seg.kv->dv.narrow(0, 0, seg.start).add_(b.dv_ctx);
        }
      }
    }
    return {dq, dk, dv, Tensor()};
  }
};

void check_tensors(const Tensor& q, const Tensor& k, const Tensor& v) {
  TORCH_CHECK(q.dim() == 3 && k.dim() == 3 && v.dim() == 3,
              "chunk_attention: q, k, v must be [tokens, heads, head_dim], got ", q.sizes(), ", ",
              k.sizes(), ", ", v.sizes());
  TORCH_CHECK(k.sizes() == v.sizes(), "chunk_attention: k ", k.sizes(), " and v ", v.sizes(),
              " differ in shape");
  TORCH_CHECK(q.size(0) == k.size(0) && q.size(2) == k.size(2), "chunk_attention: q ", q.sizes(),
              " and k ", k.sizes(), " differ in tokens or head_dim");
  TORCH_CHECK(k.size(1) > 0 && q.size(1) % k.size(1) == 0, "chunk_attention: heads (", q.size(1),
              ") must be a multiple of kv_heads (", k.size(1), ")");
  TORCH_CHECK(q.scalar_type() == k.scalar_type() && q.scalar_type() == v.scalar_type(),
              "chunk_attention: q, k, v must share a dtype");
  TORCH_CHECK(q.device() == k.device() && q.device() == v.device(),
              "chunk_attention: q, k, v must be on one device");
  TORCH_CHECK(at::isFloatingType(q.scalar_type()), "chunk_attention: floating-point inputs only");
}

void check_buffer(const SequenceKV& kv, const Segment& s, size_t i, const Tensor& k) {
  TORCH_CHECK(kv.k.defined() && kv.k.dim() == 3 && kv.v.sizes() == kv.k.sizes() &&
                  kv.dk.defined() == kv.dv.defined() &&
                  (!kv.dk.defined() ||
                   (kv.dk.sizes() == kv.k.sizes() && kv.dv.sizes() == kv.k.sizes() &&
                    kv.dk.scalar_type() == kv.k.scalar_type() && kv.dk.device() == kv.k.device())),
              "chunk_attention: slice ", i, ": malformed K/V buffer");
  TORCH_CHECK(s.end() <= kv.seq_length(), "chunk_attention: slice ", i, " ends at ", s.end(),
              " beyond its K/V buffer of ", kv.seq_length(), " tokens");
  TORCH_CHECK(kv.kv_heads() == k.size(1) && kv.head_dim() == k.size(2), "chunk_attention: slice ",
              i, ": K/V buffer [", kv.seq_length(), ", ", kv.kv_heads(), ", ", kv.head_dim(),
              "] does not match k ", k.sizes());
  TORCH_CHECK(kv.k.scalar_type() == k.scalar_type() && kv.k.device() == k.device(),
              "chunk_attention: slice ", i, ": K/V buffer dtype/device (", kv.k.scalar_type(), ", ",
              kv.k.device(), ") differ from k (", k.scalar_type(), ", ", k.device(), ")");
  TORCH_CHECK(!kv.k.requires_grad() && !kv.v.requires_grad(),
              "chunk_attention: K/V buffers must not require grad");
}

// The slices laid out in rows, checked against the tensors: they tile the rows, a slice without
// a buffer is a whole sequence, a buffer fits its slice and serves one slice of the chunk.
std::vector<Segment> segments_of(const Tensor& k, const std::vector<Slice>& slices,
                                 const SliceBuffers& kv) {
  TORCH_CHECK(kv.empty() || kv.size() == slices.size(), "chunk_attention: ", kv.size(),
              " K/V buffers for ", slices.size(),
              " slices; give one per slice (null for a "
              "whole sequence) or none");
  std::vector<Segment> segments;
  int64_t row = 0;
  for (size_t i = 0; i < slices.size(); ++i) {
    const Slice& s = slices[i];
    TORCH_CHECK(s.start >= 0 && s.end > s.start, "chunk_attention: slice ", i, " [", s.start, ", ",
                s.end, ") of sequence ", s.seq, " is empty or negative");
    Segment seg{row, s.start, s.length(), kv.empty() ? nullptr : kv[i]};
    if (!seg.kv) {
      TORCH_CHECK(s.start == 0, "chunk_attention: slice ", i, " starts at ", s.start,
                  " of its sequence but has no K/V buffer; only whole sequences go without one");
    } else {
      check_buffer(*seg.kv, seg, i, k);
      for (size_t j = 0; j < i; ++j)
        TORCH_CHECK(segments[j].kv != seg.kv, "chunk_attention: slices ", j, " and ", i,
                    " share one K/V buffer; a chunk holds at most one slice of a sequence");
    }
    segments.push_back(std::move(seg));
    row += s.length();
  }
  TORCH_CHECK(row == k.size(0), "chunk_attention: the slices hold ", row, " tokens but q, k, v ",
              k.size(0), " rows; the slices must tile the rows in order");
  return segments;
}

}  // namespace

Backend parse_backend(const std::string& name) {
  if (name == "auto") return Backend::Auto;
  if (name == "flash") return Backend::Flash;
  if (name == "math") return Backend::Math;
  throw Error("attention backend must be 'auto', 'flash' or 'math', got '" + name + "'");
}

at::Tensor chunk_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                           const std::vector<Slice>& slices, const SliceBuffers& kv, double scale,
                           Backend backend) {
  check_tensors(q, k, v);
  auto plan = c10::make_intrusive<ChunkPlan>();
  plan->segments = segments_of(k, slices, kv);
  plan->scale = scale > 0 ? scale : 1.0 / std::sqrt(static_cast<double>(q.size(2)));
  switch (backend) {
    case Backend::Auto:
      plan->flash = q.device().is_cpu();
      break;
    case Backend::Flash:
      TORCH_CHECK(q.device().is_cpu(), "chunk_attention: the flash backend is CPU only");
      plan->flash = true;
      break;
    case Backend::Math:
      plan->flash = false;
      break;
  }
  return ChunkAttentionFunction::apply(q, k, v, std::move(plan));
}

}  // namespace infinipipe::kernels
