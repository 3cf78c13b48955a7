// planner_support.cc: the pieces every planning path shares: input checks, infeasible results,
// the plan record of a simulated schedule, the quiet simulator, and chunk-list helpers.
#include "planner_support.h"

#include <atomic>
#include <chrono>
#include <cmath>
#include <functional>
#include <limits>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "infinipipe/core/error.h"
#include "infinipipe/schedule/scheduler.h"
#include "sim/sim_fixtures.h"
#include "support/error_of.h"

namespace infinipipe {
namespace {

using namespace planning;

using test_support::error_of;

PlannerOptions options(int stages, double budget) {
  PlannerOptions o;
  o.num_stages = stages;
  o.memory_budget_bytes = budget;
  o.max_k = 4;
  return o;
}

TEST(CheckInputs, AcceptsAgreeingInputs) {
  const CostModel cost = test::simple_cost({2, 2, 2});
  EXPECT_NO_THROW(check_inputs({5, 1, 4096}, cost, options(3, 1e9)));
}

TEST(CheckInputs, NamesWhatDisagrees) {
  const CostModel cost = test::simple_cost({2, 2, 2});
  EXPECT_NE(error_of([&] { check_inputs({}, cost, options(3, 1e9)); }).find("no sequences"),
            std::string::npos);
  EXPECT_NE(error_of([&] {
              check_inputs({5, -2}, cost, options(3, 1e9));
            }).find("sequence 1 has length -2"),
            std::string::npos);
  EXPECT_NE(error_of([&] {
              check_inputs({5}, cost, options(0, 1e9));
            }).find("number of stages must be at least 1, got 0"),
            std::string::npos);
  const std::string stages = error_of([&] { check_inputs({5}, cost, options(2, 1e9)); });
  EXPECT_NE(stages.find("asked for 2 stages"), std::string::npos) << stages;
  EXPECT_NE(stages.find("over 3"), std::string::npos) << stages;
  for (double budget : {0.0, -1.0, std::numeric_limits<double>::infinity(),
                        std::numeric_limits<double>::quiet_NaN()})
    EXPECT_NE(error_of([&] {
                check_inputs({5}, cost, options(3, budget));
              }).find("memory budget must be a finite positive number of bytes"),
              std::string::npos)
        << budget;
  PlannerOptions cancelled = options(3, 1e9);
  const std::atomic<bool> stop{true};
  cancelled.cancelled = &stop;
  EXPECT_EQ(error_of([&] { check_not_cancelled(cancelled); }), "planning was interrupted");
  EXPECT_NO_THROW(check_not_cancelled(options(3, 1e9)));
  PlannerOptions no_k = options(3, 1e9);
  no_k.max_k = 0;
  EXPECT_NE(
      error_of([&] { check_inputs({5}, cost, no_k); }).find("max_k must be at least 1, got 0"),
      std::string::npos);
}

TEST(Infeasible, CarriesTheReasonAndNoPlan) {
  const PlanResult r = infeasible("sequence 3 does not fit");
  EXPECT_FALSE(r.feasible);
  EXPECT_EQ(r.reason, "sequence 3 does not fit");
  EXPECT_TRUE(r.plan.chunks.empty());
}

TEST(Predict, IsTheSimulatorWithoutEventsAgainstTheBudget) {
  const CostModel cost = test::simple_cost({2, 2}, 1e-4);
  const std::vector<Chunk> chunks = test::equal_chunks(4, 50);
  const Schedule schedule = test::one_f_one_b(2, 4);
  SimOptions all;
  const SimResult full = simulate(schedule, chunks, cost, {}, all);
  const SimResult quiet = predict(schedule, chunks, cost, {}, 1e18);
  EXPECT_TRUE(quiet.events.empty());
  EXPECT_FALSE(full.events.empty());
  EXPECT_EQ(quiet.step_time_s, full.step_time_s);
  EXPECT_EQ(quiet.peak_memory_bytes, full.peak_memory_bytes);
  EXPECT_FALSE(quiet.over_budget);
  const SimResult tight = predict(schedule, chunks, cost, {}, full.peak_memory_bytes[0] / 2);
  EXPECT_TRUE(tight.over_budget);
  EXPECT_FALSE(tight.over_budget_message.empty());
}

TEST(MakePlan, RecordsTheScheduleAndTheSimulatorsPrediction) {
  const CostModel cost = test::simple_cost({2, 3});
  const std::vector<Chunk> chunks = test::equal_chunks(3, 40);
  const std::vector<Wave> waves = {all_chunks(3)};
  ScheduleOptions schedule_options;
  schedule_options.num_stages = 2;
  const Schedule schedule = build_schedule(chunks, waves, schedule_options);
  const Recompute recompute = {{0, 1, 0}, {2, 0, 0}};
  const SimResult sim = predict(schedule, chunks, cost, recompute, 1e18);
  Setting setting;
  setting.epp_k = 3;
  setting.epp_token_cap = 512;
  const Plan plan = make_plan(Method::kEpp, setting, {40, 40, 40}, chunks, waves, schedule,
                              recompute, cost, sim, "tied greedy");
  EXPECT_EQ(plan.method, Method::kEpp);
  EXPECT_EQ(plan.setting, setting);
  EXPECT_EQ(plan.lengths, (std::vector<int64_t>{40, 40, 40}));
  ASSERT_EQ(plan.chunks.size(), 3u);
  EXPECT_EQ(plan.waves, waves);
  EXPECT_EQ(plan.schedule.text(), schedule.text());
  EXPECT_EQ(plan.recompute, recompute);
  EXPECT_EQ(plan.layers_per_stage, (std::vector<int>{2, 3}));
  EXPECT_EQ(plan.checkpoint_solver, "tied greedy");
  EXPECT_EQ(plan.step_time_s, sim.step_time_s);
  EXPECT_EQ(plan.peak_memory_bytes, sim.peak_memory_bytes);
  EXPECT_EQ(plan.busy_s, sim.busy_s);
  EXPECT_DOUBLE_EQ(plan.recompute_s, sim.total_recompute_s());
  EXPECT_GT(plan.recompute_s, 0);
  EXPECT_NO_THROW(plan.validate());
}

TEST(ShortestSlice, OfTheMesh) {
  SplitMesh mesh;
  mesh.boundaries = {0, 500, 800, 950, 1000};
  EXPECT_EQ(shortest_slice(mesh), 50);
  mesh.boundaries = {0, 1000};
  EXPECT_EQ(shortest_slice(mesh), 1000);
  mesh.boundaries = {0, 1, 7};
  EXPECT_EQ(shortest_slice(mesh), 1);
}

TEST(Label, IsTheEppDescription) {
  Setting s;
  s.epp_k = 24;
  s.epp_token_cap = 1024;
  s.strict_packing = true;
  EXPECT_EQ(label(s), describe(Method::kEpp, s));
  EXPECT_NE(label(s).find("K=24"), std::string::npos) << label(s);
}

TEST(AllChunks, IsOneWaveOfEveryChunkInOrder) {
  EXPECT_EQ(all_chunks(4), (Wave{0, 1, 2, 3}));
  EXPECT_TRUE(all_chunks(0).empty());
}

TEST(SameChunks, ComparesEverySliceInOrder) {
  const std::vector<Chunk> a = {Chunk{{Slice{0, 0, 50, 100}}},
                                Chunk{{Slice{0, 50, 100, 100}, Slice{1, 0, 7, 7}}}};
  EXPECT_TRUE(same_chunks(a, a));
  EXPECT_TRUE(same_chunks({}, {}));
  std::vector<Chunk> b = a;
  b[1].slices[1].end = 6;
  EXPECT_FALSE(same_chunks(a, b)) << "a slice's end differs";
  b = a;
  std::swap(b[1].slices[0], b[1].slices[1]);
  EXPECT_FALSE(same_chunks(a, b)) << "the slices of a chunk are in another order";
  b = a;
  std::swap(b[0], b[1]);
  EXPECT_FALSE(same_chunks(a, b)) << "the chunks are in another order";
  b = a;
  b.pop_back();
  EXPECT_FALSE(same_chunks(a, b)) << "one chunk fewer";
  b = a;
  b[0].slices.push_back(Slice{2, 0, 1, 1});
  EXPECT_FALSE(same_chunks(a, b)) << "one slice more";
  b = a;
  b[1].slices[1].seq = 2;
  EXPECT_FALSE(same_chunks(a, b)) << "another sequence";
  b = a;
  b[0].slices[0].start = 1;
  EXPECT_FALSE(same_chunks(a, b)) << "another start";
}

TEST(ElapsedMs, MeasuresWallTimeSinceAPoint) {
  const auto start = std::chrono::steady_clock::now();
  std::this_thread::sleep_for(std::chrono::milliseconds(5));
  const double ms = elapsed_ms(start);
  EXPECT_GE(ms, 5.0);
  EXPECT_LT(ms, 5000.0);
}

TEST(ThreadCpuMs, NeverGoesBackAndAdvancesWithWork) {
  const double start = thread_cpu_ms();
  EXPECT_GE(start, 0);
  // Work until the clock moves: its resolution is a nanosecond on Linux, so a few iterations do;
  // the cap only keeps a broken clock from looping for ever.
  volatile double sink = 0;
  double now = start;
  for (long i = 0; i < 2'000'000'000L && now == start; ++i) {
    sink = sink + std::sqrt(static_cast<double>(i));
    if (i % 1000 == 0) now = thread_cpu_ms();
  }
  EXPECT_GT(now, start);
  EXPECT_GE(thread_cpu_ms(), now);
}

}  // namespace
}  // namespace infinipipe
