// packing.cc: best-fit-decreasing bin packing, and the two baselines' chunkings built on it
// (batch-level micro-batches, ChunkFlow's fixed-size chunks).
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

TEST(BestFitDecreasing, LargestFirstIntoTheBinWithTheLeastRoomThatHoldsIt) {
  // Capacity 10, items 0-4 of 5, 7, 3, 2, 4 tokens, placed 7 (item 1: bin 0, room 3), 5 (item
  // 0: bin 1, room 5), 4 (item 4: bin 1, room 1), 3 (item 2: bin 0, room 0), 2 (item 3: no room
  // anywhere, bin 2). Bins list their items in placement order.
  EXPECT_EQ(best_fit_decreasing({5, 7, 3, 2, 4}, 10),
            (std::vector<std::vector<int>>{{1, 2}, {0, 4}, {3}}));
  // Equal room: the older bin; equal sizes: the lower index first.
  EXPECT_EQ(best_fit_decreasing({6, 6, 2}, 8), (std::vector<std::vector<int>>{{0, 2}, {1}}));
  EXPECT_EQ(best_fit_decreasing({3, 3, 3}, 10), (std::vector<std::vector<int>>{{0, 1, 2}}));
  // A bin filled exactly takes nothing more.
  EXPECT_EQ(best_fit_decreasing({4, 6, 1}, 10), (std::vector<std::vector<int>>{{1, 0}, {2}}));
  EXPECT_TRUE(best_fit_decreasing({}, 10).empty());
}

TEST(BestFitDecreasing, ItemOutsideOneToCapacityIsAnError) {
  expect_error([] { best_fit_decreasing({5, 11}, 10); }, {"11 tokens", "bins of 10 tokens"});
  expect_error([] { best_fit_decreasing({5, 0}, 10); }, {"0 tokens"});
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

TEST(BatchChunks, MicroBatchesAreTheBestFitBinsOfTheLengths) {
  const std::vector<int64_t> lengths = {5, 7, 3, 2, 4};
  const std::vector<Chunk> chunks = batch_chunks(lengths, 10);
  const std::vector<std::vector<int>> bins = best_fit_decreasing(lengths, 10);
  ASSERT_EQ(chunks.size(), bins.size());
  for (size_t c = 0; c < chunks.size(); ++c) {
    ASSERT_EQ(chunks[c].slices.size(), bins[c].size());
    for (size_t i = 0; i < bins[c].size(); ++i)
      EXPECT_EQ(chunks[c].slices[i],
                (Slice{bins[c][i], 0, lengths[bins[c][i]], lengths[bins[c][i]]}));
  }
  // A cap of exactly the longest sequence is allowed.
  EXPECT_EQ(batch_chunks({4096, 1}, 4096).size(), 2u);
}

TEST(BatchChunks, RejectsASequenceOverTheCap) {
  expect_error(
      [] {
        batch_chunks({100, 300, 5000, 20}, 4096);
      },
      {"sequence 2", "5000 tokens", "4096"});
  expect_error([] { batch_chunks({100}, 0); }, {"cap", "0"});
  expect_error([] { batch_chunks({}, 4096); }, {"no sequences"});
  expect_error([] { batch_chunks({5, 0}, 4096); }, {"sequence 1", "length 0"});
  expect_error([] { batch_chunks({-1}, 4096); }, {"sequence 0", "length -1"});
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

TEST(FixedSizeChunks, LongestFirstPiecesThenTheRemaindersPackedTogether) {
  // Chunk size 8: sequence 2 (25 tokens) gives [0, 8), [8, 16), [16, 24) and leaves [24, 25);
  // sequence 0 (10) gives [0, 8) and leaves [8, 10); sequence 1 (3) is short. The remainders
  // (1, 2 and 3 tokens) fit one chunk, packed largest first.
  const std::vector<Chunk> chunks = fixed_size_chunks({10, 3, 25}, 8);
  const std::vector<Chunk> expected = {
      Chunk{{Slice{2, 0, 8, 25}}}, Chunk{{Slice{2, 8, 16, 25}}}, Chunk{{Slice{2, 16, 24, 25}}},
      Chunk{{Slice{0, 0, 8, 10}}},
      Chunk{{Slice{1, 0, 3, 3}, Slice{0, 8, 10, 10}, Slice{2, 24, 25, 25}}}};
  ASSERT_EQ(chunks.size(), expected.size());
  for (size_t c = 0; c < chunks.size(); ++c) {
    SCOPED_TRACE("chunk " + std::to_string(c));
    ASSERT_EQ(chunks[c].slices.size(), expected[c].slices.size());
    for (size_t i = 0; i < chunks[c].slices.size(); ++i)
      EXPECT_EQ(chunks[c].slices[i], expected[c].slices[i]);
  }
  // A multiple of the size: its last full piece is packed like any remainder (alone here).
  const std::vector<Chunk> exact = fixed_size_chunks({16}, 8);
  ASSERT_EQ(exact.size(), 2u);
  EXPECT_EQ(exact[1].slices.front(), (Slice{0, 8, 16, 16}));
}

TEST(FixedSizeChunks, BadInputIsRejected) {
  expect_error([] { fixed_size_chunks({100}, 0); }, {"chunk size 0"});
  expect_error([] { fixed_size_chunks({}, 64); }, {"no sequences"});
  expect_error([] { fixed_size_chunks({0}, 64); }, {"sequence 0", "length 0"});
}

}  // namespace
}  // namespace infinipipe
