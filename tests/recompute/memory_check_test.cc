// memory_check.cc: a recompute assignment checked against every memory moment of every stage,
// with the simulator's moments and sums (binding_moments + moment_bytes), the planner's byte
// tolerance, the standard assignments (none, uniform, full) and the message for a failure.
#include "infinipipe/recompute/memory_check.h"

#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "infinipipe/core/error.h"
#include "infinipipe/core/memory_text.h"
#include "infinipipe/sim/memory_timeline.h"
#include "recompute/recompute_fixtures.h"

namespace infinipipe {
namespace {

using namespace checkpoint_test;

// The moment with the most bytes under `recompute`, found from the memory timeline directly.
struct Peak {
  int stage = -1, moment = -1;
  double bytes = 0;
};
Peak peak_moment(const Step& step, const CostModel& cost, const Recompute& recompute) {
  Peak peak;
  for (int p = 0; p < step.schedule.num_stages(); ++p) {
    const std::vector<MemoryMoment> moments = binding_moments(step.schedule, p, step.chunks, cost);
    for (int m = 0; m < static_cast<int>(moments.size()); ++m) {
      const double bytes = moment_bytes(moments[m], p, step.chunks, cost, recompute);
      if (peak.stage < 0 || bytes > peak.bytes) peak = {p, m, bytes};
    }
  }
  return peak;
}

Recompute random_recompute(std::mt19937_64& rng, const CostModel& cost, int num_chunks) {
  Recompute r(cost.num_stages());
  for (int p = 0; p < cost.num_stages(); ++p)
    for (int k = 0; k < num_chunks; ++k)
      r[p].push_back(std::uniform_int_distribution<int>(0, cost.layers(p))(rng));
  return r;
}

TEST(MemoryCheck, MomentsAreTheSimulatorsMoments) {
  std::mt19937_64 rng(1);
  const CostModel cost = test_cost({3, 2, 3});
  for (int trial = 0; trial < 20; ++trial) {
    const Step step = random_step(rng, 3);
    const MemoryCheck check(step.schedule, step.chunks, cost, 1e12);
    ASSERT_EQ(check.moments().size(), 3u);
    for (int p = 0; p < 3; ++p) {
      const std::vector<MemoryMoment> expected =
          binding_moments(step.schedule, p, step.chunks, cost);
      ASSERT_EQ(check.moments()[p].size(), expected.size());
      for (size_t m = 0; m < expected.size(); ++m) {
        EXPECT_EQ(check.moments()[p][m].action_index, expected[m].action_index);
        EXPECT_EQ(check.moments()[p][m].fixed_bytes, expected[m].fixed_bytes);
        EXPECT_EQ(check.moments()[p][m].in_flight, expected[m].in_flight);
      }
    }
  }
}

TEST(MemoryCheck, WorstViolationIsThePeakMomentOverTheBudget) {
  std::mt19937_64 rng(2);
  const CostModel cost = test_cost({2, 3});
  int violations = 0, fits = 0;
  for (int trial = 0; trial < 60; ++trial) {
    SCOPED_TRACE("trial " + std::to_string(trial));
    const Step step = random_step(rng, 2);
    const int n = static_cast<int>(step.chunks.size());
    const Recompute recompute = trial % 3 == 0 ? Recompute{} : random_recompute(rng, cost, n);
    const Peak peak = peak_moment(step, cost, recompute);
    // Over: the worst violation is the peak moment, by exactly the bytes over the budget.
    const double tight = peak.bytes * 0.97;
    const MemoryCheck over(step.schedule, step.chunks, cost, tight);
    const MemoryViolation v = over.worst_violation(recompute);
    ASSERT_GE(v.stage, 0);
    EXPECT_FALSE(over.fits(recompute));
    EXPECT_EQ(v.stage, peak.stage);
    EXPECT_NEAR(v.bytes, peak.bytes, 1e-9 * peak.bytes);
    EXPECT_NEAR(v.excess_bytes, peak.bytes - tight, 1e-9 * peak.bytes);
    const MemoryMoment& at = over.moments()[v.stage][v.moment];
    EXPECT_NEAR(moment_bytes(at, v.stage, step.chunks, cost, recompute), peak.bytes,
                1e-9 * peak.bytes);
    ++violations;
    // Within: no violation at all.
    const MemoryCheck within(step.schedule, step.chunks, cost, peak.bytes * 1.001);
    EXPECT_TRUE(within.fits(recompute));
    EXPECT_EQ(within.worst_violation(recompute).stage, -1);
    ++fits;
  }
  EXPECT_EQ(violations, 60);
  EXPECT_EQ(fits, 60);
}

TEST(MemoryCheck, RecomputeOnlyLowersTheBytesItChecks) {
  // Full recompute fits a budget between its peak and the unrecomputed peak; none does not.
  std::mt19937_64 rng(3);
  const CostModel cost = test_cost({4, 4, 2});
  for (int trial = 0; trial < 20; ++trial) {
    const Step step = random_step(rng, 3);
    const double budget = budget_between(step, cost, 0.5);
    const MemoryCheck check(step.schedule, step.chunks, cost, budget);
    EXPECT_TRUE(check.fits(check.full_recompute()));
    EXPECT_FALSE(check.fits(check.no_recompute()));
    EXPECT_FALSE(check.fits(Recompute{})) << "an empty assignment is no recompute";
  }
}

TEST(MemoryCheck, StandardAssignmentsRespectEachStagesLayers) {
  const CostModel cost = test_cost({4, 1, 3});
  std::mt19937_64 rng(4);
  const Step step = random_step(rng, 3);
  const size_t n = step.chunks.size();
  const MemoryCheck check(step.schedule, step.chunks, cost, 1e12);
  const Recompute none = check.no_recompute(), two = check.uniform_recompute(2),
                  full = check.full_recompute();
  ASSERT_EQ(none.size(), 3u);
  ASSERT_EQ(two.size(), 3u);
  ASSERT_EQ(full.size(), 3u);
  const int layers[] = {4, 1, 3};
  for (int p = 0; p < 3; ++p) {
    EXPECT_EQ(none[p], std::vector<int>(n, 0));
    EXPECT_EQ(two[p], std::vector<int>(n, std::min(2, layers[p])));
    EXPECT_EQ(full[p], std::vector<int>(n, layers[p]));
  }
}

TEST(MemoryCheck, ShortfallWithinTheRowToleranceFits) {
  // The planner's rows accept a shortfall of 1e-9 of what the moment needs saved (problem_tools.h);
  // the check agrees, so a solver's answer is never refused for rounding.
  const CostModel cost = test_cost({2, 2});
  // Four equal whole sequences on two stages: every moment is plain to see.
  const Step step = one_wave_step(equal_chunks(4, 4096), 2);
  const Recompute full = uniform_layers(cost, 4, 2);
  const Peak recomputed = peak_moment(step, cost, full);
  // The same moment without recompute: what would need saving there.
  const MemoryCheck probe(step.schedule, step.chunks, cost, 1e12);
  const double unrecomputed = moment_bytes(probe.moments()[recomputed.stage][recomputed.moment],
                                           recomputed.stage, step.chunks, cost, Recompute{});
  ASSERT_GT(unrecomputed, recomputed.bytes * 1.5);
  // bytes - budget = f * 1e-9 * (unrecomputed - budget)  =>  budget = (bytes - f e unrec) / (1 - f
  // e)
  auto budget_at = [&](double f) {
    const double e = f * 1e-9;
    return (recomputed.bytes - e * unrecomputed) / (1 - e);
  };
  const MemoryCheck inside(step.schedule, step.chunks, cost, budget_at(0.5));
  EXPECT_LT(budget_at(0.5), recomputed.bytes);
  EXPECT_TRUE(inside.fits(full));
  const MemoryCheck outside(step.schedule, step.chunks, cost, budget_at(2));
  EXPECT_FALSE(outside.fits(full));
}

TEST(MemoryCheck, DescribeNamesTheStageActionSequenceAndBytes) {
  // Sequence 2 (40000 tokens) is by far the largest: the worst moment holds it.
  const CostModel cost = test_cost({2, 2});
  const Step step =
      one_wave_step({whole(0, 1000), whole(1, 1000), whole(2, 40000), whole(3, 1000)}, 2);
  const double gib = 1024.0 * 1024.0 * 1024.0;
  const MemoryCheck check(step.schedule, step.chunks, cost, 0.25 * gib);
  const MemoryViolation v = check.worst_violation(check.no_recompute());
  ASSERT_GE(v.stage, 0);
  const MemoryMoment& moment = check.moments()[v.stage][v.moment];
  const Action& action = step.schedule.stages[v.stage][moment.action_index];
  EXPECT_EQ(action.chunk, 2);
  const std::string text = check.describe(v, "the test assignment does not fit");
  SCOPED_TRACE(text);
  EXPECT_EQ(text.rfind("the test assignment does not fit: stage " + std::to_string(v.stage) +
                           " at " + action.text() + " (action " +
                           std::to_string(moment.action_index) + " of its list) needs ",
                       0),
            0u);
  // Below 1 GiB the bytes stand beside the GiB (core/memory_text.h).
  EXPECT_NE(
      text.find("needs " + gib_text(v.bytes) + " against a budget of 0.25 GiB (268,435,456 bytes)"),
      std::string::npos);
  EXPECT_NE(text.find("chunks in flight: " + std::to_string(moment.in_flight.size())),
            std::string::npos);
  EXPECT_NE(text.find("the longest sequence in flight is sequence 2 (40000 tokens)"),
            std::string::npos);
  EXPECT_NE(text.find("more pipeline stages"), std::string::npos);
  // Nothing to describe without a violation.
  EXPECT_THROW(check.describe(MemoryViolation{}, "x"), Error);
}

}  // namespace
}  // namespace infinipipe
