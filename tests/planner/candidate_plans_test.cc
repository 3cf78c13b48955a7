// candidate_plans.cc: a candidate made into a plan, in the order the search looks closer: one
// wave without recompute (exact when it fits, else an optimistic time and more excess), one wave
// with recompute, and plan_with_recompute, which keeps the faster of one wave and waves.
#include "candidate_plans.h"

#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "infinipipe/schedule/scheduler.h"
#include "planner/candidate_fixtures.h"
#include "planner/instances.h"
#include "planner_support.h"
#include "wave_grouping.h"

namespace infinipipe {
namespace {

TEST(OneWaveWithoutRecompute, ExactWhenItFitsAndMoreExcessWhenNot) {
  std::mt19937_64 rng(90);
  int fits = 0, over = 0;
  for (int trial = 0; trial < 40; ++trial) {
    const Instance inst = random_instance(rng);
    const Candidate bounded = candidate(inst, some_setting(inst, trial));
    SCOPED_TRACE(described(inst, bounded.setting));
    Candidate cand = bounded;
    planning::one_wave_without_recompute(cand, inst.cost, inst.options);
    const size_t n = cand.chunks.size();
    const int d = inst.options.num_stages;
    EXPECT_TRUE(cand.simulated);
    ASSERT_EQ(cand.waves.size(), 1u);
    EXPECT_EQ(cand.waves[0], planning::all_chunks(n));
    EXPECT_EQ(cand.schedule.text(), one_wave_schedule(cand.chunks, d).text());
    EXPECT_TRUE(cand.checkpoint.feasible);
    EXPECT_EQ(cand.checkpoint.solver, "none needed");
    EXPECT_EQ(cand.checkpoint.recompute, Recompute(d, std::vector<int>(n, 0)));
    const SimResult sim = planning::predict(cand.schedule, cand.chunks, inst.cost, {},
                                            inst.options.memory_budget_bytes);
    EXPECT_EQ(cand.sim.step_time_s, sim.step_time_s);
    EXPECT_EQ(cand.sim.peak_memory_bytes, sim.peak_memory_bytes);
    EXPECT_EQ(cand.sim.over_budget, sim.over_budget);
    EXPECT_EQ(cand.optimistic, sim.step_time_s);
    EXPECT_GE(cand.optimistic, bounded.bound * (1 - 1e-9));
    EXPECT_EQ(cand.key, planning::search_key(cand));
    for (int p = 0; p < d; ++p) {
      // The excess only grows, to the simulated peak's (which counts buffers and workspaces).
      EXPECT_GE(cand.excess[p], bounded.excess[p]);
      EXPECT_GE(cand.excess[p], sim.peak_memory_bytes[p] - inst.options.memory_budget_bytes);
      EXPECT_GE(cand.recompute_floor[p], bounded.recompute_floor[p]);
    }
    if (sim.over_budget) {
      ++over;
      EXPECT_TRUE(planning::over_budget(cand));
    } else {
      ++fits;
      // A plan that fits as it is: its key is its exact time.
      EXPECT_FALSE(planning::over_budget(cand));
      EXPECT_EQ(cand.key, sim.step_time_s);
    }
  }
  EXPECT_GE(fits, 5);
  EXPECT_GE(over, 5);
}

// With a time to beat, the simulation stops only when the step is slower than it (the stage's
// clock, its compute left and the last chunk's way back say so), and otherwise is the full one.
TEST(OneWaveWithoutRecompute, StopsEarlyOnlyWhenSlowerThanTheTimeToBeat) {
  std::mt19937_64 rng(91);
  int stopped = 0, before_the_end = 0, full = 0;
  for (int trial = 0; trial < 40; ++trial) {
    const Instance inst = random_instance(rng);
    const Candidate bounded = candidate(inst, some_setting(inst, trial));
    SCOPED_TRACE(described(inst, bounded.setting));
    Candidate whole = bounded;
    planning::one_wave_without_recompute(whole, inst.cost, inst.options);
    const double time = whole.sim.step_time_s;
    for (double share : {0.5, 0.9, 0.99, 1.0, 1.01}) {
      Candidate cand = bounded;
      planning::one_wave_without_recompute(cand, inst.cost, inst.options, share * time);
      if (cand.sim.stopped_early) {
        ++stopped;
        EXPECT_GT(time, share * time);
        EXPECT_GT(cand.sim.step_time_s, share * time);
        EXPECT_LE(cand.sim.step_time_s, time * (1 + 1e-9));
        before_the_end += cand.sim.step_time_s < time;
      } else {
        ++full;
        EXPECT_EQ(cand.sim.step_time_s, time);
        EXPECT_EQ(cand.sim.peak_memory_bytes, whole.sim.peak_memory_bytes);
        EXPECT_EQ(cand.key, whole.key);
      }
    }
  }
  EXPECT_GE(stopped, 20);
  EXPECT_GE(before_the_end, 5) << "the floor never stopped a run before its last stage did";
  EXPECT_GE(full, 40);
}

TEST(OneWaveWithRecompute, FitsTheBudgetAndCostsAtLeastTheOptimisticTime) {
  std::mt19937_64 rng(91);
  int fitted = 0, failed = 0;
  for (int trial = 0; trial < 80 && fitted < 10; ++trial) {
    const Instance inst = random_instance(rng);
    Candidate cand = candidate(inst, some_setting(inst, trial));
    SCOPED_TRACE(described(inst, cand.setting));
    planning::one_wave_without_recompute(cand, inst.cost, inst.options);
    if (!cand.sim.over_budget) continue;
    const double optimistic = cand.optimistic;
    std::string reason;
    if (!planning::one_wave_with_recompute(cand, planning::kInfinity, inst.cost, inst.options,
                                           reason)) {
      ++failed;
      EXPECT_EQ(reason.rfind(planning::label(cand.setting) + ": ", 0), 0u) << reason;
      continue;
    }
    ++fitted;
    EXPECT_TRUE(reason.empty());
    ASSERT_EQ(cand.waves.size(), 1u);
    EXPECT_EQ(cand.waves[0], planning::all_chunks(cand.chunks.size()));
    EXPECT_TRUE(cand.checkpoint.feasible);
    EXPECT_GT(cand.checkpoint.recompute_s, 0);
    EXPECT_FALSE(cand.sim.over_budget);
    // Recompute only lengthens the step.
    EXPECT_GE(cand.sim.step_time_s, optimistic * (1 - 1e-12));
    const SimResult sim =
        planning::predict(cand.schedule, cand.chunks, inst.cost, cand.checkpoint.recompute,
                          inst.options.memory_budget_bytes);
    EXPECT_EQ(sim.step_time_s, cand.sim.step_time_s);
  }
  EXPECT_GE(fitted, 5);
}

TEST(PlanWithRecompute, KeepsTheFasterOfOneWaveAndWaves) {
  std::mt19937_64 rng(92);
  int compared = 0, chose_waves = 0, chose_one = 0;
  for (int trial = 0; trial < 400 && (compared < 15 || chose_waves < 2); ++trial) {
    const Instance inst = random_instance(rng);
    Candidate cand = candidate(inst, some_setting(inst, trial));
    SCOPED_TRACE(described(inst, cand.setting));
    planning::one_wave_without_recompute(cand, inst.cost, inst.options);
    if (!cand.sim.over_budget) continue;
    // Each path alone, as plan_with_recompute takes them.
    Candidate one = cand;
    std::string ignored;
    const bool one_fits = planning::one_wave_key(cand) < planning::kInfinity &&
                          planning::one_wave_with_recompute(one, planning::kInfinity, inst.cost,
                                                            inst.options, ignored);
    const double goal = one_fits ? one.sim.step_time_s : planning::kInfinity;
    const bool try_waves = planning::several_chain_lengths(cand.chunks) &&
                           (!one_fits || planning::waves_key(cand) < goal);
    Candidate waves = cand;
    const bool waves_fit =
        try_waves && planning::grouped_waves(waves, goal, inst.cost, inst.options, ignored);

    Candidate kept = cand;
    std::string reason;
    bool grouped = false;
    const bool fits = planning::plan_with_recompute(kept, planning::kInfinity, true, inst.cost,
                                                    inst.options, reason, grouped);
    EXPECT_EQ(grouped, try_waves);
    ASSERT_EQ(fits, one_fits || waves_fit);
    if (!fits) {
      EXPECT_FALSE(reason.empty());
      continue;
    }
    ++compared;
    EXPECT_FALSE(kept.sim.over_budget);
    double fastest = planning::kInfinity;
    if (one_fits) fastest = one.sim.step_time_s;
    if (waves_fit) fastest = std::min(fastest, waves.sim.step_time_s);
    EXPECT_EQ(kept.sim.step_time_s, fastest);
    if (waves_fit && (!one_fits || waves.sim.step_time_s < one.sim.step_time_s)) {
      ++chose_waves;
      EXPECT_EQ(kept.waves, waves.waves);
    } else {
      ++chose_one;
      EXPECT_EQ(kept.waves.size(), 1u);
    }
    // Without grouping, the one-wave plan or nothing.
    Candidate alone = cand;
    bool alone_grouped = true;
    const bool alone_fits = planning::plan_with_recompute(
        alone, planning::kInfinity, false, inst.cost, inst.options, reason, alone_grouped);
    EXPECT_FALSE(alone_grouped);
    EXPECT_EQ(alone_fits, one_fits);
    if (alone_fits) {
      EXPECT_EQ(alone.waves.size(), 1u);
      EXPECT_EQ(alone.sim.step_time_s, one.sim.step_time_s);
    }
  }
  EXPECT_GE(compared, 8);
  EXPECT_GE(chose_one, 1);
  EXPECT_GE(chose_waves, 1);
}

// Issue 15: one 2M-token sequence spent 73 s grouping its one chain into waves, which can only
// give the one wave again; plan_with_recompute no longer tries.
TEST(PlanWithRecompute, OneChainLengthIsNeverGrouped) {
  const auto chunk = [](int seq, int64_t start, int64_t end, int64_t n) {
    return Chunk{{Slice{seq, start, end, n}}};
  };
  // One sequence in three slices: one chain.
  EXPECT_FALSE(planning::several_chain_lengths(
      {chunk(0, 0, 10, 30), chunk(0, 10, 20, 30), chunk(0, 20, 30, 30)}));
  // Two whole sequences: two chains of one chunk each.
  EXPECT_FALSE(planning::several_chain_lengths({chunk(0, 0, 5, 5), chunk(1, 0, 7, 7)}));
  // A split sequence and a whole one: chains of 2 and 1 chunks.
  EXPECT_TRUE(planning::several_chain_lengths(
      {chunk(0, 0, 10, 20), chunk(0, 10, 20, 20), chunk(1, 0, 7, 7)}));
}

TEST(RecomputeCannotFit, OnlyWhenPlanWithRecomputeWouldFail) {
  std::mt19937_64 rng(92);
  int cannot = 0, may = 0;
  for (int trial = 0; trial < 60; ++trial) {
    Instance inst = random_instance(rng);
    // One long sequence: its slices form one chain, the case the check is for.
    inst.lengths = {std::uniform_int_distribution<int64_t>(20000, 200000)(rng)};
    inst.description = "one sequence of " + std::to_string(inst.lengths[0]) + " tokens";
    const double state = testing::largest_model_state(inst.cost);
    const double full = testing::all_activations_bytes(inst.lengths, inst.cost);
    inst.options.memory_budget_bytes =
        state + std::uniform_real_distribution<double>(0.02, 0.6)(rng) * (full - state);
    Candidate cand = candidate(inst, some_setting(inst, trial));
    SCOPED_TRACE(described(inst, cand.setting));
    planning::one_wave_without_recompute(cand, inst.cost, inst.options);
    if (!cand.sim.over_budget) continue;
    std::string why;
    const bool cannot_fit = planning::recompute_cannot_fit(cand, inst.cost, inst.options, why);
    std::string reason;
    bool grouped = false;
    Candidate tried = cand;
    const bool fits = planning::plan_with_recompute(tried, planning::kInfinity, true, inst.cost,
                                                    inst.options, reason, grouped);
    if (cannot_fit) {
      ++cannot;
      EXPECT_FALSE(fits);
      EXPECT_NE(why.find("even with every layer recomputed"), std::string::npos) << why;
    } else {
      ++may;
    }
  }
  // Both sides were exercised.
  EXPECT_GT(cannot, 5);
  EXPECT_GT(may, 5);
}

// The floor (a split sequence's slices all in flight at its last slice's backward, every layer
// recomputed) holds for any waves: many sequences, budgets near the floor.
TEST(RecomputeCannotFit, TheFloorOfASplitSequenceIsSoundWithManyChains) {
  std::mt19937_64 rng(93);
  int floors = 0, may = 0;
  for (int trial = 0; trial < 60; ++trial) {
    Instance inst = random_instance(rng);
    inst.lengths.push_back(std::uniform_int_distribution<int64_t>(20000, 100000)(rng));
    const double state = testing::largest_model_state(inst.cost);
    const double full = testing::all_activations_bytes(inst.lengths, inst.cost);
    inst.options.memory_budget_bytes =
        state + std::uniform_real_distribution<double>(0.01, 0.3)(rng) * (full - state);
    Candidate cand = candidate(inst, some_setting(inst, trial));
    if (chains(cand.chunks).size() < 2) continue;
    SCOPED_TRACE(described(inst, cand.setting));
    planning::one_wave_without_recompute(cand, inst.cost, inst.options);
    if (!cand.sim.over_budget) continue;
    std::string why;
    if (!planning::recompute_cannot_fit(cand, inst.cost, inst.options, why)) {
      ++may;
      continue;
    }
    if (why.find("at the backward of its last slice") == std::string::npos) continue;
    ++floors;
    std::string reason;
    bool grouped = false;
    EXPECT_FALSE(planning::plan_with_recompute(cand, planning::kInfinity, true, inst.cost,
                                               inst.options, reason, grouped))
        << why;
  }
  EXPECT_GT(floors, 5);
  EXPECT_GT(may, 5);
}

}  // namespace
}  // namespace infinipipe
