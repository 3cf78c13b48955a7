#include "infinipipe/plan/planner_report.h"

#include <cmath>
#include <random>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "infinipipe/planner/planner.h"
#include "infinipipe/planner/static_baseline.h"
#include "planner/instances.h"
#include "sim/sim_fixtures.h"

namespace infinipipe {
namespace {

using testing::Instance;
using testing::random_instance;

// What every feasible plan's report must say: the bound under the predicted step time, the
// ratio between them, the counts adding up, the CPU time measured.
void expect_consistent(const Plan& plan, const Instance& inst) {
  const PlannerReport& r = plan.planner;
  const double bound = step_time_lower_bound(inst.lengths, inst.cost);
  EXPECT_EQ(r.step_time_lower_bound_s, bound);
  EXPECT_GT(bound, 0);
  // The simulator adds its times up in another order than the bound: allow rounding.
  EXPECT_LE(bound, plan.step_time_s * (1 + 1e-12));
  EXPECT_DOUBLE_EQ(r.predicted_over_bound, plan.step_time_s / bound);
  EXPECT_GE(r.tried, 1);
  EXPECT_EQ(r.candidates, r.tried + r.pruned);
  EXPECT_GE(r.pruned, 0);
  EXPECT_LE(r.recomputed, r.tried);
  EXPECT_GT(r.cpu_ms, 0);
}

TEST(PlannerReport, SpreadHeadBoundPoursTheHeadOverTheStages) {
  // Stages of 1, 1 and 2 layers, F = 1 ms per token and layer, B = 2 F, the head one layer's
  // forward: 100 tokens give 300, 300 and 600 ms of layers and 300 ms of head.
  CostCoefficients c = test::simple_coefficients();
  c.head_s_per_token = 1e-3;
  const CostModel cost = test::cost_with(c, {1, 1, 2});
  EXPECT_NEAR(step_time_lower_bound({60, 40}, cost), 0.9, 1e-12);
  // 300 ms of head on the two stages of 300 ms: 450 each, under the last stage's 600.
  EXPECT_NEAR(step_time_lower_bound({60, 40}, cost, true), 0.6, 1e-12);
  // 900 ms of head: 600 lift stages 0 and 1 to 600, the other 300 is shared by the three.
  c.head_s_per_token = 3e-3;
  EXPECT_NEAR(step_time_lower_bound({100}, test::cost_with(c, {1, 1, 2}), true), 0.7, 1e-12);
}

TEST(PlannerReport, BoundIsBelowThePredictedStepTimeAndCountsAddUp) {
  std::mt19937_64 rng(122025);
  int epp_plans = 0, pruning = 0, recomputing = 0, baseline_plans = 0;
  for (int trial = 0; trial < 60; ++trial) {
    const Instance inst = random_instance(rng);
    SCOPED_TRACE(inst.description);
    const PlanResult epp = plan_epp(inst.lengths, inst.cost, inst.options);
    if (epp.feasible) {
      ++epp_plans;
      expect_consistent(epp.plan, inst);
      pruning += epp.plan.planner.pruned > 0;
      recomputing += epp.plan.planner.recomputed > 0;
    }
    for (Method m : {Method::kBatch, Method::kSeq1F1B, Method::kChunkFlow}) {
      const Setting setting = candidate_settings(m, testing::longest_of(inst.lengths)).back();
      const PlanResult base = plan_with_setting(m, inst.lengths, setting, inst.cost, inst.options);
      if (!base.feasible) continue;
      ++baseline_plans;
      expect_consistent(base.plan, inst);
      EXPECT_EQ(base.plan.planner.candidates, 1);
      EXPECT_EQ(base.plan.planner.pruned, 0);
      EXPECT_EQ(base.plan.planner.recomputed, 0);
    }
  }
  // The instances must reach the cases the properties speak of.
  EXPECT_GE(epp_plans, 10);
  EXPECT_GE(pruning, 1);
  EXPECT_GE(recomputing, 1);
  EXPECT_GE(baseline_plans, 10);
}

// Without a per-chunk overhead, every chunking of the step computes the same on each stage
// (attention over a sliced sequence adds up to the whole one's): the bound is that compute.
TEST(PlannerReport, BoundIsEveryChunkingsComputeWithoutPerChunkOverhead) {
  CostCoefficients c = test::simple_coefficients();
  c.a1 = 1e-9;
  c.embedding_s_per_token = 2e-4;
  c.head_s_per_token = 5e-3;  // the last stage is the busiest
  const CostModel cost = test::cost_with(c, {2, 2, 2});
  const std::vector<int64_t> lengths = {3000, 40, 700, 12};
  PlannerOptions o;
  o.num_stages = 3;
  o.memory_budget_bytes = 1e12;
  const PlanResult epp = plan_epp(lengths, cost, o);
  ASSERT_TRUE(epp.feasible) << epp.reason;
  ASSERT_GT(epp.plan.chunks.size(), 1u);
  double busiest = 0;
  for (int p = 0; p < 3; ++p) {
    double compute = 0;
    for (const Chunk& chunk : epp.plan.chunks)
      compute += cost.forward_time(chunk, p) + cost.backward_time(chunk, p, 0);
    busiest = std::max(busiest, compute);
  }
  EXPECT_NEAR(step_time_lower_bound(lengths, cost), busiest, 1e-12 * busiest);
  // By hand, the last stage: 2 layers of a1 * n^2 + a2 * n per sequence, and the head, all
  // forward (1) and backward (backward_ratio 2).
  double last = 0;
  for (int64_t n : lengths) last += 2 * (c.a1 * n * n + c.a2 * n) + c.head_s_per_token * n;
  EXPECT_NEAR(step_time_lower_bound(lengths, cost), 3 * last, 1e-12 * last);
}

// One stage, one chunk: nothing waits, so the prediction is the bound.
TEST(PlannerReport, OneChunkOnOneStageMeetsTheBound) {
  const CostModel cost = test::simple_cost({4});
  PlannerOptions o;
  o.num_stages = 1;
  o.memory_budget_bytes = 1e12;
  Setting whole;
  whole.token_cap = 5000;
  const PlanResult plan = plan_with_setting(Method::kBatch, {1000, 300}, whole, cost, o);
  ASSERT_TRUE(plan.feasible) << plan.reason;
  ASSERT_EQ(plan.plan.chunks.size(), 1u);
  EXPECT_DOUBLE_EQ(plan.plan.planner.predicted_over_bound, 1.0);
}

TEST(PlannerReport, TravelsWithThePlansJsonOutsideItsHash) {
  const CostModel cost = test::simple_cost({2, 2});
  PlannerOptions o;
  o.num_stages = 2;
  o.memory_budget_bytes = 1e12;
  const PlanResult epp = plan_epp({900, 30, 200}, cost, o);
  ASSERT_TRUE(epp.feasible);
  const nlohmann::json j = epp.plan;
  const Plan back = j.get<Plan>();
  EXPECT_EQ(nlohmann::json(back.planner), nlohmann::json(epp.plan.planner));
  EXPECT_EQ(j["planner"]["candidates"], epp.plan.planner.candidates);
  Plan other = epp.plan;
  other.planner.cpu_ms += 1;
  other.planner.tried += 1;
  EXPECT_EQ(other.hash(), epp.plan.hash());
  // Plans written before the report read with an empty one.
  nlohmann::json old = j;
  old.erase("planner");
  EXPECT_EQ(old.get<Plan>().planner.candidates, 0);
}

}  // namespace
}  // namespace infinipipe
