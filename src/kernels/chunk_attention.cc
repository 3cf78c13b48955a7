// Over 400 lines for a reason: one operation, chunk attention, forward and backward in each of its
// backends (CPU flash blocks merged by log-sum-exp, ATen's varlen flash and memory-efficient
// kernels, math), which share the per-slice K/V bookkeeping; the kernel choice and the varlen
// layout, free of LibTorch, are attention_layout.cc.
#include "infinipipe/kernels/chunk_attention.h"

#include <ATen/SDPBackend.h>
#include <ATen/ops/_efficient_attention_backward.h>
#include <ATen/ops/_efficient_attention_forward.h>
#include <ATen/ops/_flash_attention_backward.h>
#include <ATen/ops/_flash_attention_forward.h>
#include <ATen/ops/_fused_sdp_choice.h>
#include <ATen/ops/_scaled_dot_product_flash_attention_for_cpu.h>
#include <ATen/ops/_scaled_dot_product_flash_attention_for_cpu_backward.h>
#include <c10/util/Exception.h>
#include <torch/csrc/autograd/custom_function.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <mutex>
#include <set>
#include <tuple>
#include <utility>

#include "infinipipe/core/error.h"
#include "infinipipe/core/log.h"

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
    // merged in float32 at least (16-bit outputs are rounded once, at the end)
    const auto acc = at::promote_types(out.scalar_type(), at::kFloat);
    Tensor l1 = lse.to(acc), l2 = lse_ctx.to(acc);
    Tensor merged = at::logaddexp(l1, l2);
    Tensor w_diag = (l1 - merged).exp_().unsqueeze(-1);
    Tensor w_ctx = (l2 - merged).exp_().unsqueeze(-1);
    out = (out.to(acc) * w_diag + out_ctx.to(acc) * w_ctx).to(out.scalar_type());
    lse = merged.to(lse.scalar_type());
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
// [kv, g * s, D] every kv head is one batched matmul. 16-bit inputs are computed in float32 (as
// transformers' eager attention takes its softmax); the callers' copy_ rounds the results.

Tensor upcast(const Tensor& t) {
  return t.scalar_type() == at::kHalf || t.scalar_type() == at::kBFloat16 ? t.to(at::kFloat) : t;
}

struct MathLayout {
  int64_t s, end, kvh, g;
  Tensor qh, Kh, Vh;  // [kv, g*s, D], [kv, end, D], [kv, end, D]
  Tensor mask;        // [s, end] bool, true where masked (key after the query)
};

MathLayout math_layout(const Tensor& q16, const Tensor& K16, const Tensor& V16, int64_t start) {
  const Tensor q = upcast(q16), K = upcast(K16), V = upcast(V16);
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
  Tensor dOh = upcast(dout).permute({1, 0, 2}).reshape({m.kvh, m.g * m.s, D});
  Tensor Oh = upcast(out).permute({1, 0, 2}).reshape({m.kvh, m.g * m.s, D});
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

// --- the varlen layout: one fused call for the whole chunk (attention_layout.h) --------------

// The keys (which = 0) or values (1) of every entry back to back: [total_k, kv, D], contiguous.
Tensor gather_keys(const VarlenLayout& layout, const std::vector<Segment>& segments,
                   const Tensor& chunk_rows, int which) {
  auto buffer_rows = [&](const Segment& seg) {
    return (which == 0 ? seg.kv->k : seg.kv->v).narrow(0, 0, seg.end());
  };
  switch (layout.source) {
    case VarlenLayout::Source::ChunkRows:
      return chunk_rows.contiguous();
    case VarlenLayout::Source::OneBuffer:
      return buffer_rows(segments[0]);  // rows [0, end) of a contiguous buffer: contiguous
    case VarlenLayout::Source::Gathered:
      break;
  }
  std::vector<Tensor> pieces;
  for (size_t i = 0; i < segments.size(); ++i) {
    const Segment& seg = segments[i];
    pieces.push_back(seg.kv ? buffer_rows(seg) : chunk_rows.narrow(0, seg.row, seg.length));
  }
  return at::cat(pieces);
}

// What the fused forward leaves for its backward, beyond q, k, v and the output.
struct VarlenForward {
  Tensor out;         // [total_q, H, D]
  Tensor lse;         // the kernel's own log-sum-exp layout, handed back to its backward
  Tensor aux1, aux2;  // flash: rng_state, unused; efficient: philox seed, offset
};

struct VarlenBackward {
  Tensor dq;      // [total_q, H, D]
  Tensor dk, dv;  // [total_k, kv, D]
};

// Offsets as the CUDA kernels take them: int32 on the device.
Tensor offsets_on(const std::vector<int32_t>& cu, const at::Device& device) {
  return at::tensor(at::ArrayRef<int32_t>(cu), at::TensorOptions().dtype(at::kInt)).to(device);
}

// [total, kv, D] -> [total, kv * g, D]: head h of the result is kv head h / g (LLaMA's repeat_kv)
Tensor repeat_heads(const Tensor& t, int64_t g) {
  return g == 1 ? t : t.repeat_interleave(g, /*dim=*/1);
}

VarlenForward varlen_forward(Kernel kernel, const VarlenLayout& layout, const Tensor& q,
                             const Tensor& K, const Tensor& V, double scale) {
  VarlenForward f;
  if (kernel == Kernel::VarlenCpu) {
    // the fused call's semantics, entry by entry: bottom-right causal over [0, key_length)
    f.out = at::empty_like(q);
    std::vector<Tensor> lse;
    for (const auto& e : layout.entries) {
      SegmentForward s =
          flash_forward(q.narrow(0, e.row, e.length), K.narrow(0, e.key_offset, e.key_length),
                        V.narrow(0, e.key_offset, e.key_length), e.key_length - e.length, scale);
      f.out.narrow(0, e.row, e.length).copy_(s.out);
      lse.push_back(s.lse);
    }
    f.lse = at::cat(lse, /*dim=*/1);  // [H, total_q], as the CUDA flash kernel's
    return f;
  }
  const Tensor cu_q = offsets_on(layout.cu_seq_q, q.device());
  const Tensor cu_k = offsets_on(layout.cu_seq_k, q.device());
  if (kernel == Kernel::CudaFlash) {
    // query/key [total, heads, D]; grouped-query attention is the kernel's own (kv heads divide
    // heads); causal is aligned to the bottom right of every entry
    auto r = at::_flash_attention_forward(q, K, V, cu_q, cu_k, layout.max_q, layout.max_k,
                                          /*dropout_p=*/0.0, /*is_causal=*/true,
                                          /*return_debug_mask=*/false, scale);
    f.out = std::get<0>(r);
    f.lse = std::get<1>(r);
    f.aux1 = std::get<2>(r);
    f.aux2 = std::get<3>(r);
    return f;
  }
  // memory-efficient: [1, total, heads, D], as many kv heads as query heads
  const int64_t g = q.size(1) / K.size(1);
  constexpr int64_t kCausalFromBottomRight = 2;  // sdp::CustomMaskType
  auto r = at::_efficient_attention_forward(
      q.unsqueeze(0), repeat_heads(K, g).unsqueeze(0), repeat_heads(V, g).unsqueeze(0),
      /*bias=*/std::nullopt, cu_q, cu_k, layout.max_q, layout.max_k, /*dropout_p=*/0.0,
      kCausalFromBottomRight, /*compute_log_sumexp=*/true, scale);
  f.out = std::get<0>(r).squeeze(0);
  f.lse = std::get<1>(r);
  f.aux1 = std::get<2>(r);
  f.aux2 = std::get<3>(r);
  return f;
}

VarlenBackward varlen_backward(Kernel kernel, const VarlenLayout& layout, const Tensor& grad,
                               const Tensor& q, const Tensor& K, const Tensor& V, const Tensor& out,
                               const VarlenForward& f, double scale) {
  VarlenBackward b;
  if (kernel == Kernel::VarlenCpu) {
    b.dq = at::empty_like(q);
    b.dk = at::empty_like(K);
    b.dv = at::empty_like(V);
    for (const auto& e : layout.entries) {
      const int64_t context = e.key_length - e.length;
      SegmentBackward s =
          flash_backward(grad.narrow(0, e.row, e.length), q.narrow(0, e.row, e.length),
                         K.narrow(0, e.key_offset, e.key_length),
                         V.narrow(0, e.key_offset, e.key_length), out.narrow(0, e.row, e.length),
                         f.lse.narrow(1, e.row, e.length).contiguous(), context, scale);
      b.dq.narrow(0, e.row, e.length).copy_(s.dq);
      b.dk.narrow(0, e.own_offset(), e.length).copy_(s.dk_own);
      b.dv.narrow(0, e.own_offset(), e.length).copy_(s.dv_own);
      if (context > 0) {
        b.dk.narrow(0, e.key_offset, context).copy_(s.dk_ctx);
        b.dv.narrow(0, e.key_offset, context).copy_(s.dv_ctx);
      }
    }
    return b;
  }
  const Tensor cu_q = offsets_on(layout.cu_seq_q, q.device());
  const Tensor cu_k = offsets_on(layout.cu_seq_k, q.device());
  if (kernel == Kernel::CudaFlash) {
    auto r = at::_flash_attention_backward(grad, q, K, V, out, f.lse, cu_q, cu_k, layout.max_q,
                                           layout.max_k, /*dropout_p=*/0.0, /*is_causal=*/true,
                                           f.aux1, f.aux2, scale);
    b.dq = std::get<0>(r);
    b.dk = std::get<1>(r);
    b.dv = std::get<2>(r);
    return b;
  }
  const int64_t kvh = K.size(1), g = q.size(1) / kvh;
  constexpr int64_t kCausalFromBottomRight = 2;
  auto r = at::_efficient_attention_backward(
      grad.unsqueeze(0), q.unsqueeze(0), repeat_heads(K, g).unsqueeze(0),
      repeat_heads(V, g).unsqueeze(0), /*bias=*/std::nullopt, out.unsqueeze(0), cu_q, cu_k,
      layout.max_q, layout.max_k, f.lse, /*dropout_p=*/0.0, f.aux1, f.aux2, kCausalFromBottomRight,
      /*bias_requires_grad=*/false, scale);
  b.dq = std::get<0>(r).squeeze(0);
  // the repeated heads' gradients summed back onto their kv head
  auto fold = [&](const Tensor& t) {
    Tensor t3 = t.squeeze(0);
    return g == 1 ? t3 : t3.reshape({t3.size(0), kvh, g, t3.size(2)}).sum(2);
  };
  b.dk = fold(std::get<1>(r));
  b.dv = fold(std::get<2>(r));
  return b;
}

// --- autograd --------------------------------------------------------------------------------

struct ChunkPlan : torch::CustomClassHolder {
  std::vector<Segment> segments;
  double scale = 0.0;
  Kernel kernel = Kernel::CpuFlash;
  VarlenLayout layout;  // the varlen kernels' (VarlenCpu, CudaFlash, CudaEfficient)

  bool varlen() const { return kernel != Kernel::CpuFlash && kernel != Kernel::Math; }
};

// Writes one slice's gradients: its rows of dq, dk, dv, and for a slice of a split sequence the
// hand-over of what later slices accumulated in its buffer and the context part for earlier ones.
void scatter_segment(const Segment& seg, const SegmentBackward& b, Tensor& dq, Tensor& dk,
                     Tensor& dv) {
  if (b.dq.defined()) dq.narrow(0, seg.row, seg.length).copy_(b.dq);
  Tensor dks = dk.narrow(0, seg.row, seg.length);
  Tensor dvs = dv.narrow(0, seg.row, seg.length);
  dks.copy_(b.dk_own);
  dvs.copy_(b.dv_own);
  if (!seg.kv) return;
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

class ChunkAttentionFunction : public torch::autograd::Function<ChunkAttentionFunction> {
 public:
  static Tensor forward(torch::autograd::AutogradContext* ctx, const Tensor& q, const Tensor& k,
                        const Tensor& v, c10::intrusive_ptr<ChunkPlan> plan) {
    for (const Segment& seg : plan->segments) {
      if (!seg.kv) continue;
      seg.kv->k.narrow(0, seg.start, seg.length).copy_(k.narrow(0, seg.row, seg.length));
      seg.kv->v.narrow(0, seg.start, seg.length).copy_(v.narrow(0, seg.row, seg.length));
    }
    Tensor out;
    std::vector<Tensor> saved;
    if (plan->varlen()) {
      // the keys are gathered again by the backward (the buffers hold them): nothing of the
      // context is kept per chunk
      Tensor qc = q.contiguous();
      Tensor K = gather_keys(plan->layout, plan->segments, k, 0);
      Tensor V = gather_keys(plan->layout, plan->segments, v, 1);
      VarlenForward f = varlen_forward(plan->kernel, plan->layout, qc, K, V, plan->scale);
      out = f.out;
      saved = {qc, k, v, out, f.lse, f.aux1, f.aux2};
    } else {
      out = at::zeros_like(q);
      saved = {q, k, v, out};
      for (const Segment& seg : plan->segments) {
        Tensor qs = q.narrow(0, seg.row, seg.length);
        Tensor K = k.narrow(0, seg.row, seg.length), V = v.narrow(0, seg.row, seg.length);
        if (seg.kv) {
          K = seg.kv->k.narrow(0, 0, seg.end());
          V = seg.kv->v.narrow(0, 0, seg.end());
        }
        SegmentForward f = plan->kernel == Kernel::CpuFlash
                               ? flash_forward(qs, K, V, seg.start, plan->scale)
                               : math_forward(qs, K, V, seg.start, plan->scale);
        out.narrow(0, seg.row, seg.length).copy_(f.out);
        saved.push_back(f.lse);
      }
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
    if (plan->varlen()) {
      Tensor K = gather_keys(plan->layout, plan->segments, k, 0);
      Tensor V = gather_keys(plan->layout, plan->segments, v, 1);
      VarlenForward f{out, saved[4], saved[5], saved[6]};
      VarlenBackward b =
          varlen_backward(plan->kernel, plan->layout, grad, q, K, V, out, f, plan->scale);
      dq.copy_(b.dq);
      for (size_t i = 0; i < plan->segments.size(); ++i) {
        const auto& e = plan->layout.entries[i];
        SegmentBackward s;  // views of the gathered gradients
        s.dk_own = b.dk.narrow(0, e.own_offset(), e.length);
        s.dv_own = b.dv.narrow(0, e.own_offset(), e.length);
        if (e.start > 0) {
          s.dk_ctx = b.dk.narrow(0, e.key_offset, e.start);
          s.dv_ctx = b.dv.narrow(0, e.key_offset, e.start);
        }
        scatter_segment(plan->segments[i], s, dq, dk, dv);
      }
      return {dq, dk, dv, Tensor()};
    }
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
      SegmentBackward b = plan->kernel == Kernel::CpuFlash
                              ? flash_backward(gs, qs, K, V, os, lse, seg.start, plan->scale)
                              : math_backward(gs, qs, K, V, os, lse, seg.start, plan->scale);
      scatter_segment(seg, b, dq, dk, dv);
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

namespace {

ElementType element_type(at::ScalarType t) {
  switch (t) {
    case at::kHalf:
      return ElementType::Float16;
    case at::kBFloat16:
      return ElementType::BFloat16;
    case at::kFloat:
      return ElementType::Float32;
    case at::kDouble:
      return ElementType::Float64;
    default:
      return ElementType::Other;
  }
}

DeviceKind device_kind(const at::Device& d) {
  if (d.is_cpu()) return DeviceKind::Cpu;
  if (d.is_cuda()) return DeviceKind::Cuda;
  return DeviceKind::Other;
}

// Whether ATen runs its flash kernel for q's device, dtype and head size: ATen's own choice of
// fused kernel (_fused_sdp_choice) for a small causal batch of that shape, which checks the
// device's compute capability and torch.backends.cuda's switches. cuDNN's kernel needs a device
// at least as recent as flash's, so that answer counts as yes too. Asked once per device, dtype
// and head size.
bool device_supports_flash(const at::Tensor& q) {
  static std::mutex mutex;
  static std::map<std::tuple<int, int, int64_t>, bool> known;
  const auto key = std::make_tuple(static_cast<int>(q.device().index()),
                                   static_cast<int>(q.scalar_type()), q.size(2));
  std::lock_guard<std::mutex> lock(mutex);
  auto it = known.find(key);
  if (it != known.end()) return it->second;
  at::NoGradGuard no_grad;
  Tensor probe = at::zeros({1, q.size(1), 16, q.size(2)}, q.options().requires_grad(false));
  const int64_t choice = at::_fused_sdp_choice(probe, probe, probe, std::nullopt, 0.0,
                                               /*is_causal=*/true);
  const bool yes = choice == static_cast<int64_t>(at::SDPBackend::flash_attention) ||
                   choice == static_cast<int64_t>(at::SDPBackend::cudnn_attention);
  known.emplace(key, yes);
  return yes;
}

KernelChoice choice_for(const at::Tensor& q, Backend backend) {
  const DeviceKind device = device_kind(q.device());
  const ElementType dtype = element_type(q.scalar_type());
  // ask the device only when the answer matters: Auto/Varlen on CUDA, for the flash dtypes
  bool flash_ok = true;
  if (device == DeviceKind::Cuda && (backend == Backend::Auto || backend == Backend::Varlen) &&
      (dtype == ElementType::Float16 || dtype == ElementType::BFloat16))
    flash_ok = device_supports_flash(q);
  return choose_kernel(backend, device, dtype, q.size(2), flash_ok);
}

void warn_once(const std::string& message) {
  static std::mutex mutex;
  static std::set<std::string> said;
  std::lock_guard<std::mutex> lock(mutex);
  if (said.insert(message).second) log::warn(message);
}

}  // namespace

Kernel attention_kernel(const at::Tensor& q, Backend backend) {
  return choice_for(q, backend).kernel;
}

at::Tensor chunk_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                           const std::vector<Slice>& slices, const SliceBuffers& kv, double scale,
                           Backend backend) {
  check_tensors(q, k, v);
  auto plan = c10::make_intrusive<ChunkPlan>();
  plan->segments = segments_of(k, slices, kv);
  plan->scale = scale > 0 ? scale : 1.0 / std::sqrt(static_cast<double>(q.size(2)));
  KernelChoice choice = choice_for(q, backend);
  if (!choice.fallback_warning.empty()) warn_once(choice.fallback_warning);
  plan->kernel = choice.kernel;
  if (plan->varlen()) {
    std::vector<SegmentRows> rows;
    for (const Segment& seg : plan->segments)
      rows.push_back({seg.row, seg.start, seg.length, seg.kv != nullptr});
    plan->layout = varlen_layout(rows);
  }
  return ChunkAttentionFunction::apply(q, k, v, std::move(plan));
}

}  // namespace infinipipe::kernels
