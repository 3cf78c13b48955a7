// Over 400 lines for a reason: the cost model's time and memory terms of a chunk on a stage, which
// the planner and the simulator read together; what the parallel layout adds is
// cost_model_parallel.cc, the JSON fields json_fields.h.
#include "infinipipe/cost/cost_model.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <limits>
#include <numeric>
#include <sstream>

#include <nlohmann/json.hpp>

#include "infinipipe/core/error.h"
#include "infinipipe/core/json_errors.h"
#include "json_fields.h"

namespace infinipipe {

namespace {
// Token ids and targets are int64 tensors (torch's embedding and cross-entropy indices).
constexpr double kTokenIdBytes = 8;
// The cross-entropy's total weight, a 0-d tensor in the loss dtype (at most float64), kept per
// chunk for the backward.
constexpr double kLossTotalWeightBytes = 8;
}  // namespace

void check_query_cuts(const std::vector<int64_t>& cuts, const std::string& owner) {
  for (size_t i = 0; i < cuts.size(); ++i)
    check(cuts[i] > (i == 0 ? 0 : cuts[i - 1]),
          owner + ": attention_query_cuts must be positive and increasing, got " +
              std::to_string(cuts[i]) + " at position " + std::to_string(i));
}

CostCoefficients CostCoefficients::analytic(const ModelShape& shape, const Hardware& hw) {
  shape.validate();
  hw.validate();
  const double h = shape.hidden, f = shape.ffn, vocab = shape.vocab;
  const double kv_dim = double(shape.kv_heads) * shape.head_dim();
  const double bytes = shape.bytes_per_element;
  // With efficiency curves, the flat fractions are the curves' largest sizes (Hardware).
  const double matmul_rate = hw.peak_flops * hw.matmul_efficiency;
  const double attention_rate = hw.peak_flops * hw.attention_efficiency;

  CostCoefficients c;
  // Query i attends keys 0..i; QK^T and AV cost 2*h FLOPs each per (query, key) pair. A slice of
  // s tokens after context c has sum_{i=c}^{c+s-1} (i+1) = ((c+s)^2 - c^2 + s) / 2 pairs, i.e.
  // 2h((c+s)^2 - c^2) + 2h*s FLOPs: the quadratic part is a1, the linear remainder goes to a2.
  c.a1 = 2 * h / attention_rate;
  // Two FLOPs per weight per token over the layer's GEMMs. Element-wise work (norms, rotary,
  // SiLU, residual adds) is memory-bound and left out; the profiler's fitted a2 includes it.
  const double linear_flops_per_token = 2 * (2 * h * h + 2 * h * kv_dim + 3 * h * f);
  c.a2 = linear_flops_per_token / matmul_rate + 2 * h / attention_rate;
  c.b = hw.layer_overhead_s;
  // Backward computes the gradients of both a GEMM's input and its weight, each as many FLOPs as
  // the forward (Narayanan et al. SC'21 count training as 3x forward); flash attention's backward
  // is about 2.5x its forward (Dao 2023), close enough at one shared ratio.
  c.backward_ratio = 2;
  // Element-wise work moves bytes rather than FLOPs. Per token, eager: each RMSNorm reads and
  // writes h, rotary reads and writes q and k, SiLU reads gate and writes f, the product reads
  // two f and writes one, each residual add reads two h and writes one: (12h + 2kv + 5f) * b.
  // Each backward reads what its forward saved and the gradient and writes a gradient: about
  // twice that.
  const double elementwise_s =
      hw.memory_bandwidth > 0 ? (12 * h + 2 * kv_dim + 5 * f) * bytes / hw.memory_bandwidth : 0.0;
  if (hw.matmul_efficiency_by_rows.empty() && hw.attention_efficiency_by_length.empty()) {
    c.a2 += elementwise_s;  // + 0.0 without a memory bandwidth: the flat model to the bit
  } else {
    // Size-aware: the GEMMs and attention of each size at its efficiency; a1, a2 (a1', a2') at
    // the largest sizes (CostCoefficients). Backward apart: a GEMM's input gradient is its
    // forward's shape (M rows), its weight gradient sums over the M rows (its own curve, else
    // the forward's); flash attention's backward is 2.5 times its forward's FLOPs (the
    // convention of the benchmarks the curve comes from), at the same measured rate.
    constexpr double kAttentionBackwardFlops = 2.5;
    const SizeCurve& rows = hw.matmul_efficiency_by_rows;
    const SizeCurve& weight_grad =
        hw.weight_grad_efficiency_by_rows.empty() ? rows : hw.weight_grad_efficiency_by_rows;
    for (size_t i = 0; i < rows.sizes.size(); ++i) {
      const double forward = linear_flops_per_token / (hw.peak_flops * rows.values[i]);
      c.gemm_s_per_token.sizes.push_back(rows.sizes[i]);
      c.gemm_s_per_token.values.push_back(forward);
      c.backward_gemm_s_per_token.sizes.push_back(rows.sizes[i]);
      c.backward_gemm_s_per_token.values.push_back(
          forward + linear_flops_per_token / (hw.peak_flops * weight_grad.values[i]));
    }
    for (size_t i = 0; i < hw.attention_efficiency_by_length.sizes.size(); ++i) {
      const double a1 = 2 * h / (hw.peak_flops * hw.attention_efficiency_by_length.values[i]);
      c.attention_a1_by_length.sizes.push_back(hw.attention_efficiency_by_length.sizes[i]);
      c.attention_a1_by_length.values.push_back(a1);
      c.backward_attention_a1_by_length.sizes.push_back(hw.attention_efficiency_by_length.sizes[i]);
      c.backward_attention_a1_by_length.values.push_back(kAttentionBackwardFlops * a1);
    }
    const double gemm =
        rows.empty() ? linear_flops_per_token / matmul_rate : c.gemm_s_per_token.last();
    const double backward_gemm = rows.empty() ? 2 * linear_flops_per_token / matmul_rate
                                              : c.backward_gemm_s_per_token.last();
    c.a2 = gemm + 2 * h / attention_rate + elementwise_s;
    c.backward_a1 = kAttentionBackwardFlops * c.a1;
    // The lean layer's refill (lean::Refill, models/lean_layer.h), counted as the forward's
    // element-wise work is: each norm reads and writes h, the product reads two f and writes
    // one. (The flat model, a backward of backward_ratio forwards, leaves it within that
    // approximation.)
    const double refill_s = shape.lean_layer && hw.memory_bandwidth > 0
                                ? (4 * h + 3 * f) * bytes / hw.memory_bandwidth
                                : 0.0;
    c.backward_a2 = backward_gemm + kAttentionBackwardFlops * 2 * h / attention_rate +
                    2 * elementwise_s + refill_s;
    // The backward launches about twice the forward's kernels, as backward_ratio charged it.
    c.backward_b = c.backward_ratio * c.b;
  }
  // The embedding is a gather of bytes*h per token: ~16 KB at 7B, nanoseconds at HBM bandwidth
  // against microseconds per token per layer, so it is left at zero.
  c.embedding_s_per_token = 0;
  // LM head GEMM (h x vocab); the final norm and the loss are element-wise, left out as above.
  c.head_s_per_token = 2 * h * vocab / matmul_rate;

  // Per token per layer, what autograd keeps for the backward. The terms follow Korthikanti et
  // al. 2022 ("Reducing Activation Recomputation in Large Transformer Models", Sec. 4.1), redone
  // for a LLaMA layer (RMSNorm, rotary GQA, SwiGLU, no dropout) with flash attention (no s^2
  // scores kept), and counted from what this project's layer (python/infinipipe/models/llama.py
  // with kernels/chunk_attention.cc) actually saves, measured with saved-tensor hooks: every
  // tensor below is a storage that autograd holds from the forward to the backward.
  //   b = bytes per element; cb = max(b, 4): the norms and the attention statistics run in at
  //   least fp32 (transformers' LlamaRMSNorm upcasts; flash attention keeps an fp32 or fp64
  //   log-sum-exp).
  //   Each RMSNorm (two per layer), 2h*b + h*cb + cb:
  //     h*cb  its input in the compute dtype: x.pow(2) and x * rstd need it. In fp32/fp64 this is
  //           the residual stream itself (the layer input, the post-attention residual sum); in
  //           bf16 it is the fp32 copy, and the bf16 residual is not kept.
  //     cb    rstd, one per token: (x * rstd) and rsqrt need it.
  //     h*b   the normalised value before the gain: the gain's weight gradient needs it.
  //     h*b   the gain's output: the input of the q/k/v (or gate/up) projections, whose weight
  //           gradients need it.
  //     A fused RMSNorm kernel (apex, Megatron) keeps input and rstd and recomputes the
  //     normalised value in its backward; ours is eager and keeps it, so its h*b is counted.
  //   Attention, (2h + 2kv)*b + heads*cb:
  //     h*b   q after rotary, kv*b k after rotary, kv*b v: saved by the chunk attention for the
  //           flash backward. For slices of split sequences k and v are saved as well, although
  //           the sequence's K/V buffer holds a copy (kv_bytes, counted by kv_buffer_bytes).
  //     h*b   the attention output: flash backward needs it, and it is the o-projection's input
  //           (one storage, counted once).
  //     heads*cb  the softmax log-sum-exp per head.
  //     The rotary products keep cos/sin rather than q/k, and those tables are shared by all
  //     layers of a chunk: counted once per chunk in CostModel::activation_bytes.
  //   SwiGLU MLP, 4f*b: gate output (SiLU's backward), SiLU output and up output (the product's
  //     backward), the product (the down projection's input).
  //   The residual adds keep nothing.
  // Sum: b*(6h + 2kv + 4f) + cb*(2h + 2 + heads).
  //   The lean layer (ModelShape::lean_layer; models/lean_layer.h: its norm, SwiGLU and
  //   Refill) keeps per norm its input in the model's dtype and rstd, and recomputes the
  //   normalised value in its backward: h*cb less per norm (the compute-dtype copy and the
  //   normalised value give way to the input, h*b). Its SwiGLU keeps the gate and up outputs and
  //   recomputes SiLU's: f*b less. And it frees its GEMMs' inputs, the norms' outputs and the
  //   SwiGLU product, from the forward to the layer's backward, which refills them first: 2h*b +
  //   f*b less. Sum: b*(4h + 2kv + 2f) + cb*(2 + heads), 50% less than eager at LLaMA-13B in
  //   bf16. Its forward is the eager one's; its backward adds the refill (backward_a2 above).
  //   Measured on the 2-core dev CPU (2 layers, hidden 1024, 2048 tokens, one thread, median of
  //   10 to 16 runs each, alternating), lean over eager forward + backward: float32 0.992,
  //   1.057 and 1.009 in three runs, bf16 0.996 and 1.004; one pair of runs spreads from 0.86
  //   to 1.13 there, so the refill's few tenths of a percent are below that machine's noise.
  //   A profile of the lean layer (--lean-layer) measures its times.
  const double cb = std::max(bytes, 4.0);
  c.activation_bytes = shape.lean_layer
                           ? bytes * (4 * h + 2 * kv_dim + 2 * f) + cb * (2 + shape.heads)
                           : bytes * (6 * h + 2 * kv_dim + 4 * f) + cb * (2 * h + 2 + shape.heads);
  c.checkpoint_bytes = bytes * h;  // the layer input, from which the layer is recomputed
  c.kv_bytes = bytes * 2 * kv_dim;
  // Last stage, per token: the final RMSNorm (as above, 2h*b + h*cb + cb; lean 2h*b + cb), the
  // cross-entropy's log-softmax output over the vocabulary in the loss dtype (at least fp32: the
  // executor casts bf16 logits up; the logits themselves are not kept) and its int64 targets.
  c.logits_bytes =
      cb * vocab + 2 * bytes * h + cb * ((shape.lean_layer ? 0 : h) + 1) + kTokenIdBytes;
  // bf16 mixed precision with Adam: 2 weight + 2 gradient + 4 fp32 master weight + 4 + 4 Adam
  // moments = 16 bytes/param (Rajbhandari et al. 2020, ZeRO, Sec. 3.1). Full precision (fp32
  // or fp64, the CPU models) has no master copy: weight + gradient + two moments = 4 * bytes.
  c.model_state_bytes_per_param = bytes == 2 ? 16 : 4 * bytes;
  c.p2p_bytes_per_token = bytes * h;
  c.p2p_bandwidth = hw.link_bandwidth;
  c.p2p_latency_s = hw.link_latency_s;
  c.inter_node_bandwidth = hw.inter_node_bandwidth;
  c.inter_node_latency_s = hw.inter_node_latency_s;
  return c;
}

void CostCoefficients::validate() const {
  auto at_least_zero = [](double value, const char* field) {
    check(std::isfinite(value) && value >= 0, std::string("cost coefficients: ") + field +
                                                  " must be zero or positive, got " +
                                                  std::to_string(value));
  };
  auto positive = [](double value, const char* field) {
    check(std::isfinite(value) && value > 0, std::string("cost coefficients: ") + field +
                                                 " must be positive, got " + std::to_string(value));
  };
  at_least_zero(a1, "a1");
  at_least_zero(a2, "a2");
  at_least_zero(b, "b");
  at_least_zero(a3, "a3");
  positive(backward_ratio, "backward_ratio");
  check(std::isfinite(checkpointed_forward_ratio) && checkpointed_forward_ratio > 0 &&
            checkpointed_forward_ratio <= 2,
        "cost coefficients: checkpointed_forward_ratio (what checkpointing a layer adds net, over "
        "its recorded forward) must be in (0, 2], got " +
            std::to_string(checkpointed_forward_ratio) + "; profile again or remove the field");
  at_least_zero(backward_a1, "backward_a1");
  at_least_zero(backward_a2, "backward_a2");
  at_least_zero(backward_b, "backward_b");
  at_least_zero(backward_a3, "backward_a3");
  check_query_cuts(attention_query_cuts, "cost coefficients");
  const size_t regimes = attention_query_cuts.size() + 1;
  check(attention_query_cuts.empty() == a1_by_query.empty() &&
            (a1_by_query.empty() || a1_by_query.size() == regimes) &&
            (backward_a1_by_query.empty() || backward_a1_by_query.size() == regimes),
        "cost coefficients: a1_by_query and backward_a1_by_query need one value per query regime "
        "(" +
            std::to_string(regimes) + " for " + std::to_string(attention_query_cuts.size()) +
            " attention_query_cuts), got " + std::to_string(a1_by_query.size()) + " and " +
            std::to_string(backward_a1_by_query.size()) + "; profile again or remove all three");
  for (double v : a1_by_query) at_least_zero(v, "a1_by_query");
  const double inf = std::numeric_limits<double>::infinity();
  auto curve = [&](const SizeCurve& c, const char* field) {
    if (!c.empty()) c.validate(std::string("cost coefficients: ") + field, 0, inf);
  };
  curve(gemm_s_per_token, "gemm_s_per_token");
  curve(backward_gemm_s_per_token, "backward_gemm_s_per_token");
  curve(attention_a1_by_length, "attention_a1_by_length");
  curve(backward_attention_a1_by_length, "backward_attention_a1_by_length");
  check(attention_query_cuts.empty() || attention_a1_by_length.empty(),
        "cost coefficients: attention_query_cuts and attention_a1_by_length both price attention "
        "by size; keep one");
  check(gemm_s_per_token.empty() || gemm_s_per_token.last() <= a2,
        "cost coefficients: a2 must include the GEMMs' cost at their largest size, the last "
        "value of gemm_s_per_token");
  for (double v : backward_a1_by_query) at_least_zero(v, "backward_a1_by_query");
  at_least_zero(embedding_s_per_token, "embedding_s_per_token");
  at_least_zero(head_s_per_token, "head_s_per_token");
  at_least_zero(activation_bytes, "activation_bytes");
  at_least_zero(checkpoint_bytes, "checkpoint_bytes");
  at_least_zero(kv_bytes, "kv_bytes");
  at_least_zero(logits_bytes, "logits_bytes");
  positive(model_state_bytes_per_param, "model_state_bytes_per_param");
  at_least_zero(p2p_bytes_per_token, "p2p_bytes_per_token");
  positive(p2p_bandwidth, "p2p_bandwidth");
  at_least_zero(p2p_latency_s, "p2p_latency_s");
  at_least_zero(inter_node_bandwidth, "inter_node_bandwidth");
  at_least_zero(inter_node_latency_s, "inter_node_latency_s");
  at_least_zero(alltoall_bandwidth, "alltoall_bandwidth");
  at_least_zero(alltoall_latency_s, "alltoall_latency_s");
  check(checkpoint_bytes <= activation_bytes,
        "cost coefficients: checkpoint_bytes (" + std::to_string(checkpoint_bytes) +
            ") exceeds activation_bytes (" + std::to_string(activation_bytes) +
            "): a checkpointed layer cannot keep more than a full one");
  check(kv_bytes <= activation_bytes, "cost coefficients: kv_bytes (" + std::to_string(kv_bytes) +
                                          ") exceeds activation_bytes (" +
                                          std::to_string(activation_bytes) +
                                          "), which must include the K/V");
}

void to_json(nlohmann::json& j, const CostCoefficients& c) {
  j = nlohmann::json{{"a1", c.a1},
                     {"a2", c.a2},
                     {"b", c.b},
                     {"backward_ratio", c.backward_ratio},
                     {"backward_a1", c.backward_a1},
                     {"backward_a2", c.backward_a2},
                     {"backward_b", c.backward_b},
                     {"embedding_s_per_token", c.embedding_s_per_token},
                     {"head_s_per_token", c.head_s_per_token},
                     {"activation_bytes", c.activation_bytes},
                     {"checkpoint_bytes", c.checkpoint_bytes},
                     {"kv_bytes", c.kv_bytes},
                     {"logits_bytes", c.logits_bytes},
                     {"model_state_bytes_per_param", c.model_state_bytes_per_param},
                     {"p2p_bytes_per_token", c.p2p_bytes_per_token},
                     {"p2p_bandwidth", c.p2p_bandwidth},
                     {"p2p_latency_s", c.p2p_latency_s},
                     {"inter_node_bandwidth", c.inter_node_bandwidth},
                     {"inter_node_latency_s", c.inter_node_latency_s}};
  // Written only when measured, so files (and fingerprints) without them stay as they were.
  if (c.a3 > 0 || c.backward_a3 > 0) {
    j["a3"] = c.a3;
    j["backward_a3"] = c.backward_a3;
  }
  if (c.checkpointed_forward_ratio != 1)
    j["checkpointed_forward_ratio"] = c.checkpointed_forward_ratio;
  if (!c.attention_query_cuts.empty()) {
    j["attention_query_cuts"] = c.attention_query_cuts;
    j["a1_by_query"] = c.a1_by_query;
    if (!c.backward_a1_by_query.empty()) j["backward_a1_by_query"] = c.backward_a1_by_query;
  }
  if (c.alltoall_bandwidth > 0) {
    j["alltoall_bandwidth"] = c.alltoall_bandwidth;
    j["alltoall_latency_s"] = c.alltoall_latency_s;
  }
  auto curve = [&](const SizeCurve& c, const char* field) {
    if (!c.empty()) j[field] = c;
  };
  curve(c.gemm_s_per_token, "gemm_s_per_token");
  curve(c.backward_gemm_s_per_token, "backward_gemm_s_per_token");
  curve(c.attention_a1_by_length, "attention_a1_by_length");
  curve(c.backward_attention_a1_by_length, "backward_attention_a1_by_length");
}

void from_json(const nlohmann::json& j, CostCoefficients& c) {
  detail::JsonFields f(j, "cost coefficients");
  f.get("a1", c.a1);
  f.get("a2", c.a2);
  f.get("b", c.b);
  f.get("backward_ratio", c.backward_ratio);
  f.get_optional("backward_a1", c.backward_a1);  // absent in files written before they existed
  f.get_optional("backward_a2", c.backward_a2);
  f.get_optional("backward_b", c.backward_b);
  f.get_optional("a3", c.a3);  // absent in files written before it existed: 0
  f.get_optional("backward_a3", c.backward_a3);
  f.get_optional("checkpointed_forward_ratio", c.checkpointed_forward_ratio);  // absent: 1
  f.get_optional("attention_query_cuts", c.attention_query_cuts);              // absent: one a1
  f.get_optional("a1_by_query", c.a1_by_query);
  f.get_optional("backward_a1_by_query", c.backward_a1_by_query);
  f.get("embedding_s_per_token", c.embedding_s_per_token);
  f.get("head_s_per_token", c.head_s_per_token);
  f.get("activation_bytes", c.activation_bytes);
  f.get("checkpoint_bytes", c.checkpoint_bytes);
  f.get("kv_bytes", c.kv_bytes);
  f.get("logits_bytes", c.logits_bytes);
  f.get("model_state_bytes_per_param", c.model_state_bytes_per_param);
  f.get("p2p_bytes_per_token", c.p2p_bytes_per_token);
  f.get("p2p_bandwidth", c.p2p_bandwidth);
  f.get("p2p_latency_s", c.p2p_latency_s);
  f.get_optional("inter_node_bandwidth", c.inter_node_bandwidth);  // absent: one link
  f.get_optional("inter_node_latency_s", c.inter_node_latency_s);
  f.get_optional("alltoall_bandwidth", c.alltoall_bandwidth);  // absent: the in-node link
  f.get_optional("alltoall_latency_s", c.alltoall_latency_s);
  f.get_optional("gemm_s_per_token", c.gemm_s_per_token);  // absent: one cost for every size
  f.get_optional("backward_gemm_s_per_token", c.backward_gemm_s_per_token);
  f.get_optional("attention_a1_by_length", c.attention_a1_by_length);
  f.get_optional("backward_attention_a1_by_length", c.backward_attention_a1_by_length);
  f.finish();
  c.validate();
}

// --- CostModel ---------------------------------------------------------------------------

CostModel::CostModel(ModelShape shape, std::vector<int> layers_per_stage,
                     CostCoefficients coefficients, ParallelLayout layout)
    : shape_(std::move(shape)),
      layers_per_stage_(std::move(layers_per_stage)),
      coefficients_(coefficients),
      layout_(layout) {
  shape_.validate();
  coefficients_.validate();
  check(!layers_per_stage_.empty(),
        "cost model: layers_per_stage is empty; give one entry per "
        "pipeline stage");
  for (size_t p = 0; p < layers_per_stage_.size(); ++p) {
    check(layers_per_stage_[p] >= 1, "cost model: stage " + std::to_string(p) + " has " +
                                         std::to_string(layers_per_stage_[p]) +
                                         " layers; every stage needs at least one");
  }
  const int total = std::accumulate(layers_per_stage_.begin(), layers_per_stage_.end(), 0);
  check(total == shape_.layers, "cost model: layers_per_stage adds up to " + std::to_string(total) +
                                    " but model '" + shape_.name + "' has " +
                                    std::to_string(shape_.layers) + " layers");
  layout_.check_fits(shape_);
  set_links();
}

CostModel CostModel::analytic(const ModelShape& shape, const Hardware& hw, int stages,
                              const ParallelLayout& layout) {
  return CostModel(shape, even_layer_split(shape.layers, stages),
                   CostCoefficients::analytic(shape, hw), layout);
}

namespace {
// Called on every cost query in the planner's inner loops: build the message only on failure,
// out of line, so the check itself inlines to a comparison.
[[noreturn, gnu::noinline, gnu::cold]] void stage_out_of_range(const CostModel& m, int stage) {
  throw Error("cost model: stage " + std::to_string(stage) + " out of range [0, " +
              std::to_string(m.num_stages()) + ")");
}
inline void check_stage(const CostModel& m, int stage) {
  if (__builtin_expect(stage < 0 || stage >= m.num_stages(), 0)) stage_out_of_range(m, stage);
}
}  // namespace

double CostModel::slice_layer_time(int64_t context, int64_t length) const {
  const double c = double(context), s = double(length);
  // (c+s)^2 - c^2 written as s(2c+s), which does not cancel catastrophically for long contexts.
  // a3 * c is added last, so a model without it (a3 = 0) gives the same bits as before.
  return coefficients_.attention_a1(length) * s * (2 * c + s) + coefficients_.a2 * s +
         coefficients_.a3 * c;
}

double CostModel::prefix_layer_time(int64_t tokens) const {
  const double s = double(tokens);
  return coefficients_.a1 * s * (2 * 0.0 + s) + coefficients_.a2 * s + coefficients_.a3 * 0.0;
}

double CostModel::layer_forward_time(const Chunk& chunk) const {
  // Each SP rank does 1/d_s of every slice's work (its tokens through the GEMMs, its heads
  // through attention); b, launches, every rank pays in full. x / 1.0 is exact: d_s = 1 is the
  // layout-free model to the bit.
  const double d_s = layout_.sequence;
  double t = coefficients_.b;
  for (const Slice& s : chunk.slices) t += slice_layer_time(s.context(), s.length()) / d_s;
  if (coefficients_.has_size_curves())
    t += size_penalty(chunk, coefficients_.gemm_s_per_token, coefficients_.attention_a1_by_length);
  return t;
}

double CostModel::size_penalty(const Chunk& chunk, const SizeCurve& gemm,
                               const SizeCurve& a1) const {
  const double d_s = layout_.sequence;
  double t = 0;
  if (!gemm.empty()) {
    const double rows = double(chunk.tokens()) / d_s;
    t += rows * (gemm.at(rows) - gemm.last());
  }
  if (!a1.empty()) {
    for (const Slice& s : chunk.slices) {
      const double c = double(s.context()), n = double(s.length());
      t += (a1.at(2 * c + n) - a1.last()) * n * (2 * c + n) / d_s;
    }
  }
  return t;
}

double CostModel::layer_backward_time(const Chunk& chunk) const {
  const CostCoefficients& k = coefficients_;
  if (!k.has_layer_backward()) return k.backward_ratio * layer_forward_time(chunk);
  const double d_s = layout_.sequence;
  double t = k.backward_b;
  for (const Slice& s : chunk.slices) {
    const double c = double(s.context()), n = double(s.length());
    t += (k.backward_attention_a1(s.length()) * n * (2 * c + n) + k.backward_a2 * n +
          k.backward_a3 * c) /
         d_s;
  }
  if (k.has_size_curves())
    t += size_penalty(chunk, k.backward_gemm_s_per_token, k.backward_attention_a1_by_length);
  return t;
}

double CostModel::weight_gradient_time(const Chunk& chunk, int stage) const {
  check_stage(*this, stage);
  const CostCoefficients& k = coefficients_;
  const double rows = double(chunk.tokens()) / layout_.sequence;
  double per_token = 0;
  if (!k.backward_gemm_s_per_token.empty() && !k.gemm_s_per_token.empty()) {
    // Size-aware: the backward's GEMM curve is the input gradient's (the forward's shape) plus
    // the weight gradient's (CostCoefficients::analytic), each at this chunk's rows.
    per_token = k.backward_gemm_s_per_token.at(rows) - k.gemm_s_per_token.at(rows);
  } else {
    // A GEMM's weight gradient has its input gradient's FLOPs: half the per-token term.
    constexpr double kWeightShare = 0.5;
    per_token = kWeightShare * (k.has_layer_backward() ? k.backward_a2 : k.backward_ratio * k.a2);
  }
  return layers(stage) * rows * per_token;
}

double CostModel::compute_forward_time(const Chunk& chunk, int stage, double layer_forward,
                                       bool with_head) const {
  check_stage(*this, stage);
  // max(x, 0.0) is x: without ZeRO-3 the layers' time to the bit.
  double t = layers(stage) * std::max(layer_forward, gather_s_[stage]);
  if (stage == 0) t += embedding_forward_time(chunk);
  if (with_head && ideal_even_head_)
    t += head_forward_time(chunk) / num_stages();
  else if (with_head && stage == num_stages() - 1)
    t += head_forward_time(chunk);
  return t;
}

CostModel CostModel::with_ideal_even_head() const {
  CostModel out = *this;
  out.ideal_even_head_ = true;
  return out;
}

double CostModel::embedding_forward_time(const Chunk& chunk) const {
  // max(x, 0.0) is x: without ZeRO-3 the gather of bytes to the bit.
  const double gather =
      double(chunk.tokens()) * coefficients_.embedding_s_per_token / layout_.sequence;
  return std::max(gather, embedding_gather_s_);
}

double CostModel::embedding_backward_time(const Chunk& chunk) const {
  const double gather =
      double(chunk.tokens()) * coefficients_.embedding_s_per_token / layout_.sequence;
  return std::max(coefficients_.backward_ratio * gather, 2 * embedding_gather_s_);
}

namespace {
// The head's GEMM of the chunk without ZeRO-3's gathers, forward (`curve` the forward GEMM
// curve) or backward (the backward one): head_s_per_token is the forward at the largest size,
// so it is scaled by the curve's value at the chunk's rows per rank over that largest value.
double head_compute(const CostCoefficients& k, const Chunk& chunk, double d_s,
                    const SizeCurve& curve) {
  const double t = double(chunk.tokens()) * k.head_s_per_token / d_s;
  if (k.gemm_s_per_token.empty() || curve.empty()) return t;
  return t * curve.at(double(chunk.tokens()) / d_s) / k.gemm_s_per_token.last();
}
}  // namespace

double CostModel::head_forward_time(const Chunk& chunk) const {
  const CostCoefficients& k = coefficients_;
  return std::max(head_compute(k, chunk, layout_.sequence, k.gemm_s_per_token), head_gather_s_);
}

double CostModel::head_backward_time(const Chunk& chunk) const {
  const CostCoefficients& k = coefficients_;
  const double compute =
      k.gemm_s_per_token.empty() || k.backward_gemm_s_per_token.empty()
          ? k.backward_ratio * head_compute(k, chunk, layout_.sequence, k.gemm_s_per_token)
          : head_compute(k, chunk, layout_.sequence, k.backward_gemm_s_per_token);
  return std::max(compute, 2 * head_gather_s_);
}

double CostModel::head_time(const Chunk& chunk) const {
  return head_forward_time(chunk) + head_backward_time(chunk);
}

double CostModel::head_logits_bytes(const Chunk& chunk) const {
  return (double(chunk.tokens()) * coefficients_.logits_bytes + kLossTotalWeightBytes) /
         layout_.sequence;
}

double CostModel::forward_time(const Chunk& chunk, int stage) const {
  return forward_time_with(chunk, stage, layer_forward_time(chunk));
}

double CostModel::forward_time_with(const Chunk& chunk, int stage, double layer_forward,
                                    bool with_head) const {
  // Adding 0.0 (d_s = 1: no all-to-all) is exact.
  return compute_forward_time(chunk, stage, layer_forward, with_head) +
         layers(stage) * layer_alltoall_time(chunk, stage);
}

double CostModel::backward_time(const Chunk& chunk, int stage, int checkpointed_layers) const {
  return backward_time_with(chunk, stage, checkpointed_layers, layer_forward_time(chunk));
}

double CostModel::backward_time_with(const Chunk& chunk, int stage, int checkpointed_layers,
                                     double layer_forward, bool with_head) const {
  check_stage(*this, stage);
  if (checkpointed_layers < 0 || checkpointed_layers > layers(stage))
    throw Error("cost model: " + std::to_string(checkpointed_layers) +
                " checkpointed layers on stage " + std::to_string(stage) + ", which has " +
                std::to_string(layers(stage)));
  const double layer_alltoall = layer_alltoall_time(chunk, stage);
  const double recompute = recompute_time(checkpointed_layers, layer_forward, layer_alltoall);
  // The backward's own all-to-alls: as many as the forward's (gradients of the output in, of
  // q, k, v back). Written as a last term so that d_s = 1 adds an exact 0.0.
  const double alltoall = layers(stage) * layer_alltoall;
  const double g = coefficients_.backward_ratio;
  const double forward = compute_forward_time(chunk, stage, layer_forward, with_head);
  if (!coefficients_.has_layer_backward()) return g * forward + recompute + alltoall;
  // The embedding's and the head's backward: g times their forward, written so that a model
  // without size curves or ZeRO-3 gives the bits it always gave; else each by its own function.
  double extras = 0;
  if (coefficients_.gemm_s_per_token.empty() && embedding_gather_s_ == 0 && head_gather_s_ == 0) {
    extras = g * (forward - layers(stage) * std::max(layer_forward, gather_s_[stage]));
  } else {
    if (stage == 0) extras += embedding_backward_time(chunk);
    if (with_head && ideal_even_head_)
      extras += head_backward_time(chunk) / num_stages();
    else if (with_head && stage == num_stages() - 1)
      extras += head_backward_time(chunk);
  }
  return layers(stage) * std::max(layer_backward_time(chunk), 2 * gather_s_[stage]) + extras +
         recompute + alltoall;
}

namespace {
// Bytes one full (not checkpointed) layer keeps for the chunk, all SP ranks together. Slices of
// split sequences keep their own K/V too (the chunk attention saves its k and v inputs), on top
// of the sequence's K/V buffer, so every token counts the same. With d_s > 1 the attention
// output is two storages, not one (coefficients' comment): the head-sharded output flash
// backward keeps, and the token-sharded o-projection input the exchange back makes, one more
// hidden vector per token (measured: without it an SP rank held 5% more than predicted).
double full_layer_bytes(const CostModel& cost, const Chunk& chunk) {
  const double sp_output_copy = cost.layout().sequence > 1
                                    ? double(cost.shape().bytes_per_element) * cost.shape().hidden
                                    : 0.0;
  return double(chunk.tokens()) * (cost.coefficients().activation_bytes + sp_output_copy);
}
}  // namespace

double CostModel::activation_bytes(const Chunk& chunk, int stage, int checkpointed_layers) const {
  check_stage(*this, stage);
  if (checkpointed_layers < 0 || checkpointed_layers > layers(stage))
    throw Error("cost model: " + std::to_string(checkpointed_layers) +
                " checkpointed layers on stage " + std::to_string(stage) + ", which has " +
                std::to_string(layers(stage)));
  const double tokens = double(chunk.tokens());
  double bytes = (layers(stage) - checkpointed_layers) * full_layer_bytes(*this, chunk) +
                 checkpointed_layers * tokens * coefficients_.checkpoint_bytes;
  // Per chunk, shared by its layers: the rotary cos and sin tables [tokens, head_dim] that the
  // rotary products keep. Counted even when every layer is checkpointed (then nothing keeps
  // them until the recompute), so that activation bytes stay linear in the checkpointed layers
  // as the checkpoint planner assumes.
  bytes += tokens * 2.0 * shape_.head_dim() * shape_.bytes_per_element;
  // The embedding's output is layer 0's input, already counted there; its backward keeps the
  // token ids.
  if (stage == 0) bytes += tokens * kTokenIdBytes;
  if (ideal_even_head_)
    bytes += (tokens * coefficients_.logits_bytes + kLossTotalWeightBytes) / num_stages();
  else if (stage == num_stages() - 1)
    bytes += tokens * coefficients_.logits_bytes + kLossTotalWeightBytes;
  // An SP rank holds 1/d_s of the chunk's tokens outside attention and 1/d_s of its heads inside
  // (q, k, v, the output and the log-sum-exp over all tokens), so 1/d_s of every term (the
  // loss's 8-byte total weight too, a rounding error). Dividing by 1.0 is exact.
  return bytes / layout_.sequence;
}

double CostModel::checkpoint_saving_bytes(const Chunk& chunk, int stage) const {
  check_stage(*this, stage);
  return (full_layer_bytes(*this, chunk) -
          double(chunk.tokens()) * coefficients_.checkpoint_bytes) /
         layout_.sequence;
}

double CostModel::backward_workspace_bytes(const Chunk& chunk, int stage) const {
  check_stage(*this, stage);
  const double tokens = double(chunk.tokens());
  // One layer's activations plus the gradient flowing into it (one hidden vector per token);
  // the lean layer's refilled GEMM inputs besides (forward_workspace_bytes).
  return (full_layer_bytes(*this, chunk) +
          tokens * double(shape_.bytes_per_element) * shape_.hidden) /
             layout_.sequence +
         forward_workspace_bytes(chunk, stage);
}

double CostModel::forward_workspace_bytes(const Chunk& chunk, int stage) const {
  check_stage(*this, stage);
  if (!shape_.lean_layer) return 0.0;
  return double(chunk.tokens()) * double(shape_.bytes_per_element) *
         (2.0 * shape_.hidden + shape_.ffn) / layout_.sequence;
}

double CostModel::weight_gradient_bytes(const Chunk& chunk, int stage, bool with_head) const {
  check_stage(*this, stage);
  const double h = shape_.hidden, f = shape_.ffn;
  const double kv_dim = double(shape_.kv_heads) * shape_.head_dim();
  double per_token = layers(stage) * (5 * h + 2 * kv_dim + 2 * f);
  const double head = h + shape_.vocab;
  if (with_head && ideal_even_head_)
    per_token += head / num_stages();
  else if (with_head && stage == num_stages() - 1)
    per_token += head;
  // Each SP rank multiplies its own rows.
  return double(chunk.tokens()) * per_token * shape_.bytes_per_element / layout_.sequence;
}

double CostModel::weight_input_bytes(const Chunk& chunk, int stage, bool with_head) const {
  check_stage(*this, stage);
  const double h = shape_.hidden, f = shape_.ffn;
  double per_token = layers(stage) * (5 * h + f);
  if (with_head && ideal_even_head_)
    per_token += 2 * h / num_stages();
  else if (with_head && stage == num_stages() - 1)
    per_token += 2 * h;
  return double(chunk.tokens()) * per_token * shape_.bytes_per_element / layout_.sequence;
}

double CostModel::kv_buffer_bytes(int64_t seq_length, int stage) const {
  check_stage(*this, stage);
  // An SP rank keeps the K/V of its kv_heads / d_s heads over the whole sequence.
  return double(layers(stage)) * double(seq_length) * coefficients_.kv_bytes / layout_.sequence;
}

// --- JSON --------------------------------------------------------------------------------

void to_json(nlohmann::json& j, const CostModel& m) {
  j = nlohmann::json{{"model", m.shape()},
                     {"layers_per_stage", m.layers_per_stage()},
                     {"coefficients", m.coefficients()}};
  // Only when set, so a cost model without a layout writes the file it always wrote.
  if (m.layout() != ParallelLayout{}) j["layout"] = m.layout();
  if (m.ideal_even_head()) j["ideal_even_head"] = true;
}

void from_json(const nlohmann::json& j, CostModel& m) {
  detail::JsonFields f(j, "cost model");
  ModelShape shape;
  std::vector<int> layers_per_stage;
  CostCoefficients coefficients;
  ParallelLayout layout;
  f.get("model", shape);
  f.get("layers_per_stage", layers_per_stage);
  f.get("coefficients", coefficients);
  f.get_optional("layout", layout);  // absent in files written before it existed
  bool ideal_even_head = false;
  f.get_optional("ideal_even_head", ideal_even_head);
  f.finish();
  m = CostModel(shape, layers_per_stage, coefficients, layout);
  if (ideal_even_head) m = m.with_ideal_even_head();
}

CostModel load_cost_model(const std::string& path) {
  std::ifstream in(path);
  check(in.good(), "cannot open cost model file '" + path + "'");
  std::stringstream buffer;
  buffer << in.rdbuf();
  const std::string text = buffer.str();
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(text);
  } catch (const nlohmann::json::parse_error& e) {
    // nlohmann reports a byte offset; a line and column are what an editor can jump to.
    const size_t end = std::min<size_t>(e.byte, text.size());
    int line = 1;
    size_t line_start = 0;
    for (size_t i = 0; i + 1 < end; ++i) {
      if (text[i] == '\n') ++line, line_start = i + 1;
    }
    throw Error(path + ":" + std::to_string(line) + ":" + std::to_string(end - line_start) +
                ": not valid JSON: " + json_error_text(e));
  } catch (const nlohmann::json::exception& e) {
    // A number beyond double's range ("1e999") is out_of_range, not a parse_error.
    throw Error(path + ": not valid JSON: " + json_error_text(e));
  }
  try {
    return j.get<CostModel>();
  } catch (const Error& e) {
    throw Error(path + ": " + e.what());
  }
}

void save_cost_model(const CostModel& model, const std::string& path) {
  std::ofstream out(path);
  check(out.good(), "cannot write cost model file '" + path + "'");
  out << nlohmann::json(model).dump(2) << "\n";
  check(out.good(), "error while writing cost model file '" + path + "'");
}

void check_cost_file_split(const CostModel& file, const std::string& path,
                           const std::vector<int>& planned, const std::string& whose) {
  if (file.layers_per_stage() == planned) return;
  auto list = [](const std::vector<int>& split, const char* separator) {
    std::string out;
    for (int layers : split) out += (out.empty() ? "" : separator) + std::to_string(layers);
    return out;
  };
  throw Error("the cost model " + path + " splits the layers as [" +
              list(file.layers_per_stage(), ", ") + "] but " + whose + " as [" +
              list(planned, ", ") +
              "]; plan on the file's split or profile for this one "
              "(python -m infinipipe profile --layers-per-stage " +
              list(planned, ",") + ")");
}

}  // namespace infinipipe
