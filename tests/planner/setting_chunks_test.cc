// setting_chunks.cc: a setting stands for its chunks. epp_chunking maps an EPP setting to the
// sequence processor's options, setting_chunks gives each method's chunking at a setting (for EPP,
// the chunker's), so a plan's setting gives its chunks again.
#include <algorithm>
#include <random>
#include <tuple>

#include <gtest/gtest.h>

#include "chunking/chunking_test_support.h"
#include "infinipipe/chunking/packing.h"
#include "infinipipe/chunking/sequence_processor.h"
#include "infinipipe/core/error.h"
#include "infinipipe/planner/planner.h"
#include "planner/instances.h"
#include "planner/plan_checks.h"

namespace infinipipe {
namespace {

using testing::random_lengths;
using testing_support::slice_counts;

// Exactly the same chunks: the same slices (lengths included) in the same order.
void expect_same_chunks(const std::vector<Chunk>& got, const std::vector<Chunk>& expected) {
  ASSERT_EQ(got.size(), expected.size());
  for (size_t c = 0; c < got.size(); ++c) {
    ASSERT_EQ(got[c].slices.size(), expected[c].slices.size()) << "chunk " << c;
    for (size_t i = 0; i < got[c].slices.size(); ++i)
      EXPECT_EQ(got[c].slices[i], expected[c].slices[i]) << "chunk " << c << " slice " << i;
  }
}

TEST(SettingChunks, PlanSettingGivesItsChunksAgainAndCapsHold) {
  std::mt19937_64 rng(37);
  int capped = 0, drained = 0;
  for (int trial = 0; trial < 40; ++trial) {
    Instance inst = random_instance(rng);
    inst.options.chunk_token_caps = {0, 512};
    SCOPED_TRACE(inst.description);
    const PlanResult epp = plan_epp(inst.lengths, inst.cost, inst.options);
    if (!epp.feasible) continue;
    const Setting& s = epp.plan.setting;
    capped += s.epp_token_cap > 0;
    drained += s.drain_chunks > 0;
    const std::vector<Chunk> again = setting_chunks(Method::kEpp, inst.lengths, s, inst.cost);
    ASSERT_EQ(again.size(), epp.plan.chunks.size());
    EXPECT_EQ(slice_counts(again), slice_counts(epp.plan.chunks));
    for (size_t c = 0; c < again.size(); ++c)
      EXPECT_EQ(slice_counts({again[c]}), slice_counts({epp.plan.chunks[c]}));
    if (s.epp_token_cap > 0) {
      for (const Chunk& c : epp.plan.chunks) EXPECT_LE(c.tokens(), s.epp_token_cap);
    }
    if (epp.plan.waves.size() == 1 && epp.plan.recompute_s == 0) {
      const PlanResult same = plan_epp_at(inst.lengths, s, inst.cost, inst.options);
      ASSERT_TRUE(same.feasible) << same.reason;
      EXPECT_EQ(same.plan.hash(), epp.plan.hash());
    }
  }
  // The instances must take each knob somewhere, or the checks above prove little.
  EXPECT_GT(capped, 0);
  EXPECT_GT(drained, 0);
}

TEST(SettingChunks, PlanEppChunksComeBackExactlyWhicheverChunkerWon) {
  std::mt19937_64 rng(38);
  int compared = 0, borrowed = 0;
  for (int trial = 0; trial < 12; ++trial) {
    const Instance inst = random_instance(rng);
    SCOPED_TRACE(inst.description);
    const PlanResult epp = plan_epp(inst.lengths, inst.cost, inst.options);
    if (!epp.feasible) continue;
    ++compared;
    borrowed += epp.plan.setting.chunker != Method::kEpp;
    SCOPED_TRACE(describe(Method::kEpp, epp.plan.setting));
    expect_same_chunks(setting_chunks(Method::kEpp, inst.lengths, epp.plan.setting, inst.cost),
                       epp.plan.chunks);
  }
  EXPECT_GE(compared, 8);
  EXPECT_GE(borrowed, 1) << "no baseline's chunking won: the check says nothing about them";
}

TEST(SettingChunks, EppChunkingStandsForEveryKnobOfTheSetting) {
  Setting s;
  s.epp_k = 12;
  s.epp_token_cap = 2048;
  s.strict_packing = true;
  s.drain_chunks = 24;
  s.drain_split = 4;
  s.chunk_tokens = 999;  // not EPP's knob
  // k, max_chunk_tokens, relax_time_target, packed_light_first, drain_chunks, drain_split.
  auto knobs = [](const EppChunkingOptions& o) {
    return std::make_tuple(o.k, o.max_chunk_tokens, o.relax_time_target, o.packed_light_first,
                           o.drain_chunks, o.drain_split);
  };
  EXPECT_EQ(knobs(epp_chunking(s)), std::make_tuple(12, int64_t{2048}, false, true, 24, 4));
  // The default setting: the paper's algorithm, light packed chunks first.
  EXPECT_EQ(knobs(epp_chunking(Setting{})), std::make_tuple(1, int64_t{0}, true, true, 0, 1));
}

TEST(SettingChunks, EachMethodGivesItsOwnChunkingAndEppItsChunkers) {
  std::mt19937_64 rng(39);
  const CostModel cost = a800_cost("llama-13b", 4);
  for (int trial = 0; trial < 20; ++trial) {
    const std::vector<int64_t> lengths = random_lengths(rng, 60, 32768);
    const int64_t longest = longest_of(lengths);
    Setting s;
    s.k = 1 + trial % 6;
    s.token_cap = longest + 1024 * (trial % 3);
    s.chunk_tokens = 1024 << (trial % 4);
    s.strict_packing = trial % 2 == 0;
    SCOPED_TRACE("trial " + std::to_string(trial));
    expect_same_chunks(setting_chunks(Method::kBatch, lengths, s, cost),
                       batch_chunks(lengths, s.token_cap));
    expect_same_chunks(setting_chunks(Method::kSeq1F1B, lengths, s, cost),
                       seq1f1b_chunks(lengths, s.token_cap, s.k, cost));
    expect_same_chunks(setting_chunks(Method::kChunkFlow, lengths, s, cost),
                       fixed_size_chunks(lengths, s.chunk_tokens));
    // EPP with a token cap as its own knob: the cap binds the sequence processor's chunks.
    Setting own = s;
    own.epp_k = s.k;
    own.epp_token_cap = 2048;
    expect_same_chunks(setting_chunks(Method::kEpp, lengths, own, cost),
                       epp_chunks(lengths, epp_chunking(own), cost));
    // EPP on a baseline's chunks reads that baseline's knobs.
    Setting borrowed = s;
    borrowed.chunker = Method::kSeq1F1B;
    expect_same_chunks(setting_chunks(Method::kEpp, lengths, borrowed, cost),
                       seq1f1b_chunks(lengths, s.token_cap, s.k, cost));
    borrowed.chunker = Method::kChunkFlow;
    expect_same_chunks(setting_chunks(Method::kEpp, lengths, borrowed, cost),
                       fixed_size_chunks(lengths, s.chunk_tokens));
    borrowed.chunker = Method::kBatch;
    expect_same_chunks(setting_chunks(Method::kEpp, lengths, borrowed, cost),
                       batch_chunks(lengths, s.token_cap));
    // The chunker is EPP's knob only: a baseline ignores it.
    borrowed.chunker = Method::kChunkFlow;
    expect_same_chunks(setting_chunks(Method::kSeq1F1B, lengths, borrowed, cost),
                       seq1f1b_chunks(lengths, s.token_cap, s.k, cost));
  }
}

TEST(SettingChunks, ASettingThatCannotHoldASequenceIsAnError) {
  const CostModel cost = a800_cost("tiny", 2);
  Setting s;
  s.token_cap = 4096;
  testing_support::expect_error(
      [&] {
        setting_chunks(Method::kBatch, {100, 5000}, s, cost);
      },
      {"sequence 1", "5000", "4096"});
  testing_support::expect_error(
      [&] {
        setting_chunks(Method::kSeq1F1B, {100, 5000}, s, cost);
      },
      {"sequence 1"});
  s.chunker = Method::kBatch;
  testing_support::expect_error(
      [&] {
        setting_chunks(Method::kEpp, {100, 5000}, s, cost);
      },
      {"sequence 1"});
  Setting flow;  // chunk_tokens 0
  testing_support::expect_error([&] { setting_chunks(Method::kChunkFlow, {100}, flow, cost); },
                                {"chunk size 0"});
  Setting bad_k;
  bad_k.epp_k = 0;
  EXPECT_THROW(setting_chunks(Method::kEpp, {100}, bad_k, cost), Error);
}

}  // namespace
}  // namespace infinipipe
