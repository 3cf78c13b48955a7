#include <gtest/gtest.h>

#include <algorithm>

#include "infinipipe/planner/head_spread.h"
#include "planner/head_cost.h"

namespace infinipipe {
namespace {

using test::head_cost;

std::vector<Chunk> chunks_of(const std::vector<int64_t>& tokens) {
  std::vector<Chunk> chunks;
  for (size_t i = 0; i < tokens.size(); ++i)
    chunks.push_back(Chunk{{Slice{static_cast<int>(i), 0, tokens[i], tokens[i]}}});
  return chunks;
}

std::vector<int> in_order(size_t n) {
  std::vector<int> order(n);
  for (size_t i = 0; i < n; ++i) order[i] = static_cast<int>(i);
  return order;
}

TEST(AssignHeadStages, WaterFilledSharesDealtInForwardOrder) {
  // Stages of 2, 1, 1 layers; the head costs one layer's forward, 3 units a token with its
  // backward. Busy before heads: 600, 300, 300 units for 100 tokens; the heads' 300 raise stages
  // 1 and 2 to 450 each: shares 0, 1/2, 1/2. Dealt in order: 10 tokens (30) to stage 2 (tie,
  // the later), 40 (120) to stage 1 (75 behind against 45), 20 (60) to stage 2, 30 (90) to
  // stage 2 (60 behind against 30).
  const std::vector<Chunk> chunks = chunks_of({10, 40, 20, 30});
  const CostModel cost = head_cost({2, 1, 1}, 1);
  EXPECT_EQ(assign_head_stages(chunks, in_order(4), cost), (std::vector<int>{2, 1, 2, 2}));
  // Equal stages and chunks: the heads alternate through the step, not in a lump.
  EXPECT_EQ(
      assign_head_stages(chunks_of({8, 8, 8, 8, 8, 8}), {5, 4, 3, 2, 1, 0}, head_cost({1, 1}, 1)),
      (std::vector<int>{0, 1, 0, 1, 0, 1}));
  EXPECT_EQ(forward_order(Schedule{{{Action::parse("F1"), Action::parse("B1"), Action::parse("F0"),
                                     Action::parse("B0")}}}),
            (std::vector<int>{1, 0}));
}

TEST(AssignHeadStages, CanLeaveTheFirstStageOut) {
  const std::vector<Chunk> chunks = chunks_of({100, 100, 100, 100});
  const CostModel cost = head_cost({1, 2, 2}, 3);
  const std::vector<int> with_first = assign_head_stages(chunks, in_order(4), cost);
  EXPECT_GT(std::count(with_first.begin(), with_first.end(), 0), 0);
  HeadAssignmentOptions options;
  options.first_stage = 1;
  const std::vector<int> without = assign_head_stages(chunks, in_order(4), cost, options);
  EXPECT_EQ(std::count(without.begin(), without.end(), 0), 0);
}

TEST(AssignHeadStages, OneStageKeepsEveryHead) {
  EXPECT_EQ(assign_head_stages(chunks_of({5, 7}), in_order(2), head_cost({4}, 1)),
            (std::vector<int>{0, 0}));
  HeadAssignmentOptions options;
  options.first_stage = 1;
  EXPECT_EQ(assign_head_stages(chunks_of({5, 7}), in_order(2), head_cost({4}, 1), options),
            (std::vector<int>{0, 0}));
}

}  // namespace
}  // namespace infinipipe
