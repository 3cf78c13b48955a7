// cost_model_parallel.cc: what the parallel layout does to the cost model: the Ulysses
// all-to-all, the links, ZeRO's model state; and (cost_model.cc) the division of compute and
// memory over d_s.
#include <random>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "infinipipe/core/error.h"
#include "infinipipe/cost/cost_model.h"
#include "support/a800_cost.h"
#include "support/error_of.h"

namespace infinipipe {
namespace {

using test_support::expect_error;

ParallelLayout layout(int sequence, int data = 1, int zero = 1) {
  ParallelLayout l;
  l.sequence = sequence;
  l.data = data;
  l.zero = zero;
  return l;
}

CostModel model(const std::string& name, int stages, const ParallelLayout& l = {}) {
  return CostModel::analytic(ModelShape::builtin(name), Hardware::builtin("a800"), stages, l);
}

// Without size curves, so that d_s divides every slice's work exactly (with them a rank's GEMMs
// run at its share of the rows: cost_model_test.cc, UnderSequenceParallelismAGemmSeesTheRanksRows).
CostModel flat_model(const std::string& name, int stages, const ParallelLayout& l = {}) {
  return CostModel::analytic(ModelShape::builtin(name), test_support::flat_a800(), stages, l);
}

Chunk whole(int64_t tokens) { return Chunk{{Slice{0, 0, tokens, tokens}}}; }

TEST(CostModelParallel, AlltoallTimeIsTheUlyssesFormula) {
  // LLaMA-13B, d_s = 8 in one node: 8192 tokens, 1024 rows per rank of q, k, v and the output
  // (4 x 5120 x 2 bytes), 7/8 of them sent over NVLink (200 GB/s), 4 latencies of 10 us.
  const CostModel sp8 = model("llama-13b", 4, layout(8));
  EXPECT_NEAR(sp8.layer_alltoall_time(whole(8192), 0), 1024.0 * 40960 * 7 / 8 / 200e9 + 4 * 1e-5,
              1e-15);
  // LLaMA-7B, d_s = 16 spans two nodes: InfiniBand HDR (25 GB/s) and 20 us per all-to-all.
  const CostModel sp16 = model("llama-7b", 2, layout(16));
  EXPECT_NEAR(sp16.layer_alltoall_time(whole(8192), 1), 512.0 * 32768 * 15 / 16 / 25e9 + 4 * 2e-5,
              1e-15);
  // Without SP there is none.
  EXPECT_EQ(model("llama-13b", 4).layer_alltoall_time(whole(8192), 0), 0);
}

TEST(CostModelParallel, GradientSyncIsARingOverTheGradientGroupsLink) {
  // LLaMA-13B on 4 stages, stage 1: 10 layers of bf16 gradients. d_s = 8 in a node, ZeRO-1:
  // reduce-scatter + all-gather, 2 x 7/8 of the bytes over NVLink (200 GB/s), two latencies.
  const CostModel sp8 = model("llama-13b", 4, layout(8));
  const double bytes = 10.0 * sp8.shape().params_per_layer() * 2;
  EXPECT_NEAR(sp8.gradient_sync_time(1), 2 * 7.0 / 8 * bytes / 200e9 + 2 * 1e-5, 1e-15);
  // Two replicas: 16 ranks on two nodes, over InfiniBand (25 GB/s, 20 us).
  const CostModel dp2 = model("llama-13b", 4, layout(8, 2));
  EXPECT_NEAR(dp2.gradient_sync_time(1), 2 * 15.0 / 16 * bytes / 25e9 + 2 * 2e-5, 1e-15);
  // ZeRO-0 all-reduces the same bytes; the end stages sync their embedding and head too.
  EXPECT_EQ(model("llama-13b", 4, layout(8, 1, 0)).gradient_sync_time(1),
            sp8.gradient_sync_time(1));
  EXPECT_GT(sp8.gradient_sync_time(3), sp8.gradient_sync_time(1));
  // Nothing to sync alone; ZeRO-3's collectives are priced per chunk instead.
  EXPECT_EQ(model("llama-13b", 4).gradient_sync_time(1), 0);
  EXPECT_EQ(model("llama-13b", 4, layout(8, 1, 3)).gradient_sync_time(1), 0);
}

TEST(CostModelParallel, ZeroThreeGathersEachLayerPerChunkOverlappedWithItsCompute) {
  // LLaMA-7B, 4 stages of 8 layers, d_s = 8 x d_r = 4: each stage's 32 ranks on 4 nodes,
  // ZeRO-3. A layer's gather moves 31/32 of its bf16 weights over InfiniBand (25 GB/s) plus
  // 20 us. Stage 1 holds layers only.
  const CostModel z3 = model("llama-7b", 4, layout(8, 4, 3));
  const CostModel z1 = model("llama-7b", 4, layout(8, 4, 1));
  const double gather = 31.0 / 32 * z3.shape().params_per_layer() * 2 / 25e9 + 2e-5;
  EXPECT_NEAR(z3.layer_gather_time(1), gather, 1e-15);
  EXPECT_EQ(z1.layer_gather_time(1), 0);
  EXPECT_EQ(z3.gradient_sync_time(1), 0);
  // A short chunk waits for its weights; a long one hides them behind its compute.
  const Chunk small = whole(256), large = whole(98304);
  ASSERT_LT(z3.layer_forward_time(small), gather);
  EXPECT_NEAR(z3.forward_time(small, 1) - z1.forward_time(small, 1),
              8 * (gather - z1.layer_forward_time(small)), 1e-12);
  ASSERT_GT(z3.layer_forward_time(large), gather);
  EXPECT_EQ(z3.forward_time(large, 1), z1.forward_time(large, 1));
  ASSERT_GT(z3.layer_backward_time(large), 2 * gather);
  EXPECT_EQ(z3.backward_time(large, 1, 0), z1.backward_time(large, 1, 0));
  EXPECT_GT(z3.backward_time(small, 1, 0), z1.backward_time(small, 1, 0));
}

TEST(CostModelParallel, ZeroThreeGathersTheEmbeddingAndTheHeadPerChunkToo) {
  // As above; the embedding (32000 x 4096) and the head (the same plus the final norm's 4096)
  // are units of their own. The embedding's compute is nil: its gathers always show, one
  // forward, a gather and a reduce-scatter backward.
  const CostModel z3 = model("llama-7b", 4, layout(8, 4, 3));
  const CostModel z1 = model("llama-7b", 4, layout(8, 4, 1));
  const double embedding = 31.0 / 32 * 32000.0 * 4096 * 2 / 25e9 + 2e-5;
  const double head = 31.0 / 32 * (32000.0 * 4096 + 4096) * 2 / 25e9 + 2e-5;
  const Chunk small = whole(256), large = whole(98304);
  ASSERT_EQ(z1.embedding_forward_time(small), 0);
  EXPECT_NEAR(z3.embedding_forward_time(small), embedding, 1e-15);
  EXPECT_NEAR(z3.embedding_backward_time(large), 2 * embedding, 1e-15);
  EXPECT_NEAR(z3.forward_time(small, 0) - z3.forward_time(small, 1), embedding, 1e-12);
  // The head: a short chunk waits for it, a long one (12288 rows a rank) hides it.
  ASSERT_LT(z1.head_forward_time(small), head);
  EXPECT_NEAR(z3.head_forward_time(small), head, 1e-15);
  EXPECT_NEAR(z3.head_backward_time(small), 2 * head, 1e-15);
  EXPECT_NEAR(z3.head_time(small), 3 * head, 1e-15);
  ASSERT_GT(z1.head_forward_time(large), head);
  ASSERT_GT(z1.head_backward_time(large), 2 * head);
  EXPECT_EQ(z3.head_time(large), z1.head_time(large));
  EXPECT_NEAR(z3.backward_time(small, 3, 0) - z3.backward_time(small, 1, 0), 2 * head, 1e-12);
}

TEST(CostModelParallel, ASpreadHeadsReplicasSyncOverEveryRank) {
  // LLaMA-13B, d_s = 8 x d_p = 4: 32 ranks on 4 nodes, so the all-reduce of the head replicas'
  // bf16 gradients crosses InfiniBand: 2 x 31/32 of their bytes at 25 GB/s, two latencies.
  const CostModel sp8 = model("llama-13b", 4, layout(8));
  const double head_bytes = (32000.0 * 5120 + 5120) * 2;
  EXPECT_NEAR(sp8.head_replica_sync_time(), 2 * 31.0 / 32 * head_bytes / 25e9 + 2 * 2e-5, 1e-15);
  // The last stage's own sync then leaves its head out: a middle stage's (10 layers each).
  EXPECT_EQ(sp8.gradient_sync_time(3, true), sp8.gradient_sync_time(1));
  EXPECT_EQ(sp8.gradient_sync_time(1, true), sp8.gradient_sync_time(1));
  // 4 stages of one rank share a node: NVLink (200 GB/s, 10 us); one rank has no one to sync.
  EXPECT_NEAR(model("llama-13b", 4).head_replica_sync_time(),
              2 * 3.0 / 4 * head_bytes / 200e9 + 2 * 1e-5, 1e-15);
  EXPECT_EQ(model("llama-13b", 1).head_replica_sync_time(), 0);
  // The trainer's copy with replicas on every stage, which the simulator charges it to.
  EXPECT_FALSE(sp8.head_replicas());
  EXPECT_TRUE(sp8.with_head_replicas().head_replicas());
  EXPECT_EQ(sp8.with_head_replicas().head_replica_sync_time(), sp8.head_replica_sync_time());
}

TEST(CostModelParallel, ComputeDividesOverTheRanksAndAlltoallsAddPerLayer) {
  const CostModel one = flat_model("llama-13b", 4), sp = flat_model("llama-13b", 4, layout(8));
  const Chunk chunk{{Slice{0, 4096, 8192, 20000}, Slice{1, 0, 3000, 3000}}};
  const double b = one.coefficients().b;
  // The launch overhead b stays per rank; the slices' work divides by 8.
  EXPECT_NEAR(sp.layer_forward_time(chunk), b + (one.layer_forward_time(chunk) - b) / 8, 1e-15);
  for (int p = 0; p < 4; ++p) {
    const int l = sp.layers(p);
    const double a2a = sp.layer_alltoall_time(chunk, p);
    EXPECT_GT(a2a, 0);
    const double compute = l * sp.layer_forward_time(chunk);
    double extras = 0;  // the LM head's GEMM on the last stage, divided as well
    if (p == 3) extras = chunk.tokens() * sp.coefficients().head_s_per_token / 8;
    EXPECT_NEAR(sp.forward_time(chunk, p), compute + extras + l * a2a, 1e-12);
    // Backward: g times the compute, its own all-to-alls, and a recomputed layer's forward with
    // its all-to-alls.
    const double g = sp.coefficients().backward_ratio;
    EXPECT_NEAR(sp.backward_time(chunk, p, 0), g * (compute + extras) + l * a2a, 1e-12);
    EXPECT_NEAR(sp.recompute_time(chunk, p, 3), 3 * (sp.layer_forward_time(chunk) + a2a), 1e-15);
    EXPECT_NEAR(sp.backward_time(chunk, p, 3),
                sp.backward_time(chunk, p, 0) + sp.recompute_time(chunk, p, 3), 1e-12);
    EXPECT_NEAR(sp.alltoall_time(chunk, p, 3), (2 * l + 3) * a2a, 1e-15);
  }
}

TEST(CostModelParallel, ActivationsAndBuffersPerRankAreOneOverDsPlusTheOutputCopy) {
  const CostModel one = flat_model("llama-13b", 4), sp = flat_model("llama-13b", 4, layout(8));
  const Chunk chunk{{Slice{0, 4096, 8192, 20000}, Slice{1, 0, 3000, 3000}}};
  // Under SP a full layer also keeps the attention output twice (head-sharded for flash
  // backward, token-sharded as the o-projection's input): one hidden vector per token more.
  const ModelShape shape = ModelShape::builtin("llama-13b");
  const double copy = double(chunk.tokens()) * shape.bytes_per_element * shape.hidden / 8;
  for (int p = 0; p < 4; ++p) {
    const int layers = sp.layers(p);
    for (int ckpt : {0, 4, 10})
      EXPECT_DOUBLE_EQ(sp.activation_bytes(chunk, p, ckpt),
                       one.activation_bytes(chunk, p, ckpt) / 8 + (layers - ckpt) * copy);
    EXPECT_DOUBLE_EQ(sp.checkpoint_saving_bytes(chunk, p),
                     one.checkpoint_saving_bytes(chunk, p) / 8 + copy);
    EXPECT_DOUBLE_EQ(sp.backward_workspace_bytes(chunk, p),
                     one.backward_workspace_bytes(chunk, p) / 8 + copy);
    EXPECT_DOUBLE_EQ(sp.kv_buffer_bytes(20000, p), one.kv_buffer_bytes(20000, p) / 8);
  }
}

TEST(CostModelParallel, ModelStatePerRankShrinksWithEachZeroLevel) {
  // LLaMA-13B on 4 stages, d_s = 8, d_r = 2: gradient groups of 16 ranks.
  const CostModel none = model("llama-13b", 4);
  for (int p = 0; p < 4; ++p) {
    const double psi = none.model_state_bytes(p) / 16;  // parameters of the stage
    const double z0 = model("llama-13b", 4, layout(8, 2, 0)).model_state_bytes(p);
    const double z1 = model("llama-13b", 4, layout(8, 2, 1)).model_state_bytes(p);
    const double z2 = model("llama-13b", 4, layout(8, 2, 2)).model_state_bytes(p);
    const double z3 = model("llama-13b", 4, layout(8, 2, 3)).model_state_bytes(p);
    EXPECT_DOUBLE_EQ(z0, 16 * psi);
    EXPECT_DOUBLE_EQ(z1, 4 * psi + 12 * psi / 16);
    EXPECT_DOUBLE_EQ(z2, 2 * psi + 14 * psi / 16);
    // ZeRO-3: everything sharded, plus two gathered units' weights and one unit's gradient.
    const ModelShape shape = ModelShape::builtin("llama-13b");
    double unit = double(shape.params_per_layer());
    if (p == 0 || p == 3) unit = std::max(unit, double(shape.embedding_params()));
    EXPECT_DOUBLE_EQ(z3, psi + unit * 3 * 2);
    EXPECT_GT(z0, z1);
    EXPECT_GT(z1, z2);
    EXPECT_GT(z2, z3);
  }
  // ZeRO over a group of one rank is no sharding: the layout-free count.
  EXPECT_EQ(model("llama-13b", 4, layout(1, 1, 3)).model_state_bytes(1), none.model_state_bytes(1));
}

TEST(CostModelParallel, SendsBetweenNodesUseTheInterNodeLink) {
  const Chunk chunk = whole(8192);
  // d_s = 8: a stage is a node; each rank sends its 1024 rows over its own HDR NIC.
  const CostModel sp = model("llama-13b", 4, layout(8));
  EXPECT_NEAR(sp.p2p_time(chunk, 0), 1024.0 * 5120 * 2 / 25e9 + 2e-5, 1e-15);
  // Without SP, 16 stages on two nodes: only the boundary 7 -> 8 leaves the node.
  const CostModel wide = model("llama-7b", 16);
  EXPECT_NEAR(wide.p2p_time(chunk, 6), 8192.0 * 4096 * 2 / 200e9 + 1e-5, 1e-15);
  EXPECT_NEAR(wide.p2p_time(chunk, 7), 8192.0 * 4096 * 2 / 25e9 + 2e-5, 1e-15);
  expect_error([&] { sp.p2p_time(chunk, 3); }, {"stage boundary 3"});
  // Coefficients without the inter-node link (older files) use the one link they have.
  nlohmann::json j = sp;
  j["coefficients"].erase("inter_node_bandwidth");
  j["coefficients"].erase("inter_node_latency_s");
  const CostModel old = j.get<CostModel>();
  EXPECT_NEAR(old.p2p_time(chunk, 0), 1024.0 * 5120 * 2 / 200e9 + 1e-5, 1e-15);
}

// pipeline_bound reuses a stage's sums for the next stage when chunk_costs_alike says so: every
// per-chunk cost must then be the same, bit for bit, on random chunks, with and without SP and
// with SP groups inside and across nodes.
TEST(CostModelParallel, AlikeStagesGiveEveryChunkTheSameCosts) {
  std::mt19937_64 rng(3);
  std::vector<Chunk> chunks;
  for (int i = 0; i < 40; ++i) {
    Chunk c;
    const int slices = std::uniform_int_distribution<int>(1, 4)(rng);
    for (int s = 0; s < slices; ++s) {
      const int64_t length = std::uniform_int_distribution<int64_t>(64, 65536)(rng);
      const int64_t start = std::uniform_int_distribution<int64_t>(0, 1)(rng) * length / 2;
      c.slices.push_back(Slice{s, start, length, length});
    }
    chunks.push_back(c);
  }
  int alike = 0;
  for (const CostModel& m : {model("llama-13b", 8), model("llama-13b", 32), model("llama-7b", 3),
                             model("llama-7b", 16, layout(2)), model("llama-7b", 4, layout(8)),
                             model("llama-7b", 8, layout(4, 2))}) {
    const int d = m.num_stages();
    for (int a = 0; a < d; ++a)
      for (int b = 0; b < d; ++b) {
        const bool edge = a == 0 || b == 0 || a == d - 1 || b == d - 1;
        if (a != b && edge) EXPECT_FALSE(m.chunk_costs_alike(a, b)) << a << " " << b;
        if (!m.chunk_costs_alike(a, b)) continue;
        alike += a != b;
        for (const Chunk& c : chunks) {
          EXPECT_EQ(m.forward_time(c, a), m.forward_time(c, b));
          EXPECT_EQ(m.checkpoint_saving_bytes(c, a), m.checkpoint_saving_bytes(c, b));
          EXPECT_EQ(m.backward_workspace_bytes(c, a), m.backward_workspace_bytes(c, b));
          for (int l : {0, 1, m.layers(a)}) {
            EXPECT_EQ(m.backward_time(c, a, l), m.backward_time(c, b, l));
            EXPECT_EQ(m.recompute_time(c, a, l), m.recompute_time(c, b, l));
            EXPECT_EQ(m.alltoall_time(c, a, l), m.alltoall_time(c, b, l));
            EXPECT_EQ(m.activation_bytes(c, a, l), m.activation_bytes(c, b, l));
          }
        }
      }
  }
  EXPECT_GT(alike, 0) << "no two stages were alike: the test shows nothing";
}

TEST(CostModelParallel, DsMustDivideTheHeads) {
  expect_error([] { model("llama-30b", 4, layout(8)); }, {"d_s = 8", "52 heads"});
  expect_error([] { model("tiny", 2, layout(4)); }, {"d_s = 4", "2 KV heads"});
}

TEST(CostModelParallel, JsonWithAndWithoutTheLayout) {
  // Without a layout the file is what it always was: no "layout" field, read back as default.
  const CostModel plain = model("llama-7b", 4);
  const nlohmann::json j = plain;
  EXPECT_FALSE(j.contains("layout"));
  EXPECT_EQ(j.get<CostModel>().layout(), ParallelLayout{});
  EXPECT_EQ(nlohmann::json(j.get<CostModel>()), j);
  // With one, it round-trips and keeps every cost.
  const CostModel sp = model("llama-7b", 4, layout(8, 2, 2));
  const nlohmann::json k = sp;
  ASSERT_TRUE(k.contains("layout"));
  const CostModel back = k.get<CostModel>();
  EXPECT_EQ(back.layout(), sp.layout());
  EXPECT_EQ(nlohmann::json(back), k);
  const Chunk chunk = whole(5000);
  EXPECT_EQ(back.forward_time(chunk, 1), sp.forward_time(chunk, 1));
  EXPECT_EQ(back.model_state_bytes(0), sp.model_state_bytes(0));
  // A layout that does not fit the model is refused on load.
  nlohmann::json bad = sp;
  bad["layout"]["sequence"] = 3;
  expect_error([&] { bad.get<CostModel>(); }, {"d_s = 3", "32 heads"});
}

}  // namespace
}  // namespace infinipipe
