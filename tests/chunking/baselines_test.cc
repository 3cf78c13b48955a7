#include <numeric>
#include <random>
#include <set>

#include <gtest/gtest.h>

#include "chunking/chunking_test_support.h"
#include "infinipipe/chunking/packing.h"
#include "infinipipe/chunking/sequence_processor.h"

namespace infinipipe {
namespace {

using namespace testing_support;

struct Case {
  std::vector<int64_t> lengths;
  std::string label;
};

// Random steps from every distribution, lengths up to 64K.
std::vector<Case> random_cases(uint64_t seed, int per_distribution) {
  std::mt19937_64 rng(seed);
  std::vector<Case> cases;
  for (Distribution d : all_distributions())
    for (int trial = 0; trial < per_distribution; ++trial) {
      const int count = std::uniform_int_distribution<int>(1, 300)(rng);
      const int64_t max_length = std::uniform_int_distribution<int64_t>(1, 65536)(rng);
      cases.push_back({sample_lengths(d, count, max_length, rng),
                       std::string(name(d)) + " trial " + std::to_string(trial)});
    }
  return cases;
}

int64_t longest_of(const std::vector<int64_t>& lengths) {
  return *std::max_element(lengths.begin(), lengths.end());
}

TEST(BestFitDecreasing, AnyTwoBinsTogetherOverflow) {
  // Best fit opens a bin only for an item no open bin can hold, so no two bins could be merged;
  // that bounds the bin count by twice the volume lower bound.
  std::mt19937_64 rng(5);
  for (int trial = 0; trial < 200; ++trial) {
    const int64_t capacity = std::uniform_int_distribution<int64_t>(1, 5000)(rng);
    std::vector<int64_t> sizes(std::uniform_int_distribution<int>(1, 200)(rng));
    for (auto& s : sizes) s = std::uniform_int_distribution<int64_t>(1, capacity)(rng);
    const auto bins = best_fit_decreasing(sizes, capacity);
    std::vector<int> seen(sizes.size(), 0);
    std::vector<int64_t> load;
    for (const auto& bin : bins) {
      int64_t total = 0;
      for (int item : bin) total += sizes[item], ++seen[item];
      EXPECT_LE(total, capacity);
      load.push_back(total);
    }
    for (int count : seen) EXPECT_EQ(count, 1);
    for (size_t a = 0; a < load.size(); ++a)
      for (size_t b = a + 1; b < load.size(); ++b) EXPECT_GT(load[a] + load[b], capacity);
  }
}

TEST(BatchChunks, WholeSequencesWithinTheCap) {
  std::mt19937_64 rng(11);
  for (const Case& c : random_cases(17, 30)) {
    SCOPED_TRACE(c.label);
    const int64_t longest = longest_of(c.lengths);
    const int64_t cap = std::uniform_int_distribution<int64_t>(longest, 2 * longest + 8192)(rng);
    const std::vector<Chunk> chunks = batch_chunks(c.lengths, cap);
    ASSERT_NO_THROW(check_coverage(chunks, c.lengths));
    for (const Chunk& chunk : chunks) {
      EXPECT_EQ(chunk.kind(), ChunkKind::kPacked);
      EXPECT_LE(chunk.tokens(), cap);
    }
  }
}

TEST(BatchChunks, RejectsASequenceOverTheCap) {
  expect_error([] { batch_chunks({100, 300, 5000, 20}, 4096); },
               {"sequence 2", "5000 tokens", "4096"});
  expect_error([] { batch_chunks({100}, 0); }, {"cap", "0"});
  expect_error([] { batch_chunks({}, 4096); }, {"no sequences"});
  expect_error([] { batch_chunks({5, 0}, 4096); }, {"sequence 1", "length 0"});
  expect_error([] { batch_chunks({-1}, 4096); }, {"sequence 0", "length -1"});
}

TEST(Seq1f1bChunks, EachMicroBatchCutIntoKPiecesOfEqualCost) {
  const std::vector<std::pair<std::string, CostModel>> models = {
      {"llama-13b/a800", llama13b_a800()}, {"quadratic", hand_made(1e-9, 0)}};
  std::mt19937_64 rng(23);
  for (const auto& [model_name, cost] : models) {
    for (const Case& c : random_cases(29, 15)) {
      SCOPED_TRACE(model_name + ", " + c.label);
      const int64_t longest = longest_of(c.lengths);
      const int64_t cap = std::uniform_int_distribution<int64_t>(longest, 2 * longest)(rng);
      const int k = std::uniform_int_distribution<int>(1, 16)(rng);
      const std::vector<Chunk> chunks = seq1f1b_chunks(c.lengths, cap, k, cost);
      ASSERT_NO_THROW(check_coverage(chunks, c.lengths));
      // The micro-batches are batch_chunks' (deterministic); chunks come micro-batch by
      // micro-batch, min(k, tokens) of them each.
      size_t next = 0;
      for (const Chunk& micro_batch : batch_chunks(c.lengths, cap)) {
        const int64_t pieces = std::min<int64_t>(k, micro_batch.tokens());
        const double target = chunk_cost(cost, micro_batch) / pieces;
        std::set<int> members;
        for (const Slice& s : micro_batch.slices) members.insert(s.seq);
        int64_t tokens = 0;
        for (int64_t p = 0; p < pieces; ++p, ++next) {
          ASSERT_LT(next, chunks.size());
          for (const Slice& s : chunks[next].slices)
            EXPECT_TRUE(members.count(s.seq)) << "a chunk mixes micro-batches";
          tokens += chunks[next].tokens();
          EXPECT_LE(std::abs(chunk_cost(cost, chunks[next]) - target),
                    dearest_token_cost(cost, longest) * (1 + 1e-9))
              << "piece " << p << " of " << pieces;
        }
        EXPECT_EQ(tokens, micro_batch.tokens());
      }
      EXPECT_EQ(next, chunks.size());
    }
  }
}

TEST(Seq1f1bChunks, OneSliceIsBatchLevel) {
  const CostModel cost = llama13b_a800();
  for (const Case& c : random_cases(31, 5)) {
    const int64_t cap = longest_of(c.lengths) + 1000;
    const std::vector<Chunk> a = seq1f1b_chunks(c.lengths, cap, 1, cost);
    const std::vector<Chunk> b = batch_chunks(c.lengths, cap);
    ASSERT_EQ(a.size(), b.size());
    for (size_t i = 0; i < a.size(); ++i) {
      ASSERT_EQ(a[i].slices.size(), b[i].slices.size());
      for (size_t j = 0; j < a[i].slices.size(); ++j) {
        EXPECT_EQ(a[i].slices[j].seq, b[i].slices[j].seq);
        EXPECT_TRUE(a[i].slices[j].whole());
      }
    }
  }
}

TEST(Seq1f1bChunks, MicroBatchShorterThanKIsCutPerToken) {
  const CostModel cost = llama13b_a800();
  const std::vector<Chunk> chunks = seq1f1b_chunks({3, 2}, 5, 8, cost);
  ASSERT_EQ(chunks.size(), 5u);
  for (const Chunk& c : chunks) EXPECT_EQ(c.tokens(), 1);
  check_coverage(chunks, {3, 2});
}

TEST(Seq1f1bChunks, BadInputIsRejected) {
  const CostModel cost = llama13b_a800();
  expect_error([&] { seq1f1b_chunks({100}, 4096, 0, cost); }, {"k = 0"});
  expect_error([&] { seq1f1b_chunks({}, 4096, 2, cost); }, {"no sequences"});
  expect_error([&] { seq1f1b_chunks({7, -2}, 4096, 2, cost); }, {"sequence 1", "length -2"});
  expect_error([&] { seq1f1b_chunks({7, 9000}, 4096, 2, cost); }, {"sequence 1", "9000", "4096"});
}

TEST(FixedSizeChunks, FullPiecesThenPackedRemainders) {
  std::mt19937_64 rng(37);
  for (const Case& c : random_cases(41, 30)) {
    SCOPED_TRACE(c.label);
    const int64_t size = std::uniform_int_distribution<int64_t>(1, 16384)(rng);
    const std::vector<Chunk> chunks = fixed_size_chunks(c.lengths, size);
    ASSERT_NO_THROW(check_coverage(chunks, c.lengths));
    ASSERT_NO_THROW(chains(chunks));
    for (const Chunk& chunk : chunks) {
      EXPECT_LE(chunk.tokens(), size);
      for (const Slice& s : chunk.slices) {
        EXPECT_EQ(s.start % size, 0) << "pieces are not cut at multiples of the chunk size";
        if (s.end != s.seq_length) {
          EXPECT_EQ(s.length(), size);
          EXPECT_EQ(chunk.slices.size(), 1u) << "a full piece shares its chunk";
        }
      }
    }
  }
}

TEST(FixedSizeChunks, BadInputIsRejected) {
  expect_error([] { fixed_size_chunks({100}, 0); }, {"chunk size 0"});
  expect_error([] { fixed_size_chunks({}, 64); }, {"no sequences"});
  expect_error([] { fixed_size_chunks({0}, 64); }, {"sequence 0", "length 0"});
}

}  // namespace
}  // namespace infinipipe
