// v_shape_plan.cc: the V-shaped what-if of an EPP plan. Its cost model cuts each rank's layers in
// two, its best schedule is valid, placed in a V, and timed as the simulator times it; a budget
// no candidate fits says why.
#include "infinipipe/planner/v_shape_plan.h"

#include <gtest/gtest.h>

#include <random>

#include "infinipipe/core/error.h"
#include "infinipipe/planner/planner.h"
#include "infinipipe/schedule/placement.h"
#include "infinipipe/schedule/validator.h"
#include "planner/instances.h"
#include "support/error_of.h"

namespace infinipipe {
namespace {

using test_support::a800_cost;
using test_support::error_of;

TEST(VShapeCost, CutsEachRanksLayersInTwo) {
  const CostModel cost = a800_cost("llama-7b", 4);  // 32 layers: 8 per rank
  EXPECT_EQ(v_shape_cost(cost, true).layers_per_stage(),
            (std::vector<int>{4, 4, 4, 4, 4, 4, 4, 4}));
  const CostModel uneven(cost.shape(), {9, 7, 9, 7}, cost.coefficients());
  EXPECT_EQ(v_shape_cost(uneven, true).layers_per_stage(),
            (std::vector<int>{5, 4, 5, 4, 3, 4, 3, 4}));
  EXPECT_EQ(v_shape_cost(uneven, false).layers_per_stage(),
            (std::vector<int>{4, 3, 4, 3, 4, 5, 4, 5}));
  const CostModel thin(cost.shape(), {29, 1, 1, 1}, cost.coefficients());
  EXPECT_NE(error_of([&] { v_shape_cost(thin, true); }).find("rank 1 has 1 layer"),
            std::string::npos);
  ParallelLayout replicas;
  replicas.data = 2;
  const CostModel replicated(cost.shape(), cost.layers_per_stage(), cost.coefficients(), replicas);
  EXPECT_NE(error_of([&] { v_shape_cost(replicated, true); }).find("2 replicas"),
            std::string::npos);
  ParallelLayout small_nodes;
  small_nodes.gpus_per_node = 2;
  const CostModel spread(cost.shape(), cost.layers_per_stage(), cost.coefficients(), small_nodes);
  EXPECT_NE(error_of([&] { v_shape_cost(spread, true); }).find("crosses nodes between stages 1"),
            std::string::npos);
}

TEST(VShapePlan, TheBestScheduleIsValidPlacedInAVAndTimedByTheSimulator) {
  std::mt19937_64 rng(5);
  for (int trial = 0; trial < 4; ++trial) {
    const int stages = 2 + trial % 2 * 2;
    const CostModel cost = a800_cost("llama-7b", stages);
    PlannerOptions options;
    options.num_stages = stages;
    options.memory_budget_bytes = 80.0 * (1 << 30);
    options.recompute_time_limit_s = 0;
    const Plan plan =
        plan_step(Method::kEpp, test_support::random_lengths(rng, 16, 16384), cost, options);
    VShapeOptions v_options;
    v_options.memory_budget_bytes = 1000.0 * (1 << 30);
    v_options.max_extra_warmup = 3;
    const VShapePlan v = plan_v_shape(plan, cost, v_options);
    ASSERT_TRUE(v.fits) << v.reason;
    EXPECT_EQ(v.candidates, 2 * (3 * 4 - 1) * 4);  // halvings x (off, H1: 0..3; H2: 1..3) x merges
    EXPECT_NO_THROW(validate_schedule(v.schedule, plan.chunks));
    EXPECT_EQ(v.schedule.rank_of_stage(), v_shape(stages));
    const CostModel logical(cost.shape(), v.layers_per_stage, cost.coefficients());
    const SimResult again = simulate(v.schedule, plan.chunks, logical, {}, {});
    EXPECT_EQ(again.step_time_s, v.step_time_s);
    EXPECT_EQ(again.rank_peak_memory_bytes, v.sim.rank_peak_memory_bytes);

    // A budget of one stage's model state: no candidate fits, and the reason names a rank.
    v_options.memory_budget_bytes = cost.model_state_bytes(0);
    const VShapePlan tight = plan_v_shape(plan, cost, v_options);
    EXPECT_FALSE(tight.fits);
    EXPECT_NE(tight.reason.find("rank "), std::string::npos) << tight.reason;
  }
}

}  // namespace
}  // namespace infinipipe
