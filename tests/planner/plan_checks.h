#pragma once
// Checks and options shared by the plan tests: what every rank relies on in a plan, checked
// independently of the planner's own bookkeeping (with the scheduler and the simulator called
// here, not through the planner), and small planner options for a cost model.
#include <algorithm>
#include <limits>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "infinipipe/core/chunk.h"
#include "infinipipe/planner/planner.h"
#include "infinipipe/schedule/scheduler.h"
#include "infinipipe/schedule/validator.h"
#include "infinipipe/sim/simulator.h"
#include "planner/instances.h"

namespace infinipipe::testing {

// One wave of chunks 0 .. count-1.
inline Wave every_chunk(size_t count) {
  Wave wave(count);
  for (size_t c = 0; c < count; ++c) wave[c] = static_cast<int>(c);
  return wave;
}

// The scheduler's 1F1B of every chunk in one wave, on `stages` stages.
inline Schedule one_wave_schedule(const std::vector<Chunk>& chunks, int stages) {
  ScheduleOptions options;
  options.num_stages = stages;
  return build_schedule(chunks, {every_chunk(chunks.size())}, options);
}

// The simulator without its event list, against a memory budget per stage (none by default).
inline SimResult simulate_quietly(const Schedule& schedule, const std::vector<Chunk>& chunks,
                                  const CostModel& cost, const Recompute& recompute,
                                  double budget = std::numeric_limits<double>::infinity()) {
  SimOptions options;
  options.memory_budget_bytes = budget;
  options.record_events = false;
  return simulate(schedule, chunks, cost, recompute, options);
}

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
  const SimResult sim = simulate_quietly(plan.schedule, plan.chunks, inst.cost, plan.recompute,
                                         inst.options.memory_budget_bytes);
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

// A baseline's plan of the instance at `setting`.
inline PlanResult plan_at(Method method, const Instance& inst, const Setting& setting) {
  return plan_with_setting(method, inst.lengths, setting, inst.cost, inst.options);
}

// A setting capped at the step's longest sequence: plan_step's default for a baseline.
inline Setting capped_at_longest(const std::vector<int64_t>& lengths) {
  Setting s;
  s.token_cap = longest_of(lengths);
  return s;
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
using testing::a800_cost, testing::capped_at_longest, testing::every_chunk,
    testing::expect_executable, testing::Instance, testing::largest_model_state,
    testing::longest_of, testing::one_wave_schedule, testing::options_for, testing::plan_at,
    testing::random_instance, testing::simulate_quietly;

}  // namespace infinipipe
