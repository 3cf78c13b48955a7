// spread_plan.cc: with PlannerOptions::spread_head, EPP's and the baselines' plans get their heads
// spread when the simulator finds that faster, and stay as they were otherwise.
#include "spread_plan.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <random>

#include "infinipipe/planner/planner.h"
#include "planner/instances.h"

namespace infinipipe {
namespace {

using test_support::a800_cost;

bool has_heads(const Plan& plan) {
  const std::vector<int> heads = plan.schedule.head_stages(static_cast<int>(plan.chunks.size()));
  return std::any_of(heads.begin(), heads.end(), [](int o) { return o != -1; });
}

PlannerOptions options_for(int stages, bool spread) {
  PlannerOptions options;
  options.num_stages = stages;
  options.memory_budget_bytes = 80e9;
  options.recompute_time_limit_s = 0;  // greedy only: the same plan every time
  options.spread_head = spread;
  return options;
}

// LLaMA-3-8B's 128K vocabulary: its head costs about two layers, on a last stage of 8 layers.
TEST(SpreadPlan, AHeavyHeadIsSpreadWhereFaster) {
  const CostModel cost = a800_cost("llama3-8b", 4);
  const std::vector<int64_t> lengths = {16384, 8192, 4096, 4096, 2048, 2048, 1024, 1024, 512};
  const Plan plain = plan_step(Method::kEpp, lengths, cost, options_for(4, false));
  const Plan spread = plan_step(Method::kEpp, lengths, cost, options_for(4, true));
  EXPECT_FALSE(has_heads(plain));
  ASSERT_TRUE(has_heads(spread));
  EXPECT_LT(spread.step_time_s, plain.step_time_s);
  spread.validate();
  // A baseline gets the same treatment, and where memory does not bind is slower for it by no
  // more than the replicas' sync (the mode keeps a replica on every stage and syncs them every
  // step; where memory binds, their bytes may cost recompute too).
  Setting setting;  // Seq1F1B: micro-batches of 16K tokens, each in 8 slices
  setting.k = 8;
  setting.token_cap = 16384;
  PlannerOptions roomy = options_for(4, false);
  roomy.memory_budget_bytes = 120e9;
  const Plan seq = plan_step(Method::kSeq1F1B, lengths, cost, roomy, setting);
  roomy.spread_head = true;
  const Plan seq_spread = plan_step(Method::kSeq1F1B, lengths, cost, roomy, setting);
  seq_spread.validate();
  EXPECT_EQ(seq.recompute_s, 0);
  EXPECT_EQ(seq_spread.recompute_s, 0);
  EXPECT_LE(seq_spread.step_time_s,
            seq.step_time_s + cost.with_head_replicas().head_replica_sync_time() + 1e-12);
}

TEST(SpreadPlan, ABaselineThatFitsOnlySpreadIsPlannedSpread) {
  // LLaMA-3-8B keeps 128K log-softmax entries per token on the last stage from F to B unless the
  // head is spread: below some budget Seq1F1B fits only with the spread head.
  const CostModel cost = a800_cost("llama3-8b", 4);
  const std::vector<int64_t> lengths = {32768, 16384, 8192, 4096};
  Setting setting;
  setting.k = 8;
  setting.token_cap = 32768;
  bool found = false;
  for (double gib = 80; gib >= 40 && !found; gib -= 2) {
    PlannerOptions options = options_for(4, false);
    options.memory_budget_bytes = gib * (1 << 30);
    const PlanResult plain = plan_with_setting(Method::kSeq1F1B, lengths, setting, cost, options);
    options.spread_head = true;
    const PlanResult spread = plan_with_setting(Method::kSeq1F1B, lengths, setting, cost, options);
    if (plain.feasible) {
      ASSERT_TRUE(spread.feasible) << gib;
      EXPECT_LE(spread.plan.step_time_s, plain.plan.step_time_s);
      continue;
    }
    if (!spread.feasible) continue;
    found = true;
    spread.plan.validate();
    EXPECT_TRUE(has_heads(spread.plan));
    EXPECT_GE(spread.plan.setting.uniform_recompute, 0);
    for (double peak : spread.plan.peak_memory_bytes) EXPECT_LE(peak, options.memory_budget_bytes);
  }
  EXPECT_TRUE(found);
}

TEST(SpreadPlan, APlanThatIsNotFasterSpreadStaysBitForBit) {
  // One stage: no other stage to take a head.
  const CostModel one = a800_cost("tiny", 1);
  const std::vector<int64_t> lengths = {4096, 2048, 1024};
  EXPECT_EQ(plan_step(Method::kEpp, lengths, one, options_for(1, true)).hash(),
            plan_step(Method::kEpp, lengths, one, options_for(1, false)).hash());
  // Spreading never makes a plan slower: random instances keep or improve their step time.
  std::mt19937_64 rng(7);
  for (int trial = 0; trial < 6; ++trial) {
    testing::Instance inst = testing::random_instance(rng);
    inst.options.recompute_time_limit_s = 0;
    SCOPED_TRACE(inst.description);
    const PlanResult plain = plan_epp(inst.lengths, inst.cost, inst.options);
    inst.options.spread_head = true;
    const PlanResult spread = plan_epp(inst.lengths, inst.cost, inst.options);
    ASSERT_EQ(plain.feasible, spread.feasible);
    if (!plain.feasible) continue;
    spread.plan.validate();
    EXPECT_LE(spread.plan.step_time_s, plain.plan.step_time_s);
    if (!has_heads(spread.plan)) EXPECT_EQ(spread.plan.hash(), plain.plan.hash());
  }
}

}  // namespace
}  // namespace infinipipe
