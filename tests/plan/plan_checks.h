#pragma once
// Checks and options shared by the plan tests: what every rank relies on in a plan, checked
// independently of the planner's own bookkeeping, and small planner options for a cost model.
#include <algorithm>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "infinipipe/core/chunk.h"
#include "infinipipe/plan/planner.h"
#include "infinipipe/schedule/validator.h"
#include "infinipipe/sim/simulator.h"
#include "plan/instances.h"

namespace infinipipe::testing {

// What every rank relies on, checked independently of the planner's own bookkeeping.
inline void expect_executable(const Plan& plan, const Instance& inst) {
  SCOPED_TRACE(std::string(to_string(plan.method)) + " " + describe(plan.method, plan.setting));
  EXPECT_EQ(plan.lengths, inst.lengths);
  EXPECT_EQ(plan.layers_per_stage, inst.cost.layers_per_stage());
  EXPECT_NO_THROW(check_coverage(plan.chunks, inst.lengths));
  EXPECT_NO_THROW(validate_schedule(plan.schedule, plan.chunks));
  // Every chunk is in exactly one wave.
  std::vector<int> in_waves;
  for (const Wave& w : plan.waves) in_waves.insert(in_waves.end(), w.begin(), w.end());
  std::sort(in_waves.begin(), in_waves.end());
  ASSERT_EQ(in_waves.size(), plan.chunks.size());
  for (size_t c = 0; c < in_waves.size(); ++c) EXPECT_EQ(in_waves[c], static_cast<int>(c));
  ASSERT_EQ(plan.recompute.size(), static_cast<size_t>(inst.cost.num_stages()));
  for (int p = 0; p < inst.cost.num_stages(); ++p) {
    ASSERT_EQ(plan.recompute[p].size(), plan.chunks.size());
    for (int layers : plan.recompute[p]) {
      EXPECT_GE(layers, 0);
      EXPECT_LE(layers, inst.cost.layers(p));
    }
  }
  SimOptions sim_options;
  sim_options.memory_budget_bytes = inst.options.memory_budget_bytes;
  sim_options.record_events = false;
  const SimResult sim =
      simulate(plan.schedule, plan.chunks, inst.cost, plan.recompute, sim_options);
  EXPECT_FALSE(sim.over_budget) << sim.over_budget_message;
  ASSERT_EQ(sim.peak_memory_bytes.size(), static_cast<size_t>(inst.cost.num_stages()));
  for (int p = 0; p < inst.cost.num_stages(); ++p)
    EXPECT_LE(sim.peak_memory_bytes[p], inst.options.memory_budget_bytes * (1 + 1e-9))
        << "stage " << p;
  EXPECT_NEAR(sim.step_time_s, plan.step_time_s, 1e-9 * sim.step_time_s);
  EXPECT_EQ(plan.peak_memory_bytes, sim.peak_memory_bytes);
  EXPECT_GT(plan.step_time_s, 0);
  EXPECT_GE(plan.bubble_fraction, 0);
  EXPECT_LT(plan.bubble_fraction, 1);
}

inline PlannerOptions options_for(const CostModel& cost, double budget) {
  PlannerOptions o;
  o.num_stages = cost.num_stages();
  o.memory_budget_bytes = budget;
  o.max_k = 8;
  return o;
}

}  // namespace infinipipe::testing

namespace infinipipe {

// The planner's tests name these unqualified.
using testing::expect_executable, testing::Instance, testing::options_for, testing::random_instance;

}  // namespace infinipipe
