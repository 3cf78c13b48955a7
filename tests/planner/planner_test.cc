// planner.cc: the planner's entry point. plan_step dispatches to EPP's search or a baseline at a
// setting (token cap 0: the longest sequence), returns a validated plan, and throws Error saying
// what to change when nothing fits; PlannerOptions::for_training gives the options every rank of
// a trainer plans with (no CBC, so ranks reach the same plan). EPP's search and the baselines
// themselves: epp_search_test.cc, baseline_plan_test.cc.
#include "infinipipe/planner/planner.h"

#include <algorithm>
#include <functional>
#include <random>
#include <string>

#include <gtest/gtest.h>

#include "infinipipe/core/error.h"
#include "planner/instances.h"
#include "planner/plan_checks.h"
#include "support/error_of.h"

namespace infinipipe {
namespace {

using test_support::error_of;

TEST(Planner, PlanStepForEppIsTheSearchsPlan) {
  std::mt19937_64 rng(50);
  int planned = 0, refused = 0;
  for (int trial = 0; trial < 20; ++trial) {
    Instance inst = random_instance(rng);
    inst.options.recompute_time_limit_s = 0;  // greedy only: the same plan every time
    SCOPED_TRACE(inst.description);
    const PlanResult epp = plan_epp(inst.lengths, inst.cost, inst.options);
    if (!epp.feasible) {
      ++refused;
      const std::string message =
          error_of([&] { plan_step(Method::kEpp, inst.lengths, inst.cost, inst.options); });
      EXPECT_EQ(message, "no epp plan fits this step: " + epp.reason +
                             " (raise the memory budget, or change the method's setting)");
      continue;
    }
    ++planned;
    const Plan plan = plan_step(Method::kEpp, inst.lengths, inst.cost, inst.options);
    EXPECT_EQ(plan.hash(), epp.plan.hash());
    EXPECT_EQ(plan.setting, epp.plan.setting);
    EXPECT_NEAR(plan.step_time_s, epp.plan.step_time_s, 1e-12 * epp.plan.step_time_s);
    EXPECT_NO_THROW(plan.validate());
    expect_executable(plan, inst);
  }
  EXPECT_GE(planned, 10);
  EXPECT_GE(refused, 1);
}

TEST(Planner, PlanStepForABaselineCapsAtTheLongestSequenceUnlessTold) {
  std::mt19937_64 rng(51);
  int planned = 0;
  for (int trial = 0; trial < 20; ++trial) {
    const Instance inst = random_instance(rng);
    SCOPED_TRACE(inst.description);
    const Setting at_longest = capped_at_longest(inst.lengths);
    const int64_t longest = at_longest.token_cap;
    const PlanResult expected = plan_at(Method::kBatch, inst, at_longest);
    if (!expected.feasible) continue;
    ++planned;
    const Plan plan = plan_step(Method::kBatch, inst.lengths, inst.cost, inst.options);
    EXPECT_EQ(plan.method, Method::kBatch);
    EXPECT_EQ(plan.setting.token_cap, longest);
    EXPECT_EQ(plan.hash(), expected.plan.hash());
    EXPECT_NO_THROW(plan.validate());
    expect_executable(plan, inst);
    // A cap given is kept.
    Setting wider;
    wider.token_cap = 2 * longest;
    const PlanResult wide_expected = plan_at(Method::kBatch, inst, wider);
    if (wide_expected.feasible) {
      const Plan wide = plan_step(Method::kBatch, inst.lengths, inst.cost, inst.options, wider);
      EXPECT_EQ(wide.setting.token_cap, 2 * longest);
      EXPECT_EQ(wide.hash(), wide_expected.plan.hash());
    } else {
      EXPECT_THROW(plan_step(Method::kBatch, inst.lengths, inst.cost, inst.options, wider), Error);
    }
  }
  EXPECT_GE(planned, 8);
}

TEST(Planner, PlanStepThrowsWhatToChangeWhenNothingFits) {
  const CostModel tiny = a800_cost("tiny", 2);
  Setting cap;
  cap.token_cap = 4096;
  const std::string baseline = error_of([&] {
    plan_step(Method::kBatch, {100, 5000}, tiny, options_for(tiny, 1e12), cap);
  });
  EXPECT_EQ(baseline.rfind("no batch plan fits this step: batch ", 0), 0u) << baseline;
  EXPECT_NE(baseline.find("sequence 1 has 5000 tokens"), std::string::npos) << baseline;
  EXPECT_NE(baseline.find("raise the memory budget, or change the method's setting"),
            std::string::npos)
      << baseline;
  // EPP: a sequence whose K/V buffers alone exceed the budget.
  const CostModel big = a800_cost("llama-13b", 8);
  const std::string epp = error_of([&] {
    plan_step(Method::kEpp, {3000, 2000000, 500}, big, options_for(big, 80.0 * 1024 * 1024 * 1024));
  });
  EXPECT_EQ(epp.rfind("no epp plan fits this step: sequence 1 (2000000 tokens)", 0), 0u) << epp;
  EXPECT_NE(epp.find("raise the memory budget"), std::string::npos) << epp;
}

TEST(Planner, PlanStepRejectsMalformedInputForEveryMethod) {
  const CostModel cost = a800_cost("tiny", 2);
  for (Method method : all_methods()) {
    SCOPED_TRACE(to_string(method));
    // The baselines take the longest sequence for the cap: an empty step must be an error first.
    EXPECT_NE(error_of([&] {
                plan_step(method, {}, cost, options_for(cost, 1e12));
              }).find("no sequences"),
              std::string::npos);
    EXPECT_NE(error_of([&] {
                plan_step(method, {10, 0}, cost, options_for(cost, 1e12));
              }).find("sequence 1 has length 0"),
              std::string::npos);
    PlannerOptions wrong_stages = options_for(cost, 1e12);
    wrong_stages.num_stages = 3;
    EXPECT_NE(error_of([&] {
                plan_step(method, {10, 20}, cost, wrong_stages);
              }).find("asked for 3 stages"),
              std::string::npos);
  }
}

TEST(Planner, TrainingOptionsPlanWithoutCbcAndUpToThirtyTwoSlices) {
  const PlannerOptions o = PlannerOptions::for_training(4, 40e9);
  const PlannerOptions defaults;
  EXPECT_EQ(o.num_stages, 4);
  EXPECT_EQ(o.memory_budget_bytes, 40e9);
  EXPECT_EQ(o.max_k, 32);
  EXPECT_LE(o.recompute_time_limit_s, 0);
  // Everything else as the plan tool's defaults.
  EXPECT_EQ(o.chunk_token_caps, defaults.chunk_token_caps);
  EXPECT_EQ(o.baseline_chunkings, defaults.baseline_chunkings);
  EXPECT_EQ(o.overlap_waves, defaults.overlap_waves);
  EXPECT_EQ(o.max_recompute_candidates, defaults.max_recompute_candidates);
  EXPECT_EQ(o.max_wave_groupings, defaults.max_wave_groupings);
  EXPECT_EQ(o.drain_taper_chunks, defaults.drain_taper_chunks);
  EXPECT_EQ(o.drain_taper_splits, defaults.drain_taper_splits);

  // Ranks planning the same step independently reach the same plan, and none is CBC's.
  std::mt19937_64 rng(52);
  int with_recompute = 0;
  for (int trial = 0; trial < 12; ++trial) {
    Instance inst = random_instance(rng);
    inst.options =
        PlannerOptions::for_training(inst.options.num_stages, inst.options.memory_budget_bytes);
    SCOPED_TRACE(inst.description);
    const PlanResult first = plan_epp(inst.lengths, inst.cost, inst.options);
    if (!first.feasible) continue;
    with_recompute += first.plan.recompute_s > 0;
    EXPECT_EQ(first.plan.checkpoint_solver.find("cbc"), std::string::npos)
        << first.plan.checkpoint_solver;
    EXPECT_LE(first.plan.setting.epp_k, 32);
    const Plan again = plan_step(Method::kEpp, inst.lengths, inst.cost, inst.options);
    EXPECT_EQ(again.hash(), first.plan.hash());
  }
  EXPECT_GE(with_recompute, 3) << "too few plans with recompute to say anything about CBC";
}

}  // namespace
}  // namespace infinipipe
