// Static baselines: the candidate grid, one setting for every step with the worst step's
// recompute count, and the per-step bests that bound it from below.
#include "infinipipe/planner/static_baseline.h"

#include <algorithm>
#include <random>

#include <gtest/gtest.h>

#include "infinipipe/core/error.h"
#include "planner/instances.h"
#include "planner/plan_checks.h"

namespace infinipipe {
namespace {

TEST(StaticBaseline, CandidateGrid) {
  const int64_t longest = 70001;
  const auto batch = candidate_settings(Method::kBatch, longest);
  const auto seq = candidate_settings(Method::kSeq1F1B, longest);
  const auto chunk = candidate_settings(Method::kChunkFlow, longest);
  EXPECT_EQ(batch.size(), 6u);
  EXPECT_EQ(seq.size(), 36u);
  EXPECT_EQ(chunk.size(), 7u);
  for (const Setting& s : batch) {
    EXPECT_EQ(s.token_cap % 1024, 0);
    EXPECT_GE(s.token_cap, longest);
    EXPECT_LT(s.token_cap, 4 * longest + 1024);
    EXPECT_EQ(s.uniform_recompute, -1);
  }
  EXPECT_GE(batch.front().token_cap, longest);
  EXPECT_LT(batch.front().token_cap, longest + 1024);
  for (const Setting& s : seq) EXPECT_TRUE(s.k >= 1 && s.k <= 32 && (s.k & (s.k - 1)) == 0);
  EXPECT_EQ(chunk.front().chunk_tokens, 1024);
  EXPECT_EQ(chunk.back().chunk_tokens, 65536);
  EXPECT_THROW(candidate_settings(Method::kEpp, longest), Error);
}

TEST(StaticBaseline, OneSettingForAllStepsWithTheWorstStepsRecompute) {
  std::mt19937_64 rng(31);
  int compared = 0;
  for (int trial = 0; trial < 6; ++trial) {
    const testing::Instance inst = testing::random_instance(rng);
    std::vector<std::vector<int64_t>> steps = {inst.lengths};
    for (int i = 0; i < 2; ++i) steps.push_back(testing::random_lengths(rng, 20, 8192));
    SCOPED_TRACE(inst.description);
    for (Method m : {Method::kBatch, Method::kSeq1F1B, Method::kChunkFlow}) {
      const BaselineComparison c = compare_baseline(m, steps, inst.cost, inst.options);
      int64_t longest = 0;
      for (const auto& lengths : steps) longest = std::max(longest, longest_of(lengths));
      const std::vector<Setting> candidates = candidate_settings(m, longest);
      EXPECT_EQ(c.candidates_tried, static_cast<int>(candidates.size()));
      ASSERT_EQ(c.per_step_best.size(), steps.size());
      if (!c.static_feasible) {
        EXPECT_FALSE(c.static_reason.empty());
        continue;
      }
      ++compared;
      ASSERT_EQ(c.static_plans.size(), steps.size());
      double total = 0;
      for (size_t i = 0; i < steps.size(); ++i) {
        const PlanResult& s = c.static_plans[i];
        ASSERT_TRUE(s.feasible) << s.reason;
        EXPECT_EQ(s.plan.setting, c.static_setting);
        EXPECT_EQ(s.plan.lengths, steps[i]);
        for (int p = 0; p < inst.cost.num_stages(); ++p)
          for (int layers : s.plan.recompute[p])
            EXPECT_EQ(layers, std::min(c.static_setting.uniform_recompute, inst.cost.layers(p)));
        total += s.plan.step_time_s;
        // The per-step best may choose another setting and a smaller count: never slower.
        ASSERT_TRUE(c.per_step_best[i].feasible) << c.per_step_best[i].reason;
        EXPECT_LE(c.per_step_best[i].plan.step_time_s, s.plan.step_time_s * (1 + 1e-12));
      }
      EXPECT_NEAR(total, c.static_total_s, 1e-9 * total);
      // The per-step best also tries caps sized from the step's own longest sequence.
      for (size_t i = 0; i < steps.size(); ++i) {
        const int64_t own_longest = longest_of(steps[i]);
        for (const Setting& candidate : candidate_settings(m, own_longest)) {
          const PlanResult r = plan_with_setting(m, steps[i], candidate, inst.cost, inst.options);
          if (r.feasible)
            EXPECT_LE(c.per_step_best[i].plan.step_time_s, r.plan.step_time_s * (1 + 1e-12))
                << "step " << i << " " << describe(m, r.plan.setting);
        }
      }
      // The static count is one step's own need: some step needs exactly it.
      Setting own = c.static_setting;
      own.uniform_recompute = -1;
      int worst = 0;
      for (const auto& lengths : steps) {
        const PlanResult r = plan_with_setting(m, lengths, own, inst.cost, inst.options);
        ASSERT_TRUE(r.feasible) << r.reason;
        worst = std::max(worst, r.plan.setting.uniform_recompute);
      }
      EXPECT_EQ(worst, c.static_setting.uniform_recompute);
      // No other candidate, run the same way, is cheaper in total.
      for (Setting candidate : candidates) {
        int need = 0;
        bool fits = true;
        for (const auto& lengths : steps) {
          const PlanResult r = plan_with_setting(m, lengths, candidate, inst.cost, inst.options);
          fits = fits && r.feasible;
          if (r.feasible) need = std::max(need, r.plan.setting.uniform_recompute);
        }
        if (!fits) continue;
        candidate.uniform_recompute = need;
        double candidate_total = 0;
        for (const auto& lengths : steps) {
          const PlanResult r = plan_with_setting(m, lengths, candidate, inst.cost, inst.options);
          ASSERT_TRUE(r.feasible) << describe(m, candidate) << ": " << r.reason;
          candidate_total += r.plan.step_time_s;
        }
        EXPECT_GE(candidate_total, c.static_total_s * (1 - 1e-12)) << describe(m, candidate);
      }
    }
  }
  EXPECT_GE(compared, 6);
}

TEST(StaticBaseline, NoStepsIsAnError) {
  const CostModel cost = a800_cost("tiny", 2);
  const PlannerOptions o = options_for(cost, 1e12);
  EXPECT_THROW(compare_baseline(Method::kBatch, {}, cost, o), Error);
  EXPECT_THROW(compare_baseline(Method::kBatch, {{10, 0}}, cost, o), Error);
}

}  // namespace
}  // namespace infinipipe
