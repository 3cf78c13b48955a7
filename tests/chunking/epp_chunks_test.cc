#include <limits>
#include <map>
#include <random>
#include <set>

#include <gtest/gtest.h>

#include "chunking/chunking_test_support.h"
#include "infinipipe/chunking/sequence_processor.h"

namespace infinipipe {
namespace {

using namespace testing_support;

// Everything EPP promises about one chunking.
void check_epp(const std::vector<Chunk>& chunks, const std::vector<int64_t>& lengths, int k,
               const CostModel& cost) {
  ASSERT_NO_THROW(check_coverage(chunks, lengths));
  const int64_t longest = *std::max_element(lengths.begin(), lengths.end());
  const SplitMesh mesh = cost_balanced_mesh(longest, k, cost);
  const std::set<int64_t> mesh_points(mesh.boundaries.begin(), mesh.boundaries.end());

  for (size_t c = 0; c < chunks.size(); ++c) {
    const Chunk& chunk = chunks[c];
    SCOPED_TRACE("chunk " + std::to_string(c));
    int partial = 0;
    for (size_t i = 0; i < chunk.slices.size(); ++i) {
      const Slice& s = chunk.slices[i];
      if (s.whole()) {
        EXPECT_LE(s.seq_length, mesh.token_cap) << "a sequence longer than T_m was not split";
        continue;
      }
      ++partial;
      EXPECT_GT(s.seq_length, mesh.token_cap) << "a sequence within T_m was split";
      EXPECT_TRUE(mesh_points.count(s.start)) << "slice starts off the mesh at " << s.start;
      EXPECT_TRUE(s.end == s.seq_length || mesh_points.count(s.end))
          << "slice ends off the mesh at " << s.end;
      if (chunk.slices.size() > 1) {
        EXPECT_EQ(i, 0u) << "the tail is not the first slice of its hybrid chunk";
        EXPECT_TRUE(s.is_tail()) << "a non-tail slice shares its chunk";
      }
    }
    EXPECT_LE(partial, 1) << "two slices of split sequences share a chunk";
    EXPECT_TRUE(chunk.tokens() <= mesh.token_cap || chunk.slices.size() == 1)
        << chunk.tokens() << " tokens over the cap " << mesh.token_cap;
  }

  // Chains: each long sequence's chunks form one chain, in slice order, laid out contiguously,
  // longest sequence first; everything after the chains is packed.
  const std::vector<std::vector<int>> chain_list = chains(chunks);
  int next_chunk = 0;
  int64_t previous_long = std::numeric_limits<int64_t>::max();
  for (const std::vector<int>& chain : chain_list) {
    for (int c : chain) EXPECT_EQ(c, next_chunk++) << "chunks do not come out chain by chain";
    std::map<int, int64_t> covered_until;
    for (int c : chain)
      for (const Slice& s : chunks[c].slices) {
        EXPECT_EQ(s.start, covered_until[s.seq]) << "slices of sequence " << s.seq << " out of order";
        covered_until[s.seq] = s.end;
      }
    const Slice& head = chunks[chain.front()].slices.front();
    if (chain.size() > 1 || !head.whole()) {
      EXPECT_LE(head.seq_length, previous_long) << "long sequences are not longest first";
      previous_long = head.seq_length;
      EXPECT_EQ(head.start, 0);
      int long_slices = 0;
      for (int c : chain) long_slices += chunks[c].slices.front().seq == head.seq;
      EXPECT_EQ(long_slices, static_cast<int>(chain.size())) << "a chain holds two long sequences";
    } else {
      previous_long = 0;  // packed chunks only from here on
      EXPECT_EQ(chunks[chain.front()].kind(), ChunkKind::kPacked);
    }
  }
}

TEST(EppChunks, PropertiesOverRandomDistributions) {
  const std::vector<std::pair<std::string, CostModel>> models = {
      {"llama-13b/a800", llama13b_a800()}, {"attention-heavy", hand_made(1e-6, 1e-6)},
      {"linear", hand_made(0, 1e-6)}};
  std::mt19937_64 rng(424242);
  for (const auto& [model_name, cost] : models) {
    for (Distribution d : all_distributions()) {
      for (int trial = 0; trial < 40; ++trial) {
        const int count = std::uniform_int_distribution<int>(1, 300)(rng);
        const int64_t max_length = std::uniform_int_distribution<int64_t>(1, 131072)(rng);
        const std::vector<int64_t> lengths = sample_lengths(d, count, max_length, rng);
        const int64_t longest = *std::max_element(lengths.begin(), lengths.end());
        const int k = static_cast<int>(
            std::uniform_int_distribution<int64_t>(1, std::min<int64_t>(longest, 32))(rng));
        SCOPED_TRACE(model_name + ", " + name(d) + ", trial " + std::to_string(trial) + ", k " +
                     std::to_string(k));
        check_epp(epp_chunks(lengths, k, cost), lengths, k, cost);
        if (::testing::Test::HasFatalFailure()) return;
      }
    }
  }
}

TEST(EppChunks, OneSliceSplitsNothingAndKeepsTheTimeTarget) {
  // With no tails, chunks within the token cap (the longest length) cost at most the longest
  // sequence (cost is superadditive), so the time target never has to be relaxed.
  const CostModel cost = llama13b_a800();
  std::mt19937_64 rng(99);
  for (Distribution d : all_distributions()) {
    for (int trial = 0; trial < 20; ++trial) {
      const std::vector<int64_t> lengths = sample_lengths(d, 200, 65536, rng);
      const int64_t longest = *std::max_element(lengths.begin(), lengths.end());
      const std::vector<Chunk> chunks = epp_chunks(lengths, 1, cost);
      check_coverage(chunks, lengths);
      for (const Chunk& c : chunks) {
        EXPECT_EQ(c.kind(), ChunkKind::kPacked);
        EXPECT_LE(c.tokens(), longest);
        EXPECT_LE(chunk_cost(cost, c), cost.slice_layer_time(0, longest) * (1 + 1e-12));
      }
    }
  }
}

TEST(EppChunks, LongestSequenceIsCutAlongTheWholeMesh) {
  const CostModel cost = llama13b_a800();
  const std::vector<int64_t> lengths = {3000, 98304, 500, 40000, 12000, 800, 800, 64};
  for (int k : {2, 4, 8, 16}) {
    const SplitMesh mesh = cost_balanced_mesh(98304, k, cost);
    const std::vector<Chunk> chunks = epp_chunks(lengths, k, cost);
    // The longest comes first: its k slices are exactly the mesh, one per chunk.
    for (int j = 0; j < k; ++j) {
      const Slice& s = chunks[j].slices.front();
      EXPECT_EQ(s.seq, 1);
      EXPECT_EQ(s.start, mesh.boundaries[j]);
      EXPECT_EQ(s.end, mesh.boundaries[j + 1]);
    }
  }
}

TEST(EppChunks, TailsSeedBucketsAndTheTimeTargetRelaxes) {
  // F(x) = x^2 per layer: the mesh of 100 tokens in 4 is 0, 50, 71, 87, 100 (F = 2500 j).
  const CostModel cost = hand_made(1, 0);
  const SplitMesh mesh = cost_balanced_mesh(100, 4, cost);
  ASSERT_EQ(mesh.boundaries, (std::vector<int64_t>{0, 50, 71, 87, 100}));
  // 40 cannot join the tail [87, 100) within T_m = 50, so it opens a packed chunk; 30 can join
  // the tail on tokens (43) but not on time (100^2 - 87^2 + 30^2 = 3331 > 2500), and it cannot
  // join 40 on tokens, so T_t is relaxed to 3331 and it joins the tail.
  const std::vector<Chunk> chunks = epp_chunks({100, 40, 30}, 4, cost);
  ASSERT_EQ(chunks.size(), 5u);
  for (int j = 0; j < 3; ++j) EXPECT_EQ(chunks[j].kind(), ChunkKind::kSplit);
  EXPECT_EQ(chunks[3].kind(), ChunkKind::kHybrid);
  ASSERT_EQ(chunks[3].slices.size(), 2u);
  EXPECT_EQ(chunks[3].slices[0].start, 87);
  EXPECT_EQ(chunks[3].slices[1].seq, 2);
  EXPECT_EQ(chunks[4].kind(), ChunkKind::kPacked);
  EXPECT_EQ(chunks[4].slices.front().seq, 1);
}

TEST(EppChunks, ShortSequencesPreferBucketsWithoutTails) {
  // Linear cost: the mesh of 100 in 4 is 25 tokens each. Sequence 60 is cut at 25 and 50 and
  // leaves a 10-token tail. 20 fits no bucket and opens one; 5 fits both that bucket and the
  // 10-token tail, and goes where there are fewer long-sequence tokens.
  const CostModel cost = hand_made(0, 1);
  const std::vector<Chunk> chunks = epp_chunks({100, 60, 20, 5}, 4, cost);
  check_coverage(chunks, {100, 60, 20, 5});
  ASSERT_EQ(chunks.size(), 8u);  // 4 of the longest, 3 of the 60, one packed
  EXPECT_EQ(chunks[6].slices.size(), 1u);
  EXPECT_EQ(chunks[6].slices[0].start, 50);
  EXPECT_EQ(chunks[6].kind(), ChunkKind::kSplit);
  EXPECT_EQ(chunks[7].kind(), ChunkKind::kPacked);
  EXPECT_EQ(chunks[7].tokens(), 25);
}

TEST(EppChunks, BadInputIsRejected) {
  const CostModel cost = llama13b_a800();
  expect_error([&] { epp_chunks({}, 1, cost); }, {"no sequences"});
  expect_error([&] { epp_chunks({10, 0, 5}, 1, cost); }, {"sequence 1", "length 0"});
  expect_error([&] { epp_chunks({10, 5, -4}, 1, cost); }, {"sequence 2", "length -4"});
  expect_error([&] { epp_chunks({10, 5}, 0, cost); }, {"k = 0"});
  expect_error([&] { epp_chunks({10, 5}, 11, cost); }, {"k = 11", "10 tokens"});
}

}  // namespace
}  // namespace infinipipe
