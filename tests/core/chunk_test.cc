// chunk.cc (and chunk.h's inline helpers): slices and chunks, the chunk kinds, the chains a
// step's chunks form (derived from the slices, never stored) and the coverage check.
#include "infinipipe/core/chunk.h"

#include <algorithm>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "infinipipe/core/error.h"
#include "support/error_of.h"

namespace infinipipe {
namespace {

Slice whole(int seq, int64_t length) { return Slice{seq, 0, length, length}; }

using test_support::expect_error;

// check_coverage of `chunks` against `lengths` fails, mentioning every one of `parts`.
void expect_coverage_error(const std::vector<Chunk>& chunks, const std::vector<int64_t>& lengths,
                           const std::vector<std::string>& parts) {
  expect_error([&] { check_coverage(chunks, lengths); }, parts);
}

TEST(Slice, LengthContextWholeAndTail) {
  const Slice head{3, 0, 100, 250}, middle{3, 100, 180, 250}, tail{3, 180, 250, 250};
  EXPECT_EQ(head.length(), 100);
  EXPECT_EQ(middle.length(), 80);
  EXPECT_EQ(middle.context(), 100);
  EXPECT_EQ(tail.context(), 180);
  for (const Slice& s : {head, middle, tail}) EXPECT_FALSE(s.whole());
  EXPECT_FALSE(head.is_tail());
  EXPECT_FALSE(middle.is_tail());
  EXPECT_TRUE(tail.is_tail());
  const Slice all = whole(3, 250);
  EXPECT_TRUE(all.whole());
  EXPECT_FALSE(all.is_tail()) << "a whole sequence is not a tail";
  EXPECT_EQ(all.context(), 0);
  EXPECT_TRUE(all == whole(3, 250));
  EXPECT_FALSE(all == whole(4, 250));
  EXPECT_FALSE(all == (Slice{3, 0, 250, 251})) << "the sequence length is part of a slice";
}

TEST(Chunk, TokensAndKind) {
  const Chunk packed{{whole(0, 10), whole(1, 20)}};
  const Chunk split{{Slice{2, 0, 50, 100}}};
  const Chunk hybrid{{Slice{2, 50, 100, 100}, whole(3, 7)}};
  EXPECT_EQ(packed.tokens(), 30);
  EXPECT_EQ(split.tokens(), 50);
  EXPECT_EQ(hybrid.tokens(), 57);
  EXPECT_EQ(Chunk{}.tokens(), 0);
  EXPECT_EQ(packed.kind(), ChunkKind::kPacked);
  EXPECT_EQ(split.kind(), ChunkKind::kSplit);
  EXPECT_EQ(hybrid.kind(), ChunkKind::kHybrid);
  // Two partial slices (Seq1F1B cuts across sequences) are still split.
  EXPECT_EQ((Chunk{{Slice{0, 5, 10, 10}, Slice{1, 0, 3, 8}}}).kind(), ChunkKind::kSplit);
}

TEST(Chunk, KindNames) {
  EXPECT_STREQ(to_string(ChunkKind::kPacked), "packed");
  EXPECT_STREQ(to_string(ChunkKind::kSplit), "split");
  EXPECT_STREQ(to_string(ChunkKind::kHybrid), "hybrid");
}

TEST(Chains, OneChainPerSequenceGroupInForwardOrder) {
  // Sequence 0 (300 tokens) in three slices held by chunks 3, 0 and 2 (in slice order); its
  // tail shares chunk 2 with sequence 2; sequences 1 and 3 are packed alone.
  const std::vector<Chunk> chunks = {
      Chunk{{Slice{0, 100, 200, 300}}},
      Chunk{{whole(1, 50)}},
      Chunk{{Slice{0, 200, 300, 300}, whole(2, 40)}},
      Chunk{{Slice{0, 0, 100, 300}}},
      Chunk{{whole(3, 60)}},
  };
  // Chains come ordered by their lowest chunk id; within a chain, in slice order.
  EXPECT_EQ(chains(chunks), (std::vector<std::vector<int>>{{3, 0, 2}, {1}, {4}}));
}

TEST(Chains, ChunksSharingAnySequenceJoinOneChain) {
  // Seq1F1B-style pieces: a micro-batch of sequences 0 (10 tokens) and 1 (6 tokens) cut into
  // three runs; the middle piece holds the end of 0 and the start of 1.
  const std::vector<Chunk> chunks = {
      Chunk{{Slice{1, 4, 6, 6}}},
      Chunk{{Slice{0, 0, 7, 10}}},
      Chunk{{Slice{0, 7, 10, 10}, Slice{1, 0, 4, 6}}},
  };
  EXPECT_EQ(chains(chunks), (std::vector<std::vector<int>>{{1, 2, 0}}));
  // Two slices of one sequence in the same chunk do not order the chunk after itself.
  EXPECT_EQ(chains({Chunk{{Slice{0, 0, 5, 10}, Slice{0, 5, 10, 10}}}}),
            (std::vector<std::vector<int>>{{0}}));
  EXPECT_TRUE(chains({}).empty());
  // Sequence numbers are placed by counting; a negative one (no valid step has it) is sorted.
  EXPECT_EQ(
      chains({Chunk{{Slice{-1, 5, 10, 10}}}, Chunk{{whole(7, 3)}}, Chunk{{Slice{-1, 0, 5, 10}}}}),
      (std::vector<std::vector<int>>{{2, 0}, {1}}));
}

TEST(Chains, RecoverTheChainsAStepWasBuiltFrom) {
  std::mt19937_64 rng(2024);
  for (int trial = 0; trial < 200; ++trial) {
    SCOPED_TRACE("trial " + std::to_string(trial));
    // Build chains: a long sequence cut into 1-5 slices (one per chunk), the tail sometimes
    // joined by whole short sequences; or one chunk of whole sequences.
    std::vector<std::vector<Chunk>> built;
    int next_seq = 0;
    const int num_chains = std::uniform_int_distribution<int>(1, 10)(rng);
    for (int c = 0; c < num_chains; ++c) {
      std::vector<Chunk> chain;
      const int slices = std::uniform_int_distribution<int>(1, 5)(rng);
      const int seq = next_seq++;
      const int64_t step = std::uniform_int_distribution<int64_t>(1, 100)(rng);
      for (int i = 0; i < slices; ++i)
        chain.push_back(Chunk{{Slice{seq, i * step, (i + 1) * step, slices * step}}});
      const int extra = std::uniform_int_distribution<int>(0, 2)(rng);
      for (int e = 0; e < extra; ++e) chain.back().slices.push_back(whole(next_seq++, 9));
      built.push_back(chain);
    }
    // Lay the chunks out under random ids.
    std::vector<Chunk> chunks;
    std::vector<std::vector<int>> expected_positions;
    for (const auto& chain : built) {
      expected_positions.emplace_back();
      for (const Chunk& chunk : chain) {
        expected_positions.back().push_back(static_cast<int>(chunks.size()));
        chunks.push_back(chunk);
      }
    }
    std::vector<int> id(chunks.size());
    std::iota(id.begin(), id.end(), 0);
    std::shuffle(id.begin(), id.end(), rng);
    std::vector<Chunk> shuffled(chunks.size());
    for (size_t c = 0; c < chunks.size(); ++c) shuffled[id[c]] = chunks[c];
    std::vector<std::vector<int>> expected;
    for (const auto& positions : expected_positions) {
      expected.emplace_back();
      for (int c : positions) expected.back().push_back(id[c]);
    }
    std::sort(
        expected.begin(), expected.end(), [](const std::vector<int>& a, const std::vector<int>& b) {
          return *std::min_element(a.begin(), a.end()) < *std::min_element(b.begin(), b.end());
        });
    EXPECT_EQ(chains(shuffled), expected);
    // The flat list holds the same chains in the same order.
    const ChainList list = chain_list(shuffled);
    ASSERT_EQ(list.size(), expected.size());
    EXPECT_EQ(list.start.front(), 0);
    EXPECT_EQ(list.start.back(), static_cast<int>(shuffled.size()));
    for (size_t i = 0; i < expected.size(); ++i) {
      EXPECT_EQ(list.length(i), static_cast<int>(expected[i].size()));
      EXPECT_EQ(
          std::vector<int>(list.ids.begin() + list.start[i], list.ids.begin() + list.start[i + 1]),
          expected[i]);
    }
  }
}

// Chunks laid out chain after chain (each sequence's slices in consecutive chunks: the layout
// chain_list answers without its general search) or chains interleaved with each one's chunks
// still in forward order (the general search): the chains by their smallest chunk, each in
// forward order, either way.
TEST(Chains, ConsecutiveAndInterleavedLayoutsGiveTheChainsInForwardOrder) {
  std::mt19937_64 rng(2025);
  int consecutive = 0;
  for (int trial = 0; trial < 300; ++trial) {
    SCOPED_TRACE("trial " + std::to_string(trial));
    // Chains of 1-4 chunks: one sequence cut into slices, a chunk sometimes holding the tail of
    // one sequence and the head of the next (which joins them), and whole sequences.
    std::vector<std::vector<Chunk>> built;
    int next_seq = 0;
    const int num_chains = std::uniform_int_distribution<int>(1, 8)(rng);
    for (int c = 0; c < num_chains; ++c) {
      std::vector<Chunk> chain;
      const int parts = std::uniform_int_distribution<int>(1, 3)(rng);
      for (int part = 0; part < parts; ++part) {
        const int seq = next_seq++;
        const int slices = std::uniform_int_distribution<int>(1, 3)(rng);
        for (int i = 0; i < slices; ++i) {
          const Slice slice{seq, i * 10, (i + 1) * 10, slices * 10};
          if (part > 0 && i == 0)
            chain.back().slices.push_back(slice);  // the head beside the previous tail
          else
            chain.push_back(Chunk{{slice}});
        }
      }
      if (std::uniform_int_distribution<int>(0, 2)(rng) == 0)
        chain.back().slices.push_back(whole(next_seq++, 7));
      built.push_back(chain);
    }
    const bool interleave = trial % 2 == 1;
    // Which chain each position takes its next chunk from: in turn, or chain after chain.
    std::vector<int> from;
    for (size_t c = 0; c < built.size(); ++c) from.insert(from.end(), built[c].size(), c);
    if (interleave) std::shuffle(from.begin(), from.end(), rng);
    std::vector<Chunk> chunks;
    std::vector<std::vector<int>> expected(built.size());
    std::vector<size_t> taken(built.size(), 0);
    for (int c : from) {
      expected[c].push_back(static_cast<int>(chunks.size()));
      chunks.push_back(built[c][taken[c]++]);
    }
    std::sort(expected.begin(), expected.end(),
              [](const std::vector<int>& a, const std::vector<int>& b) { return a[0] < b[0]; });
    consecutive += !interleave;
    EXPECT_EQ(chains(chunks), expected);
    const ChainList list = chain_list(chunks);
    ASSERT_EQ(list.size(), expected.size());
    for (size_t i = 0; i < expected.size(); ++i)
      EXPECT_EQ(
          std::vector<int>(list.ids.begin() + list.start[i], list.ids.begin() + list.start[i + 1]),
          expected[i]);
  }
  EXPECT_GT(consecutive, 0);
}

TEST(Chains, NoChunksNoChains) {
  EXPECT_TRUE(chains({}).empty());
  const ChainList list = chain_list({});
  EXPECT_EQ(list.size(), 0u);
  EXPECT_TRUE(list.ids.empty());
}

// sort_longest_first against the comparison sort it replaced, on chain lists with many equal
// lengths and first chunks in and out of order, given every chain or a shuffled subset.
TEST(Chains, LongestFirstIsTheComparisonSortsOrder) {
  std::mt19937 rng(12);
  for (int trial = 0; trial < 300; ++trial) {
    ChainList list;
    list.start = {0};
    const int count = std::uniform_int_distribution<int>(0, 60)(rng);
    const int longest = std::uniform_int_distribution<int>(1, 6)(rng);
    for (int c = 0; c < count; ++c)
      list.start.push_back(list.start.back() + std::uniform_int_distribution<int>(1, longest)(rng));
    list.ids.resize(list.start.back());
    std::iota(list.ids.begin(), list.ids.end(), 0);
    if (trial % 2) std::shuffle(list.ids.begin(), list.ids.end(), rng);
    std::vector<int> chains(count);
    std::iota(chains.begin(), chains.end(), 0);
    if (trial % 3 == 0) {
      std::shuffle(chains.begin(), chains.end(), rng);
      chains.resize(chains.size() / 2);
    }
    std::vector<int> expected = chains;
    std::stable_sort(expected.begin(), expected.end(), [&](int a, int b) {
      if (list.length(a) != list.length(b)) return list.length(a) > list.length(b);
      return list.ids[list.start[a]] < list.ids[list.start[b]];
    });
    sort_longest_first(list, chains);
    EXPECT_EQ(chains, expected) << "trial " << trial;
  }
}

TEST(Chains, ContradictoryOrderIsAnError) {
  // Chunk 0 holds the first half of sequence 0 but the second of sequence 1, chunk 1 the rest:
  // no forward order runs both sequences' slices in order.
  const std::vector<Chunk> chunks = {
      Chunk{{Slice{0, 0, 5, 10}, Slice{1, 5, 10, 10}}},
      Chunk{{Slice{0, 5, 10, 10}, Slice{1, 0, 5, 10}}},
  };
  expect_error([&] { chains(chunks); }, {"chunks 0", "contradictory order"});
}

TEST(CheckCoverage, EveryTokenInExactlyOneSlicePasses) {
  const std::vector<int64_t> lengths = {300, 50, 40};
  const std::vector<Chunk> chunks = {
      Chunk{{Slice{0, 100, 200, 300}}},
      Chunk{{Slice{0, 200, 300, 300}, whole(2, 40)}},
      Chunk{{Slice{0, 0, 100, 300}, whole(1, 50)}},
  };
  EXPECT_NO_THROW(check_coverage(chunks, lengths));
  EXPECT_NO_THROW(check_coverage({}, {}));
}

TEST(CheckCoverage, MissingOrDoubleTokensNameTheSequenceAndPosition) {
  const std::vector<int64_t> lengths = {100, 20};
  // A gap: tokens 40-49 of sequence 0 are in no slice.
  expect_coverage_error(
      {Chunk{{Slice{0, 0, 40, 100}}}, Chunk{{Slice{0, 50, 100, 100}, whole(1, 20)}}}, lengths,
      {"sequence 0 (length 100)", "tokens from 40", "in no slice"});
  // An overlap: tokens from 30 are in two slices.
  expect_coverage_error(
      {Chunk{{Slice{0, 0, 40, 100}}}, Chunk{{Slice{0, 30, 100, 100}, whole(1, 20)}}}, lengths,
      {"sequence 0", "tokens from 30", "in two slices"});
  // The same whole sequence twice.
  expect_coverage_error({Chunk{{whole(0, 100), whole(1, 20), whole(1, 20)}}}, lengths,
                        {"sequence 1", "tokens from 0", "in two slices"});
  // A sequence with no slice at all, and one whose end is missing.
  expect_coverage_error({Chunk{{whole(0, 100)}}}, lengths,
                        {"sequence 1 (length 20)", "tokens from 0", "in no slice"});
  expect_coverage_error({Chunk{{whole(0, 100), Slice{1, 0, 15, 20}}}}, lengths,
                        {"sequence 1", "tokens from 15", "in no slice"});
}

TEST(CheckCoverage, SlicesThatDoNotBelongToTheStepAreErrors) {
  const std::vector<int64_t> lengths = {100, 20};
  expect_coverage_error({Chunk{{whole(0, 100), whole(1, 20), whole(2, 5)}}}, lengths,
                        {"chunk 0", "sequence 2", "only 2 sequences"});
  expect_coverage_error({Chunk{{whole(0, 100), Slice{-1, 0, 20, 20}}}}, lengths, {"sequence -1"});
  // The slice's own idea of the sequence length must be the step's.
  expect_coverage_error({Chunk{{whole(0, 100)}}, Chunk{{Slice{1, 0, 20, 30}}}}, lengths,
                        {"chunk 1", "invalid slice [0, 20) of sequence 1 (length 20)"});
  // Empty, reversed and out-of-range slices.
  expect_coverage_error({Chunk{{whole(0, 100), whole(1, 20), Slice{1, 5, 5, 20}}}}, lengths,
                        {"invalid slice [5, 5)"});
  expect_coverage_error({Chunk{{whole(0, 100), Slice{1, 10, 4, 20}}}}, lengths,
                        {"invalid slice [10, 4)"});
  expect_coverage_error({Chunk{{Slice{0, 0, 120, 100}, whole(1, 20)}}}, lengths,
                        {"invalid slice [0, 120) of sequence 0"});
  expect_coverage_error({Chunk{{Slice{0, -5, 100, 100}, whole(1, 20)}}}, lengths,
                        {"invalid slice [-5, 100)"});
}

}  // namespace
}  // namespace infinipipe
