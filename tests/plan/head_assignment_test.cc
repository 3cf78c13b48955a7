#include <gtest/gtest.h>

#include <algorithm>

#include "infinipipe/plan/head_spread.h"
#include "plan/head_cost.h"

namespace infinipipe {
namespace {

using test::head_cost;

std::vector<Chunk> chunks_of(const std::vector<int64_t>& tokens) {
  std::vector<Chunk> chunks;
  for (size_t i = 0; i < tokens.size(); ++i)
    chunks.push_back(Chunk{{Slice{static_cast<int>(i), 0, tokens[i], tokens[i]}}});
  return chunks;
}

TEST(AssignHeadStages, LargestHeadsFirstToTheLeastBusyStage) {
  // Stages of 2, 1, 1 layers; the head costs one layer's forward, so 3 units a token with its
  // backward.
  const std::vector<Chunk> chunks = chunks_of({10, 40, 20, 30});
  const CostModel cost = head_cost({2, 1, 1}, 1);
  // Busy before heads: stage 0 6 x 100 = 600, stages 1 and 2 300 each (units of tokens).
  // 40 (120) -> stage 2 (tie, later) 420; 30 (90) -> stage 1: 390; 20 (60) -> stage 1: 450;
  // 10 (30) -> stage 2: 450.
  EXPECT_EQ(assign_head_stages(chunks, cost), (std::vector<int>{2, 2, 1, 1}));
}

TEST(AssignHeadStages, CanLeaveTheFirstStageOut) {
  const std::vector<Chunk> chunks = chunks_of({100, 100, 100, 100});
  const CostModel cost = head_cost({1, 2, 2}, 3);
  const std::vector<int> with_first = assign_head_stages(chunks, cost);
  EXPECT_GT(std::count(with_first.begin(), with_first.end(), 0), 0);
  HeadAssignmentOptions options;
  options.exclude_first_stage = true;
  const std::vector<int> without = assign_head_stages(chunks, cost, options);
  EXPECT_EQ(std::count(without.begin(), without.end(), 0), 0);
}

TEST(AssignHeadStages, OneStageKeepsEveryHead) {
  EXPECT_EQ(assign_head_stages(chunks_of({5, 7}), head_cost({4}, 1)), (std::vector<int>{0, 0}));
  HeadAssignmentOptions options;
  options.exclude_first_stage = true;
  EXPECT_EQ(assign_head_stages(chunks_of({5, 7}), head_cost({4}, 1), options),
            (std::vector<int>{0, 0}));
}

}  // namespace
}  // namespace infinipipe
