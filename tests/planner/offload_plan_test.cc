// offload_plan.cc: an EPP plan made with room to spare, fitted into a smaller budget by
// offloading. Its setting fits, is timed as the simulator times it, and beats no other setting
// it weighed; a budget nothing fits says which stage needs what.
#include "infinipipe/planner/offload_plan.h"

#include <gtest/gtest.h>

#include <random>

#include "infinipipe/planner/planner.h"
#include "planner/instances.h"
#include "support/error_of.h"

namespace infinipipe {
namespace {

using test_support::a800_cost;
using test_support::error_of;

// EPP's plan of 32 sequences of up to 32K on 4 stages with 1000 GiB each: far more than any
// stage holds, so the budgets below make it offload.
Plan roomy_plan(const CostModel& cost) {
  std::mt19937_64 rng(7);
  PlannerOptions options;
  options.num_stages = 4;
  options.memory_budget_bytes = 1000.0 * (1 << 30);
  return plan_step(Method::kEpp, test_support::random_lengths(rng, 32, 32768), cost, options);
}

TEST(OffloadPlan, FitsARoomyPlanIntoTheBudgetAsTheSimulatorTimesIt) {
  const CostModel cost = a800_cost("llama-7b", 4);
  const Plan roomy = roomy_plan(cost);
  // The last stage never offloads: the budget lies between its peak and the first stage's.
  const double first = roomy.peak_memory_bytes.front(), last = roomy.peak_memory_bytes.back();
  ASSERT_GT(first, last);

  OffloadOptions o_options;
  o_options.host_link_bandwidth = 32e9;
  o_options.memory_budget_bytes = (first + last) / 2;
  const OffloadPlan fitted = plan_offload(roomy, cost, o_options);
  ASSERT_TRUE(fitted.fits) << fitted.reason;
  EXPECT_GT(fitted.candidates, 0);
  EXPECT_EQ(fitted.offload.resident.back(), -1);
  bool offloads = false;
  for (int r : fitted.offload.resident) offloads = offloads || r >= 1;
  EXPECT_TRUE(offloads);
  for (double bytes : fitted.sim.peak_memory_bytes) EXPECT_LE(bytes, o_options.memory_budget_bytes);

  SimOptions again;
  again.memory_budget_bytes = o_options.memory_budget_bytes;
  again.offload = &fitted.offload;
  const SimResult sim = simulate(roomy.schedule, roomy.chunks, cost,
                                 fitted.recompute_kept ? roomy.recompute : Recompute{}, again);
  EXPECT_FALSE(sim.over_budget);
  EXPECT_DOUBLE_EQ(sim.step_time_s, fitted.step_time_s);
  EXPECT_GE(fitted.step_time_s, roomy.step_time_s * (1 - 1e-12));

  // Every prefetch depth with the same rule is slower or no better.
  for (int prefetch = 1; prefetch <= o_options.max_prefetch; ++prefetch) {
    OffloadOptions one = o_options;
    one.max_prefetch = prefetch;
    const OffloadPlan shallower = plan_offload(roomy, cost, one);
    if (shallower.fits) EXPECT_GE(shallower.step_time_s, fitted.step_time_s);
  }

  // Room for the model state alone: nothing fits, and the reason names a stage's need.
  o_options.memory_budget_bytes = cost.model_state_bytes(0);
  const OffloadPlan none = plan_offload(roomy, cost, o_options);
  EXPECT_FALSE(none.fits);
  EXPECT_NE(none.reason.find("needs"), std::string::npos) << none.reason;

  o_options.host_link_bandwidth = 0;
  EXPECT_NE(error_of([&] { plan_offload(roomy, cost, o_options); }).find("host link"),
            std::string::npos);
}

TEST(OffloadPlan, GpusSharingAHostLinkShareItsTime) {
  const CostModel cost = a800_cost("llama-7b", 4);
  const Plan roomy = roomy_plan(cost);
  OffloadOptions own;
  own.host_link_bandwidth = 8e9;
  own.memory_budget_bytes = (roomy.peak_memory_bytes.front() + roomy.peak_memory_bytes.back()) / 2;
  OffloadOptions shared = own;
  shared.gpus_per_host_link = 2;
  const OffloadPlan apart = plan_offload(roomy, cost, own);
  const OffloadPlan together = plan_offload(roomy, cost, shared);
  ASSERT_TRUE(apart.fits && together.fits) << apart.reason << together.reason;
  EXPECT_EQ(apart.offload.stages_per_link, 1);
  EXPECT_EQ(together.offload.stages_per_link, 2);  // one GPU per stage: two stages a link
  EXPECT_EQ(together.offload.bytes_per_s, 8e9);
  EXPECT_GE(together.step_time_s, apart.step_time_s);

  // With two SP ranks a stage, each stage's two GPUs fill a link: its copies go at half the rate.
  const CostModel sp2 =
      CostModel::analytic(ModelShape::builtin("llama-7b"), Hardware::builtin("a800"), 4, {2, 1});
  OffloadOptions sp_shared = shared;
  sp_shared.memory_budget_bytes = 1000.0 * (1 << 30);
  const OffloadPlan sp = plan_offload(roomy, sp2, sp_shared);
  EXPECT_EQ(sp.offload.stages_per_link, 1);
  EXPECT_EQ(sp.offload.bytes_per_s, 4e9);
  sp_shared.gpus_per_host_link = 3;
  EXPECT_NE(error_of([&] { plan_offload(roomy, sp2, sp_shared); }).find("one must divide"),
            std::string::npos);
}

}  // namespace
}  // namespace infinipipe
