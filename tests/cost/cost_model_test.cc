#include "infinipipe/cost/cost_model.h"

#include <algorithm>
#include <functional>
#include <random>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "infinipipe/core/error.h"
#include "support/a800_cost.h"
#include "support/error_of.h"
#include "support/temp_file.h"

namespace infinipipe {
namespace {

using test_support::flat_a800;

CostModel llama7b(int stages) {
  return CostModel::analytic(ModelShape::builtin("llama-7b"), flat_a800(), stages);
}

// A chunk of `n` random slices; with probability 1/2 the first is a slice of a split sequence.
Chunk random_chunk(std::mt19937_64& rng, int n) {
  Chunk chunk;
  std::uniform_int_distribution<int64_t> length(1, 8192);
  for (int i = 0; i < n; ++i) {
    const int64_t len = length(rng);
    if (i == 0 && rng() % 2) {
      const int64_t context = length(rng), tail = length(rng) % 4 == 0 ? 0 : length(rng);
      chunk.slices.push_back({i, context, context + len, context + len + tail});
    } else {
      chunk.slices.push_back({i, 0, len, len});
    }
  }
  return chunk;
}

using test_support::error_of;

TEST(CostCoefficients, Llama7bFlopsMatchHandCount) {
  const ModelShape shape = ModelShape::builtin("llama-7b");
  const CostCoefficients c = CostCoefficients::analytic(shape, flat_a800());
  const double matmul_rate = 312e12 * 0.52, attention_rate = 312e12 * 0.5;
  // 2 FLOPs per GEMM weight per token: 2 * (202,383,360 - 8,192 norm gains) = 404,750,336.
  EXPECT_NEAR((c.a2 - 2 * 4096 / attention_rate) * matmul_rate, 404750336.0, 1e-3);
  // Attention: 2 * hidden FLOPs per unit of (c+s)^2 - c^2.
  EXPECT_NEAR(c.a1 * attention_rate, 8192.0, 1e-9);
  EXPECT_NEAR(c.head_s_per_token * matmul_rate, 2.0 * 4096 * 32000, 1e-3);
  EXPECT_EQ(c.backward_ratio, 2);
  // bf16: 2 * (4*4096 [two norms' normalised values and outputs] + 2*4096 [q, attention out]
  // + 2*4096 [k, v] + 4*11008 [SwiGLU]) = 153,600, plus fp32: the two norms' inputs 2*4096,
  // their rstd 2 and the log-sum-exp of 32 heads: 4 * 8226 = 32,904.
  EXPECT_EQ(c.activation_bytes, 186504.0);
  // fp32 log-softmax over 32000 + final norm (fp32 input and rstd, bf16 value and output) +
  // int64 target.
  EXPECT_EQ(c.logits_bytes, 4 * 32000 + 4 * 4097 + 2 * 2 * 4096 + 8.0);
  EXPECT_EQ(c.checkpoint_bytes, 2 * 4096.0);
  EXPECT_EQ(c.kv_bytes, 2 * 2 * 4096.0);
  // The lean layer: each norm keeps its bf16 input instead of the fp32 copy and the normalised
  // value (4 * 4096 less per norm), the SwiGLU not SiLU's output (2 * 11008 less), and the GEMM
  // inputs wait for the backward's refill (the norms' outputs, 2 * 2 * 4096, and the product,
  // 2 * 11008); the final norm keeps its input and rstd. The flat model's times as eager's.
  ModelShape lean_shape = shape;
  lean_shape.lean_layer = true;
  const CostCoefficients lean = CostCoefficients::analytic(lean_shape, flat_a800());
  EXPECT_EQ(lean.activation_bytes, 186504.0 - 2 * 4 * 4096 - 2 * 11008 - 2 * 2 * 4096 - 2 * 11008);
  EXPECT_EQ(lean.logits_bytes, c.logits_bytes - 4 * 4096);
  EXPECT_EQ(lean.a2, c.a2);
  EXPECT_EQ(lean.checkpoint_bytes, c.checkpoint_bytes);
  EXPECT_EQ(c.p2p_bytes_per_token, 2 * 4096.0);
  EXPECT_EQ(c.model_state_bytes_per_param, 16);
}

TEST(CostCoefficients, LeanLayerRefillIsInItsBackward) {
  // With size curves (the built-in A800) the backward has its own coefficients: the lean layer's
  // refill adds its element-wise bytes to backward_a2 (norms read and write h each, the product
  // reads two ffn and writes one), and a layer's backward holds the refilled tensors.
  ModelShape shape = ModelShape::builtin("llama-7b");
  const Hardware a800 = Hardware::builtin("a800");
  const CostCoefficients eager = CostCoefficients::analytic(shape, a800);
  shape.lean_layer = true;
  const CostCoefficients lean = CostCoefficients::analytic(shape, a800);
  EXPECT_EQ(lean.a2, eager.a2);
  EXPECT_NEAR(lean.backward_a2 - eager.backward_a2,
              (4.0 * 4096 + 3.0 * 11008) * 2 / a800.memory_bandwidth, 1e-18);
  Chunk chunk;
  chunk.slices.push_back({0, 0, 1000, 1000});
  const CostModel model = CostModel::analytic(shape, a800, 4);
  EXPECT_EQ(model.backward_workspace_bytes(chunk, 1),
            1000 * (lean.activation_bytes + 2.0 * (4096 + 2 * 4096 + 11008)));
}

TEST(CostCoefficients, StateBytesPerParamFollowsPrecision) {
  ModelShape shape = ModelShape::builtin("tiny");
  const Hardware hw = Hardware::builtin("cpu");
  EXPECT_EQ(CostCoefficients::analytic(shape, hw).model_state_bytes_per_param, 16);  // fp32 Adam
  shape.bytes_per_element = 8;
  EXPECT_EQ(CostCoefficients::analytic(shape, hw).model_state_bytes_per_param, 32);
  shape.bytes_per_element = 2;
  EXPECT_EQ(CostCoefficients::analytic(shape, hw).model_state_bytes_per_param, 16);
}

TEST(CostModel, AttentionTimeCountsEveryCausalPair) {
  // With a2's GEMM part removed, slice time over the attention rate must equal 4*hidden FLOPs
  // per (query, key) pair, counted one query at a time.
  const CostModel m = llama7b(4);
  const double attention_rate = 312e12 * 0.5, matmul_rate = 312e12 * 0.52;
  std::mt19937_64 rng(11);
  for (int trial = 0; trial < 200; ++trial) {
    const int64_t context = rng() % 5000, length = 1 + rng() % 5000;
    int64_t pairs = 0;
    for (int64_t q = context; q < context + length; ++q) pairs += q + 1;
    const double attention_s =
        m.slice_layer_time(context, length) - length * 404750336.0 / matmul_rate;
    EXPECT_NEAR(attention_s * attention_rate / (4.0 * 4096 * pairs), 1.0, 1e-9);
  }
}

TEST(CostModel, SlicesOfOneSequenceAddUpToTheWholeSequence) {
  const CostModel m = llama7b(4);
  std::mt19937_64 rng(3);
  for (int trial = 0; trial < 500; ++trial) {
    const int64_t n = 2 + rng() % 200000;
    const int cuts = 1 + rng() % 8;
    std::vector<int64_t> points = {0, n};
    for (int i = 0; i < cuts; ++i) points.push_back(1 + rng() % (n - 1));
    std::sort(points.begin(), points.end());
    double sum = 0;
    for (size_t i = 0; i + 1 < points.size(); ++i) {
      sum += m.slice_layer_time(points[i], points[i + 1] - points[i]);
    }
    EXPECT_NEAR(sum / m.slice_layer_time(0, n), 1.0, 1e-12);
  }
}

TEST(CostModel, LaterSlicesOfEqualLengthCostMore) {
  const CostModel m = llama7b(4);
  for (int64_t context = 0; context < 100000; context += 4096) {
    EXPECT_LT(m.slice_layer_time(context, 1024), m.slice_layer_time(context + 1, 1024));
  }
}

TEST(CostModel, CheckpointingTradesMemoryForTimeMonotonically) {
  std::mt19937_64 rng(5);
  const CostModel m = llama7b(4);
  for (int trial = 0; trial < 200; ++trial) {
    const Chunk chunk = random_chunk(rng, 1 + rng() % 6);
    const int stage = rng() % m.num_stages();
    for (int k = 0; k < m.layers(stage); ++k) {
      const double kept = m.activation_bytes(chunk, stage, k);
      const double kept_next = m.activation_bytes(chunk, stage, k + 1);
      EXPECT_LT(kept_next, kept);
      EXPECT_NEAR(kept - kept_next, m.checkpoint_saving_bytes(chunk, stage), 1e-6 * kept);
      const double recompute =
          m.backward_time(chunk, stage, k + 1) - m.backward_time(chunk, stage, k);
      EXPECT_NEAR(recompute / m.layer_forward_time(chunk), 1.0, 1e-9);
    }
  }
}

TEST(CostModel, CheckpointingAddsRForwardsChargedToTheBackward) {
  // A checkpointed layer's first forward runs without autograd at r of the recorded forward, so
  // checkpointing it adds r forwards net; the model charges that to the backward and leaves the
  // forward as it is, so F + B of every chunk is exact for any number of checkpointed layers.
  std::mt19937_64 rng(6);
  const CostModel plain = llama7b(4);
  CostCoefficients k = plain.coefficients();
  k.checkpointed_forward_ratio = 0.9;
  const CostModel m(plain.shape(), plain.layers_per_stage(), k);
  for (int trial = 0; trial < 50; ++trial) {
    const Chunk chunk = random_chunk(rng, 1 + rng() % 6);
    const int stage = rng() % m.num_stages();
    const int ckpt = 1 + rng() % m.layers(stage);
    const double f = m.layer_forward_time(chunk);
    EXPECT_EQ(m.forward_time(chunk, stage), plain.forward_time(chunk, stage));
    EXPECT_EQ(m.backward_time(chunk, stage, 0), plain.backward_time(chunk, stage, 0));
    EXPECT_NEAR(m.backward_time(chunk, stage, ckpt) - m.backward_time(chunk, stage, 0),
                ckpt * 0.9 * f, 1e-12 * f);
    EXPECT_NEAR(m.recompute_time(chunk, stage, ckpt), ckpt * 0.9 * f, 1e-12 * f);
    EXPECT_EQ(m.layer_recompute_time(chunk), 0.9 * f);
    // What the executor runs: (layers - ckpt) recorded forwards and ckpt at r in F, ckpt recorded
    // forwards again in B.
    const double executed = m.forward_time(chunk, stage) - ckpt * (1 - 0.9) * f +
                            plain.backward_time(chunk, stage, ckpt);
    EXPECT_NEAR(m.forward_time(chunk, stage) + m.backward_time(chunk, stage, ckpt), executed,
                1e-12 * executed);
  }
  // r = 1 (the analytic model, older files) is the model before r existed, bit for bit.
  EXPECT_EQ(plain.coefficients().checkpointed_forward_ratio, 1.0);
}

TEST(CostModel, SplitSlicesKeepTheirOwnKvBesidesTheBuffer) {
  // The chunk attention saves a slice's k and v for its backward although the sequence's K/V
  // buffer holds them too: a slice keeps as much as a whole sequence of its length.
  const CostModel m = llama7b(4);
  const Chunk whole{{{0, 0, 1000, 1000}}};
  const Chunk split{{{0, 2000, 3000, 5000}}};
  for (int ckpt = 0; ckpt <= m.layers(1); ++ckpt)
    EXPECT_EQ(m.activation_bytes(whole, 1, ckpt), m.activation_bytes(split, 1, ckpt));
  EXPECT_EQ(m.kv_buffer_bytes(5000, 1), m.layers(1) * 5000 * m.coefficients().kv_bytes);
}

TEST(CostCoefficients, TinyFloat64LayerCountsWhatTheEagerLayerSaves) {
  // The tests' model (hidden 32, 4 heads, 2 KV heads of 8, SwiGLU 64) in float64: per token the
  // eager layer saves, one storage each (python/infinipipe/models/llama.py with the chunk
  // attention): two norms x (input 32, rstd 1, normalised 32, output 32), q 32, k 16, v 16,
  // attention output 32, log-sum-exp 4, gate, up, SiLU, product 4 x 64 = 550 values.
  ModelShape shape = ModelShape::builtin("tiny");
  shape.hidden = 32, shape.heads = 4, shape.kv_heads = 2, shape.ffn = 64, shape.vocab = 97;
  shape.bytes_per_element = 8;
  const CostCoefficients c = CostCoefficients::analytic(shape, Hardware::builtin("cpu"));
  EXPECT_EQ(c.activation_bytes, 550 * 8.0);
  // final norm 97 values, log-softmax 97, target 8 bytes
  EXPECT_EQ(c.logits_bytes, (97 + 97) * 8.0 + 8);
  // fp32: the same values at 4 bytes (the compute dtype is the input's).
  shape.bytes_per_element = 4;
  EXPECT_EQ(CostCoefficients::analytic(shape, Hardware::builtin("cpu")).activation_bytes,
            550 * 4.0);
}

TEST(CostModel, PerChunkTermsAreRotaryTablesTokenIdsAndTheLoss) {
  // Fully checkpointed, a chunk keeps its layers' inputs plus what is shared by its layers:
  // rotary cos/sin (2 * head_dim), the token ids on the first stage, the loss on the last (per
  // token, and its 0-d total weight per chunk).
  const CostModel m = llama7b(4);  // bf16, head_dim 128
  std::mt19937_64 rng(13);
  for (int trial = 0; trial < 50; ++trial) {
    const Chunk chunk = random_chunk(rng, 1 + rng() % 4);
    const double tokens = chunk.tokens();
    for (int p = 0; p < m.num_stages(); ++p) {
      double expected = tokens * (m.layers(p) * m.coefficients().checkpoint_bytes + 2 * 128 * 2);
      if (p == 0) expected += tokens * 8;
      if (p == m.num_stages() - 1) expected += tokens * m.coefficients().logits_bytes + 8;
      EXPECT_NEAR(m.activation_bytes(chunk, p, m.layers(p)), expected, 1e-9 * expected);
    }
  }
}

TEST(CostModel, FirstAndLastStageExtras) {
  const CostModel m = llama7b(4);  // 8 layers per stage
  std::mt19937_64 rng(9);
  const Chunk chunk = random_chunk(rng, 4);
  const double tokens = chunk.tokens();
  EXPECT_NEAR(m.forward_time(chunk, 3) - m.forward_time(chunk, 1),
              tokens * m.coefficients().head_s_per_token, 1e-12);
  EXPECT_NEAR(m.activation_bytes(chunk, 3, 2) - m.activation_bytes(chunk, 1, 2),
              tokens * m.coefficients().logits_bytes + 8, 1e-3);
  EXPECT_NEAR(m.backward_time(chunk, 2, 0), 2 * m.forward_time(chunk, 2), 1e-12);
  EXPECT_NEAR(m.p2p_time(chunk, 0) - m.p2p_time(Chunk{}, 0), tokens * 2 * 4096 / 200e9, 1e-12);
  EXPECT_THROW(m.forward_time(chunk, 4), Error);
  EXPECT_THROW(m.backward_time(chunk, 0, 9), Error);
  EXPECT_THROW(m.activation_bytes(chunk, 0, -1), Error);
}

TEST(CostModel, SpreadHeadSplitsTheHeadOutOfTheLastStage) {
  const CostModel m = llama7b(4);
  std::mt19937_64 rng(10);
  const Chunk chunk = random_chunk(rng, 3);
  const double lf = m.layer_forward_time(chunk);
  const double head = m.head_forward_time(chunk);
  EXPECT_NEAR(head, chunk.tokens() * m.coefficients().head_s_per_token, 1e-15);
  // Without the head, the last stage's forward is a middle stage's; H is the rest of F and B.
  EXPECT_EQ(m.forward_time_with(chunk, 3, lf, false), m.forward_time(chunk, 1));
  EXPECT_NEAR(m.backward_time_with(chunk, 3, 2, lf, false), m.backward_time(chunk, 1, 2), 1e-15);
  EXPECT_NEAR(m.forward_time_with(chunk, 3, lf, false) +
                  m.backward_time_with(chunk, 3, 0, lf, false) + m.head_time(chunk),
              m.forward_time(chunk, 3) + m.backward_time(chunk, 3, 0), 1e-12);
  // Other stages have no head to leave out, and the default keeps it: bit for bit as before.
  EXPECT_EQ(m.forward_time_with(chunk, 0, lf, false), m.forward_time(chunk, 0));
  EXPECT_EQ(m.forward_time_with(chunk, 3, lf), m.forward_time(chunk, 3));
  // Held while H runs: the logits the last stage otherwise keeps from F to B.
  EXPECT_NEAR(m.head_logits_bytes(chunk),
              m.activation_bytes(chunk, 3, 2) - m.activation_bytes(chunk, 1, 2), 1e-3);
  // The replica: LM head and final norm, 16 bytes a parameter; the last stage holds it already.
  EXPECT_EQ(m.head_replica_bytes(), 16.0 * (32000.0 * 4096 + 4096));
  EXPECT_NEAR(m.model_state_bytes(3) - m.model_state_bytes(1), m.head_replica_bytes(), 1.0);
  // A head transfer is a pipeline send, over the slowest link between the two stages.
  EXPECT_EQ(m.head_transfer_time(chunk, 2), m.p2p_time(chunk, 2));
  EXPECT_EQ(m.head_transfer_time(chunk, 0), m.p2p_time(chunk, 0));
  EXPECT_THROW(m.head_transfer_time(chunk, 3), Error);
}

// The what-if of an evenly shared head: the same head work, logits and parameters over the
// stages, a 1/d share each; nothing else changes.
TEST(CostModel, IdealEvenHeadSharesTheHeadOverEveryStage) {
  const CostModel m = llama7b(4);
  const CostModel even = m.with_ideal_even_head();
  EXPECT_FALSE(m.ideal_even_head());
  EXPECT_TRUE(even.ideal_even_head());
  std::mt19937_64 rng(11);
  const Chunk chunk = random_chunk(rng, 3);
  const double share = m.head_forward_time(chunk) / 4;
  const double lf = m.layer_forward_time(chunk);
  double time = 0, even_time = 0, bytes = 0, even_bytes = 0, state = 0, even_state = 0;
  for (int p = 0; p < 4; ++p) {
    // Each stage: its own work (the first stage's embedding too) and a quarter of the head.
    const double own = m.forward_time_with(chunk, p, lf, false);
    EXPECT_NEAR(even.forward_time(chunk, p), own + share, 1e-12) << p;
    EXPECT_NEAR(even.backward_time(chunk, p, 1) - m.backward_time_with(chunk, p, 1, lf, false),
                m.coefficients().backward_ratio * share, 1e-12)
        << p;
    time += m.forward_time(chunk, p) + m.backward_time(chunk, p, 2);
    even_time += even.forward_time(chunk, p) + even.backward_time(chunk, p, 2);
    bytes += m.activation_bytes(chunk, p, 2);
    even_bytes += even.activation_bytes(chunk, p, 2);
    state += m.model_state_bytes(p);
    even_state += even.model_state_bytes(p);
  }
  EXPECT_NEAR(even_time, time, 1e-9 * time);
  EXPECT_NEAR(even_bytes, bytes, 1e-9 * bytes);
  EXPECT_NEAR(even_state, state, 1e-9 * state);
  // The last stage is lighter, the middle ones heavier, by the logits' and parameters' shares.
  EXPECT_NEAR(even.activation_bytes(chunk, 1, 2) - m.activation_bytes(chunk, 1, 2),
              m.head_logits_bytes(chunk) / 4, 1e-3);
  EXPECT_NEAR(even.model_state_bytes(1) - m.model_state_bytes(1), m.head_replica_bytes() / 4, 1.0);
  EXPECT_LT(even.model_state_bytes(3), m.model_state_bytes(3));
}

TEST(CostModel, MeasuredLayerBackwardReplacesTheRatioForLayersOnly) {
  const CostModel analytic = llama7b(4);
  CostCoefficients c = analytic.coefficients();
  EXPECT_FALSE(c.has_layer_backward());
  c.backward_a1 = 3 * c.a1, c.backward_a2 = 1.5 * c.a2, c.backward_b = 0;
  const CostModel m(analytic.shape(), analytic.layers_per_stage(), c);
  const Chunk chunk{{{0, 1000, 3000, 5000}, {1, 0, 700, 700}}};
  const double layer =
      3 * c.a1 * (2000.0 * (2 * 1000 + 2000) + 700.0 * 700) + 1.5 * c.a2 * (2000 + 700);
  EXPECT_NEAR(m.layer_backward_time(chunk), layer, 1e-12 * layer);
  EXPECT_NEAR(analytic.layer_backward_time(chunk), 2 * analytic.layer_forward_time(chunk), 1e-15);
  // Middle stages: layers only. The last stage adds g times the head's forward; recompute
  // adds forwards.
  EXPECT_NEAR(m.backward_time(chunk, 1, 0), 8 * layer, 1e-12);
  EXPECT_NEAR(
      m.backward_time(chunk, 3, 2) - m.backward_time(chunk, 1, 0),
      2 * (m.forward_time(chunk, 3) - m.forward_time(chunk, 1)) + 2 * m.layer_forward_time(chunk),
      1e-12);
}

// LLaMA-7B's GEMM FLOPs per token per layer (Llama7bFlopsMatchHandCount) and its element-wise
// bytes per token per layer in bf16: (12h + 2kv + 5f) * 2 with h = kv = 4096, f = 11008.
constexpr double kLlama7bGemmFlops = 404750336.0;
constexpr double kLlama7bElementwiseBytes = (12 * 4096 + 2 * 4096 + 5 * 11008) * 2.0;

// One 7B layer's forward over a chunk of one sequence of n tokens (context 0) on the H100, from
// the published points themselves: XLA's sm_90 GEMM table (m = n rows, n = k = 4096; clamped at
// 4096 rows) and FlashAttention-2's H100 causal forward+backward bars (hardware.cc).
double h100_layer_forward(double n, double gemm_tflops, double attention_tflops) {
  const double peak = 989e12;
  const double a1 = 2 * 4096 / (peak * attention_tflops * 1e12 / peak);
  return 16 * 3e-6 + n * kLlama7bGemmFlops / (gemm_tflops * 1e12) + a1 * n * n +
         n * (2 * 4096 / (328e12) + kLlama7bElementwiseBytes / 3.35e12);
}

TEST(CostModel, SmallChunksUnderUseTheGpuAsTheSourcesSay) {
  const CostModel h100 =
      CostModel::analytic(ModelShape::builtin("llama-7b"), Hardware::builtin("h100"), 1);
  const Chunk small{{{0, 0, 512, 512}}}, large{{{0, 0, 8192, 8192}}};
  // 512 rows: 644.12 TFLOP/s for the GEMMs, 163 for attention; 8192 rows: the GEMMs at the
  // table's largest, 783.33, attention 308.
  EXPECT_NEAR(h100.layer_forward_time(small) / h100_layer_forward(512, 644.12, 163), 1, 1e-12);
  EXPECT_NEAR(h100.layer_forward_time(large) / h100_layer_forward(8192, 783.33, 308), 1, 1e-12);
  // Per token, a 512-token chunk's GEMMs cost 783.33 / 644.12 = 1.216 times an 8K chunk's, on
  // the A800 too (its GEMM curve is the H100's shape, hardware.cc).
  for (const char* name : {"a800", "h100"}) {
    const CostCoefficients c =
        CostCoefficients::analytic(ModelShape::builtin("llama-7b"), Hardware::builtin(name));
    EXPECT_NEAR(c.gemm_s_per_token.at(512) / c.gemm_s_per_token.at(8192), 783.33 / 644.12, 1e-12)
        << name;
  }
  // Attention per pair: 512 against 16K tokens, 328/163 on the H100, 189/99 on the A800.
  const CostCoefficients a800 =
      CostCoefficients::analytic(ModelShape::builtin("llama-7b"), Hardware::builtin("a800"));
  const CostCoefficients& h = h100.coefficients();
  EXPECT_NEAR(h.attention_a1_by_length.at(512) / h.a1, 328.0 / 163, 1e-12);
  EXPECT_NEAR(a800.attention_a1_by_length.at(512) / a800.a1, 189.0 / 99, 1e-12);
}

TEST(CostModel, BackwardPricesInputAndWeightGradientsApart) {
  const CostModel m =
      CostModel::analytic(ModelShape::builtin("llama-7b"), Hardware::builtin("h100"), 1);
  const Chunk chunk{{{0, 0, 256, 256}}};
  // 256 rows: the input gradient at the forward's 412.03 TFLOP/s, the weight gradient (a sum over
  // the 256 rows) at 392.16; attention's backward 2.5 times its forward FLOPs at 163 - 512 is
  // the curve's first point, and 256 is below it (clamped).
  const double n = 256, peak = 989e12;
  const double expected =
      2 * 16 * 3e-6 + n * kLlama7bGemmFlops / 412.03e12 + n * kLlama7bGemmFlops / 392.16e12 +
      2.5 * 2 * 4096 / 163e12 * n * n +
      n * (2.5 * 2 * 4096 / (peak * (328e12 / peak)) + 2 * kLlama7bElementwiseBytes / 3.35e12);
  EXPECT_NEAR(m.layer_backward_time(chunk) / expected, 1, 1e-12);
}

TEST(CostModel, TheLmHeadIsAGemmByTheChunksRowsToo) {
  // LLaMA-7B's LM head (K = 4096, N = 32000) on the H100, 4 stages: forward at the table's rate
  // for the rows, 644.12 TFLOP/s at 512 and 783.33 from 4096 up; backward the input gradient at
  // that rate and the weight gradient at its own, 543.12 at 512.
  const CostModel m =
      CostModel::analytic(ModelShape::builtin("llama-7b"), Hardware::builtin("h100"), 4);
  const double flops = 2.0 * 4096 * 32000;  // per token
  const Chunk small{{{0, 0, 512, 512}}}, large{{{0, 0, 8192, 8192}}};
  EXPECT_NEAR(m.head_forward_time(small) / (512 * flops / 644.12e12), 1, 1e-12);
  EXPECT_NEAR(m.head_forward_time(large) / (8192 * flops / 783.33e12), 1, 1e-12);
  EXPECT_NEAR(m.head_backward_time(small) / (512 * flops * (1 / 644.12e12 + 1 / 543.12e12)), 1,
              1e-12);
  EXPECT_NEAR(m.head_time(large) / (8192 * flops * 3 / 783.33e12), 1, 1e-12);
  // The last stage's F and B with the head cost what they cost without it plus H, as before.
  for (const Chunk& c : {small, large}) {
    const double lf = m.layer_forward_time(c);
    EXPECT_NEAR(m.forward_time(c, 3) - m.forward_time_with(c, 3, lf, false), m.head_forward_time(c),
                1e-15);
    EXPECT_NEAR(m.backward_time(c, 3, 1) - m.backward_time_with(c, 3, 1, lf, false),
                m.head_backward_time(c), 1e-15);
  }
  // Under SP 8 a rank's head multiplies 512 of a 4096-token chunk's rows: the small chunk's rate.
  ParallelLayout sp8;
  sp8.sequence = 8;
  const CostModel split =
      CostModel::analytic(ModelShape::builtin("llama-7b"), Hardware::builtin("h100"), 4, sp8);
  EXPECT_NEAR(split.head_forward_time(Chunk{{{0, 0, 4096, 4096}}}), m.head_forward_time(small),
              1e-15);
}

TEST(CostModel, UnderSequenceParallelismAGemmSeesTheRanksRows) {
  // What a chunk's size adds beyond the full-size cost: with d_s = 8 a rank's GEMMs multiply 512
  // of a 4096-token chunk's rows, so they pay what one 512-token chunk's GEMMs pay on one rank;
  // its attention stays at length 4096, over 8 ranks' heads.
  ParallelLayout sp8;
  sp8.sequence = 8;
  const ModelShape shape = ModelShape::builtin("llama-7b");
  const CostModel alone = CostModel::analytic(shape, Hardware::builtin("a800"), 1);
  const CostModel split = CostModel::analytic(shape, Hardware::builtin("a800"), 1, sp8);
  const CostCoefficients& c = alone.coefficients();
  auto penalty = [&](const CostModel& m, int64_t n) {
    return m.layer_forward_time(Chunk{{{0, 0, n, n}}}) - c.b -
           m.slice_layer_time(0, n) / m.layout().sequence;
  };
  const double gemm_512 = 512 * (c.gemm_s_per_token.at(512) - c.gemm_s_per_token.last());
  auto attention = [&](double n) { return (c.attention_a1_by_length.at(n) - c.a1) * n * n; };
  EXPECT_GT(gemm_512, 0);
  EXPECT_NEAR(penalty(alone, 512), gemm_512 + attention(512), 1e-15);
  EXPECT_NEAR(penalty(split, 4096), gemm_512 + attention(4096) / 8, 1e-15);
  EXPECT_NEAR(penalty(alone, 4096), attention(4096), 1e-15);  // 4096 rows: the table's largest
}

TEST(CostModel, Llama13bModelStateSplitsOverStages) {
  const CostModel m =
      CostModel::analytic(ModelShape::builtin("llama-13b"), Hardware::builtin("a800"), 8);
  double total = 0;
  for (int p = 0; p < m.num_stages(); ++p) {
    // 13e9 params * 16 bytes / 8 stages = 26 GB per stage.
    EXPECT_NEAR(m.model_state_bytes(p) / (13e9 * 16 / 8), 1.0, 0.10) << "stage " << p;
    total += m.model_state_bytes(p);
  }
  EXPECT_EQ(total, 13015864320.0 * 16);  // every parameter on exactly one stage
}

TEST(CostModel, TinyModelOnCpuBuilds) {
  const CostModel m = CostModel::analytic(ModelShape::builtin("tiny"), Hardware::builtin("cpu"), 2);
  EXPECT_EQ(m.layers_per_stage(), (std::vector<int>{4, 4}));
  const Chunk chunk{{{0, 0, 512, 512}}};
  EXPECT_GT(m.forward_time(chunk, 0), 0);
  EXPECT_EQ(m.coefficients().checkpoint_bytes, 4 * 128.0);
  EXPECT_EQ(m.coefficients().kv_bytes, 4 * 2 * 64.0);
  EXPECT_THROW(CostModel::analytic(ModelShape::builtin("tiny"), Hardware::builtin("cpu"), 9),
               Error);
}

TEST(CostModel, ConstructorRejectsInconsistentStages) {
  const ModelShape shape = ModelShape::builtin("tiny");
  const CostCoefficients c = CostCoefficients::analytic(shape, Hardware::builtin("cpu"));
  EXPECT_NE(error_of([&] { CostModel(shape, {4, 3}, c); }).find("adds up to 7"), std::string::npos);
  EXPECT_NE(error_of([&] { CostModel(shape, {8, 0}, c); }).find("stage 1"), std::string::npos);
  CostCoefficients bad = c;
  bad.p2p_bandwidth = 0;
  EXPECT_NE(error_of([&] { CostModel(shape, {8}, bad); }).find("p2p_bandwidth"), std::string::npos);
}

class CostModelFile : public test_support::TempFileTest {
 protected:
  CostModelFile() : TempFileTest("cost_model_test.json") {}
};

TEST_F(CostModelFile, SizeCurvesSurviveSaveAndLoad) {
  CostModel m = CostModel::analytic(ModelShape::builtin("llama-13b"), Hardware::builtin("a800"), 4);
  save_cost_model(m, path_);
  const CostModel back = load_cost_model(path_);
  const Chunk chunk{{{0, 3000, 3700, 9000}, {1, 0, 300, 300}}};
  EXPECT_EQ(back.forward_time(chunk, 3), m.forward_time(chunk, 3));
  EXPECT_EQ(back.backward_time(chunk, 1, 2), m.backward_time(chunk, 1, 2));
  // Curves and a1 regimes measured by a profiler both price attention by size: one at a time.
  nlohmann::json j = m;
  j["coefficients"]["attention_query_cuts"] = {512};
  j["coefficients"]["a1_by_query"] = {1e-12, 1e-12};
  EXPECT_NE(error_of([&] { j.get<CostModel>(); }).find("keep one"), std::string::npos);
}

TEST_F(CostModelFile, SaveThenLoadGivesTheSameModel) {
  for (const std::string& name : {"llama-7b", "llama-30b", "tiny"}) {
    CostModel m = CostModel::analytic(ModelShape::builtin(name), Hardware::builtin("a800"), 3);
    save_cost_model(m, path_);
    const CostModel back = load_cost_model(path_);
    EXPECT_EQ(nlohmann::json(back), nlohmann::json(m));
    EXPECT_EQ(back.layers_per_stage(), m.layers_per_stage());
    EXPECT_EQ(back.coefficients().a1, m.coefficients().a1);  // doubles survive exactly
    EXPECT_EQ(back.coefficients().a2, m.coefficients().a2);
    const Chunk chunk{{{0, 100, 900, 1000}}};
    EXPECT_EQ(back.backward_time(chunk, 2, 1), m.backward_time(chunk, 2, 1));
    EXPECT_FALSE(nlohmann::json(m).contains("ideal_even_head"));  // the file it always wrote
    // The what-if survives a file, so a study reloading it plans what it planned.
    save_cost_model(m.with_ideal_even_head(), path_);
    EXPECT_TRUE(load_cost_model(path_).ideal_even_head());
    EXPECT_EQ(load_cost_model(path_).forward_time(chunk, 0),
              m.with_ideal_even_head().forward_time(chunk, 0));
  }
}

TEST(CostModel, AFileIsPlannedOnlyOnItsOwnLayerSplit) {
  // The trainer and the plan tool both call this: one rule for a cost file's split.
  const ModelShape shape = ModelShape::builtin("tiny");  // 8 layers
  const CostCoefficients c = CostCoefficients::analytic(shape, Hardware::builtin("cpu"));
  const CostModel file(shape, {2, 6}, c);
  EXPECT_NO_THROW(check_cost_file_split(file, "cost.json", {2, 6}, "the trainer"));
  EXPECT_EQ(error_of([&] {
              check_cost_file_split(file, "cost.json", {4, 4}, "the trainer");
            }),
            "the cost model cost.json splits the layers as [2, 6] but the trainer as [4, 4]; plan "
            "on the file's split or profile for this one (python -m infinipipe profile "
            "--layers-per-stage 4,4)");
  EXPECT_NE(error_of([&] {
              check_cost_file_split(file, "cost.json", {3, 3, 2}, "--stages 3");
            }).find("[2, 6] but --stages 3 as [3, 3, 2]"),
            std::string::npos);
}

TEST_F(CostModelFile, LoadErrorsNameTheFileAndTheProblem) {
  EXPECT_NE(error_of([&] { load_cost_model(path_ + ".missing"); }).find(path_ + ".missing"),
            std::string::npos);

  write("{\n  \"model\": {\n    \"name\": \"x\",,\n");
  const std::string syntax = error_of([&] { load_cost_model(path_); });
  EXPECT_NE(syntax.find(path_ + ":3:"), std::string::npos) << syntax;
  EXPECT_EQ(syntax.find("json.exception"), std::string::npos) << syntax;  // nlohmann's preamble

  nlohmann::json j = llama7b(2);
  j["coefficients"].erase("a1");
  write(j.dump(2));
  const std::string missing = error_of([&] { load_cost_model(path_); });
  EXPECT_NE(missing.find(path_), std::string::npos);
  EXPECT_NE(missing.find("missing field 'a1'"), std::string::npos) << missing;

  // Files written before the layer backward was measured apart still load: g alone.
  j = llama7b(2);
  for (const char* key : {"backward_a1", "backward_a2", "backward_b"}) j["coefficients"].erase(key);
  write(j.dump(2));
  EXPECT_FALSE(load_cost_model(path_).coefficients().has_layer_backward());
  j["coefficients"]["backward_b"] = -1;
  write(j.dump(2));
  EXPECT_NE(error_of([&] { load_cost_model(path_); }).find("backward_b"), std::string::npos);

  // The context term: absent (files before it, the analytic model) is 0 and not written back;
  // measured, it survives the round trip and is charged per slice; negative is refused.
  j = llama7b(2);
  EXPECT_FALSE(j["coefficients"].contains("a3"));
  j["coefficients"]["a3"] = 1.5e-7;
  j["coefficients"]["backward_a3"] = 6e-8;
  write(j.dump(2));
  const CostModel with_a3 = load_cost_model(path_);
  EXPECT_EQ(with_a3.coefficients().a3, 1.5e-7);
  EXPECT_EQ(nlohmann::json(with_a3)["coefficients"]["backward_a3"], 6e-8);
  const CostModel without = llama7b(2);
  EXPECT_NEAR(with_a3.slice_layer_time(4096, 512) - without.slice_layer_time(4096, 512),
              1.5e-7 * 4096, 1e-12);
  EXPECT_EQ(with_a3.slice_layer_time(0, 512), without.slice_layer_time(0, 512));
  j["coefficients"]["a3"] = -1;
  write(j.dump(2));
  EXPECT_NE(error_of([&] { load_cost_model(path_); }).find("a3"), std::string::npos);

  // Query regimes of a1: absent (the analytic model, older files) are not written back;
  // measured, they survive the round trip and choose each slice's a1 by its length; the three
  // fields must agree, with their name in the error.
  j = llama7b(2);
  EXPECT_FALSE(j["coefficients"].contains("attention_query_cuts"));
  const double a1 = j["coefficients"]["a1"];
  j["coefficients"]["attention_query_cuts"] = {192, 768};
  j["coefficients"]["a1_by_query"] = {3 * a1, 2 * a1, a1};
  j["coefficients"]["backward_a1_by_query"] = {6 * a1, 4 * a1, 2 * a1};
  write(j.dump(2));
  const CostModel regimes = load_cost_model(path_);
  EXPECT_EQ(nlohmann::json(regimes)["coefficients"]["a1_by_query"],
            j["coefficients"]["a1_by_query"]);
  const CostModel one_a1 = llama7b(2);
  EXPECT_EQ(regimes.slice_layer_time(4096, 768), one_a1.slice_layer_time(4096, 768));
  const double pairs = 500.0 * (2 * 4096 + 500);
  EXPECT_NEAR(regimes.slice_layer_time(4096, 500) - one_a1.slice_layer_time(4096, 500), a1 * pairs,
              1e-9 * a1 * pairs);
  EXPECT_NEAR(regimes.slice_layer_time(0, 100) - one_a1.slice_layer_time(0, 100), 2 * a1 * 1e4,
              1e-9 * a1 * 1e4);
  EXPECT_EQ(regimes.prefix_layer_time(100), one_a1.prefix_layer_time(100));
  EXPECT_EQ(one_a1.prefix_layer_time(100), one_a1.slice_layer_time(0, 100));
  j["coefficients"]["a1_by_query"] = {a1, a1};
  write(j.dump(2));
  EXPECT_NE(error_of([&] { load_cost_model(path_); }).find("one value per query regime"),
            std::string::npos);
  j["coefficients"]["a1_by_query"] = {a1, a1, a1};
  j["coefficients"]["attention_query_cuts"] = {768, 192};
  write(j.dump(2));
  EXPECT_NE(error_of([&] { load_cost_model(path_); }).find("attention_query_cuts must be"),
            std::string::npos);

  // r: absent is 1 and not written back; measured, it survives the round trip; outside (0, 2]
  // is refused with the field's name.
  j = llama7b(2);
  EXPECT_FALSE(j["coefficients"].contains("checkpointed_forward_ratio"));
  j["coefficients"]["checkpointed_forward_ratio"] = 0.93;
  write(j.dump(2));
  const CostModel with_r = load_cost_model(path_);
  EXPECT_EQ(with_r.coefficients().checkpointed_forward_ratio, 0.93);
  EXPECT_EQ(nlohmann::json(with_r)["coefficients"]["checkpointed_forward_ratio"], 0.93);
  for (double bad : {0.0, -0.5, 2.5}) {
    j["coefficients"]["checkpointed_forward_ratio"] = bad;
    write(j.dump(2));
    EXPECT_NE(error_of([&] { load_cost_model(path_); }).find("checkpointed_forward_ratio"),
              std::string::npos)
        << bad;
  }

  j = llama7b(2);
  j["layers_per_stage"] = {16, 15};
  write(j.dump(2));
  EXPECT_NE(error_of([&] { load_cost_model(path_); }).find("adds up to 31"), std::string::npos);

  j = llama7b(2);
  j["coefficients"]["a2"] = "fast";
  write(j.dump(2));
  EXPECT_NE(error_of([&] { load_cost_model(path_); }).find("'a2' must be a number"),
            std::string::npos);
}

// Found by fuzz/cost_model_fuzzer: nlohmann throws out_of_range, not parse_error, on a number
// beyond double's range, and it escaped load_cost_model as a foreign exception.
TEST_F(CostModelFile, NumberBeyondDoubleIsAnErrorNamingTheFile) {
  nlohmann::json j = llama7b(2);
  j["coefficients"]["a1"] = 12345.5;
  std::string text = j.dump(2);
  text.replace(text.find("12345.5"), 7, "1e999");
  write(text);
  const std::string message = error_of([&] { load_cost_model(path_); });
  EXPECT_NE(message.find(path_), std::string::npos) << message;
  EXPECT_NE(message.find("not valid JSON"), std::string::npos) << message;
  EXPECT_NE(message.find("number overflow"), std::string::npos) << message;
}

// Found by fuzz/cost_model_fuzzer: a float beyond int's range in an integer list was converted
// by nlohmann with undefined behaviour (UBSan); fractions were truncated.
TEST_F(CostModelFile, NumbersInLayerListsMustBeIntegersThatFit) {
  for (const nlohmann::json& bad :
       {nlohmann::json(4.9e19), nlohmann::json(16.5), nlohmann::json(9223372036854775808ULL)}) {
    nlohmann::json j = llama7b(2);
    j["layers_per_stage"][1] = bad;
    write(j.dump(2));
    const std::string message = error_of([&] { load_cost_model(path_); });
    EXPECT_NE(message.find("'layers_per_stage'[1]"), std::string::npos) << message;
    EXPECT_NE(message.find(path_), std::string::npos) << message;
  }
}

}  // namespace
}  // namespace infinipipe

namespace infinipipe {
namespace {

TEST(CostModel, WeightGradientsAreTheBackwardsWeightGemms) {
  const Chunk chunk{{{0, 1000, 3000, 5000}, {1, 0, 700, 700}}};  // 2700 tokens
  // Flat analytic: half of g a2 per token and layer.
  const CostModel flat =
      CostModel::analytic(ModelShape::builtin("llama-7b"), test_support::flat_a800(), 4);
  const CostCoefficients& f = flat.coefficients();
  EXPECT_NEAR(flat.weight_gradient_time(chunk, 1), 8 * 2700 * 0.5 * f.backward_ratio * f.a2, 1e-15);
  // Size-aware (H100): exactly the weight-gradient GEMMs at the chunk's rows, 2700 rows per
  // rank, and 1350 under SP 2 (each rank its half of the rows at their own efficiency).
  const CostModel h100 =
      CostModel::analytic(ModelShape::builtin("llama-7b"), Hardware::builtin("h100"), 4);
  const CostCoefficients& h = h100.coefficients();
  const Hardware hw = Hardware::builtin("h100");
  for (size_t i = 0; i < hw.weight_grad_efficiency_by_rows.sizes.size(); ++i) {
    const double rows = hw.weight_grad_efficiency_by_rows.sizes[i];
    const Chunk at_point{{{0, 0, static_cast<int64_t>(rows), static_cast<int64_t>(rows)}}};
    EXPECT_NEAR(h100.weight_gradient_time(at_point, 1) / (8 * rows) * hw.peak_flops *
                    hw.weight_grad_efficiency_by_rows.values[i],
                kLlama7bGemmFlops, 1e-9 * kLlama7bGemmFlops)
        << rows << " rows";
  }
  const double per_token = h.backward_gemm_s_per_token.at(2700) - h.gemm_s_per_token.at(2700);
  EXPECT_NEAR(h100.weight_gradient_time(chunk, 1), 8 * 2700 * per_token, 1e-15);
  ParallelLayout sp;
  sp.sequence = 2;
  const CostModel h100_sp =
      CostModel::analytic(ModelShape::builtin("llama-7b"), Hardware::builtin("h100"), 4, sp);
  EXPECT_NEAR(h100_sp.weight_gradient_time(chunk, 1),
              8 * 1350 * (h.backward_gemm_s_per_token.at(1350) - h.gemm_s_per_token.at(1350)),
              1e-15);
  // Measured backward: half its per-token term. Always less than the backward it comes out of.
  CostCoefficients measured = f;
  measured.backward_a1 = 3 * f.a1, measured.backward_a2 = 1.5 * f.a2;
  const CostModel m(flat.shape(), flat.layers_per_stage(), measured);
  EXPECT_NEAR(m.weight_gradient_time(chunk, 2), 8 * 2700 * 0.75 * f.a2, 1e-15);
  std::mt19937_64 rng(5);
  for (const CostModel* model : {&flat, &h100, &h100_sp, &m})
    for (int trial = 0; trial < 50; ++trial) {
      const Chunk c = random_chunk(rng, 1 + trial % 4);
      for (int p = 0; p < 4; ++p)
        EXPECT_LT(model->weight_gradient_time(c, p), model->backward_time(c, p, 0));
    }
}

}  // namespace
}  // namespace infinipipe

namespace infinipipe {
namespace {

TEST(CostModel, WhatAWeightActionNeedsIsCountedPerTokenAndLayer) {
  // LLaMA-7B in bf16 on 4 stages of 8 layers: h = kv_dim = 4096, ffn = 11008, vocab 32000.
  const CostModel m =
      CostModel::analytic(ModelShape::builtin("llama-7b"), Hardware::builtin("a800"), 4);
  const Chunk chunk{{{0, 0, 1000, 1000}}};
  const double h = 4096, f = 11008, v = 32000;
  EXPECT_DOUBLE_EQ(m.weight_input_bytes(chunk, 1), 1000 * 8 * (5 * h + f) * 2);
  EXPECT_DOUBLE_EQ(m.weight_gradient_bytes(chunk, 1), 1000 * 8 * (5 * h + 2 * h + 2 * f) * 2);
  // The last stage's head: its final norm's two inputs, the logits' and the norm's gradients.
  EXPECT_DOUBLE_EQ(m.weight_input_bytes(chunk, 3) - m.weight_input_bytes(chunk, 1),
                   1000 * 2 * h * 2);
  EXPECT_DOUBLE_EQ(m.weight_gradient_bytes(chunk, 3) - m.weight_gradient_bytes(chunk, 1),
                   1000 * (h + v) * 2);
  // Without the head (an H runs it) the last stage is a middle one; SP ranks hold their rows.
  EXPECT_DOUBLE_EQ(m.weight_input_bytes(chunk, 3, false), m.weight_input_bytes(chunk, 1));
  ParallelLayout sp;
  sp.sequence = 2;
  const CostModel halves =
      CostModel::analytic(ModelShape::builtin("llama-7b"), Hardware::builtin("a800"), 4, sp);
  EXPECT_DOUBLE_EQ(halves.weight_gradient_bytes(chunk, 1), m.weight_gradient_bytes(chunk, 1) / 2);
}

}  // namespace
}  // namespace infinipipe
