// candidate.cc: pipeline_bound's cheap bounds on a candidate's one-wave plan (no such plan is
// faster than the bound, none holds less memory than the floor, none fits with less recompute than
// the recompute floor), and the search keys built from them.
#include "candidate.h"

#include <algorithm>
#include <random>
#include <vector>

#include <gtest/gtest.h>

#include "infinipipe/recompute/recompute_planner.h"
#include "infinipipe/schedule/scheduler.h"
#include "infinipipe/sim/simulator.h"
#include "planner/candidate_fixtures.h"
#include "planner/instances.h"
#include "planner_support.h"
#include "sim/sim_fixtures.h"

namespace infinipipe {
namespace {

TEST(PipelineBound, NeverAboveTheSimulatedTimeNorTheSimulatedPeaks) {
  std::mt19937_64 rng(60);
  int compared = 0, over = 0, never_fits = 0;
  for (int trial = 0; trial < 40; ++trial) {
    const Instance inst = random_instance(rng);
    const Candidate cand = candidate(inst, some_setting(inst, trial));
    SCOPED_TRACE(described(inst, cand.setting));
    const int d = inst.options.num_stages;
    // No budget: the peaks are measured, never refused.
    const SimResult sim =
        simulate_quietly(one_wave_schedule(cand.chunks, d), cand.chunks, inst.cost, Recompute{});
    ++compared;
    EXPECT_LE(cand.bound, sim.step_time_s * (1 + 1e-9));
    EXPECT_GT(cand.bound, 0);
    EXPECT_EQ(cand.optimistic, cand.bound);
    // The memory floor: what is over the budget at least. With a budget of one byte it is the
    // floor itself (model state plus the activations 1F1B holds), below every simulated peak.
    Candidate floor = cand;
    planning::pipeline_bound(floor, inst.cost, d, 1.0);
    ASSERT_EQ(floor.excess.size(), static_cast<size_t>(d));
    for (int p = 0; p < d; ++p) {
      EXPECT_LE(floor.excess[p] + 1.0, sim.peak_memory_bytes[p] * (1 + 1e-9)) << "stage " << p;
      EXPECT_GE(floor.excess[p] + 1.0, inst.cost.model_state_bytes(p)) << "stage " << p;
    }
    // Under the real budget: a plan that fits as it is is never called over budget.
    bool fits = true;
    for (int p = 0; p < d; ++p)
      fits &= sim.peak_memory_bytes[p] <= inst.options.memory_budget_bytes;
    if (fits) EXPECT_FALSE(planning::over_budget(cand));
    // With the K/V buffers: only ever said of candidates the simulator finds over the budget.
    if (cand.never_fits_as_is) EXPECT_FALSE(fits);
    over += planning::over_budget(cand);
    never_fits += cand.never_fits_as_is;
  }
  EXPECT_EQ(compared, 40);
  EXPECT_GE(over, 5) << "too few candidates over the budget to test the floor against";
  EXPECT_GE(never_fits, over) << "the K/V buffers only add to the floor";
}

TEST(PipelineBound, ExactWhenThePipelineNeverStalls) {
  // Equal chunks on equal stages, no point-to-point time: 1F1B runs (m + d - 1) forward-backward
  // pairs end to end, and the bound is that.
  for (int d : {1, 2, 4}) {
    for (int m : {1, 3, 8}) {
      const CostModel cost = test::simple_cost(std::vector<int>(d, 2));
      Candidate cand;
      cand.chunks = test::equal_chunks(m, 50);
      planning::pipeline_bound(cand, cost, d, 1e18);
      const SimResult sim =
          simulate_quietly(one_wave_schedule(cand.chunks, d), cand.chunks, cost, {});
      EXPECT_NEAR(cand.bound, (m + d - 1) * 0.3, 1e-12) << "d=" << d << " m=" << m;
      EXPECT_NEAR(cand.bound, sim.step_time_s, 1e-12) << "d=" << d << " m=" << m;
    }
  }
}

TEST(PipelineBound, BusyFillAndDrainFromTheCostModel) {
  std::mt19937_64 rng(61);
  for (int trial = 0; trial < 10; ++trial) {
    const Instance inst = random_instance(rng);
    const Candidate cand = candidate(inst, some_setting(inst, trial));
    SCOPED_TRACE(described(inst, cand.setting));
    const int d = inst.options.num_stages;
    const CostModel& cost = inst.cost;
    // The first forward and the last backward of the one-wave schedule, found on stage 0.
    const Schedule schedule = one_wave_schedule(cand.chunks, d);
    int first = -1, last = -1;
    for (const Action& a : schedule.stages[0]) {
      if (a.type == ActionType::kForward && first < 0) first = a.chunk;
      if (a.type == ActionType::kBackward) last = a.chunk;
    }
    ASSERT_GE(first, 0);
    ASSERT_GE(last, 0);
    ASSERT_EQ(cand.busy.size(), static_cast<size_t>(d));
    EXPECT_EQ(cand.fill[0], 0);
    EXPECT_EQ(cand.drain[0], 0);
    double bound = 0;
    for (int p = 0; p < d; ++p) {
      double busy = 0, rate = 0;
      for (const Chunk& c : cand.chunks) {
        busy += cost.forward_time(c, p) + cost.backward_time(c, p, 0);
        rate = std::max(rate, cost.checkpoint_saving_bytes(c, p) / cost.layer_forward_time(c));
      }
      EXPECT_NEAR(cand.busy[p], busy, 1e-9 * busy);
      EXPECT_NEAR(cand.saving_rate[p], rate, 1e-9 * rate);
      if (p + 1 < d) {
        const Chunk& f = cand.chunks[first];
        const Chunk& b = cand.chunks[last];
        EXPECT_NEAR(cand.fill[p + 1] - cand.fill[p], cost.forward_time(f, p) + cost.p2p_time(f, p),
                    1e-9 * cand.fill[p + 1]);
        EXPECT_NEAR(cand.drain[p + 1] - cand.drain[p],
                    cost.backward_time(b, p, 0) + cost.p2p_time(b, p), 1e-9 * cand.drain[p + 1]);
      }
      bound = std::max(bound, cand.fill[p] + cand.busy[p] + cand.drain[p]);
    }
    EXPECT_DOUBLE_EQ(cand.bound, bound);
    EXPECT_EQ(cand.key, planning::search_key(cand));
  }
}

TEST(PipelineBound, NoAssignmentFitsWithLessRecomputeThanTheFloor) {
  std::mt19937_64 rng(62);
  int checked = 0, positive_floors = 0;
  for (int trial = 0; trial < 120 && checked < 50; ++trial) {
    Instance inst = random_instance(rng);
    // Half with a recomputed layer cheaper than a forward, as calibrated on CPUs.
    if (trial % 2 == 1) inst.cost = testing::with_recompute_ratio(inst.cost, 0.85);
    const Candidate cand = candidate(inst, some_setting(inst, trial));
    SCOPED_TRACE(described(inst, cand.setting));
    if (!planning::over_budget(cand)) continue;
    const int d = inst.options.num_stages;
    const Schedule schedule = one_wave_schedule(cand.chunks, d);
    for (RecomputeMethod method : {RecomputeMethod::kStageAwareGreedy,
                                   RecomputeMethod::kUntiedGreedy, RecomputeMethod::kFull}) {
      RecomputeOptions o;
      o.method = method;
      o.memory_budget_bytes = inst.options.memory_budget_bytes;
      const RecomputeResult ck = plan_recompute(schedule, cand.chunks, inst.cost, o);
      if (!ck.feasible) continue;
      ++checked;
      for (int p = 0; p < d; ++p) {
        double seconds = 0;
        for (size_t k = 0; k < cand.chunks.size(); ++k)
          seconds += inst.cost.recompute_time(cand.chunks[k], p, ck.recompute[p][k]);
        positive_floors += cand.recompute_floor[p] > 0;
        EXPECT_GE(seconds, cand.recompute_floor[p] * (1 - 1e-9))
            << ck.solver << " fits stage " << p << " with less recompute than the floor";
      }
    }
  }
  EXPECT_GE(checked, 20);
  EXPECT_GE(positive_floors, 10) << "the floors compared were mostly zero: the check says little";
}

// One chunk whose backward needs exactly 15 of stage 0's 20 layers recomputed, each costing 0.85
// of its forward (as calibrated on CPUs): the floor stays under those 15 recomputes. Counted in
// forwards, as it once was, the bytes over the budget would claim more than 15 x 0.85 forwards.
TEST(PipelineBound, TheRecomputeFloorCountsALayerAtTheRecomputeRatio) {
  const CostModel cost =
      testing::with_recompute_ratio(test_support::a800_cost("llama-13b", 2), 0.85);
  const Chunk chunk{{Slice{0, 0, 4096, 4096}}};
  const double budget = cost.model_state_bytes(0) + cost.activation_bytes(chunk, 0, 15) +
                        cost.backward_workspace_bytes(chunk, 0) + 1;
  Candidate cand;
  cand.chunks = {chunk};
  planning::pipeline_bound(cand, cost, 2, budget);
  const Schedule schedule = one_wave_schedule(cand.chunks, 2);
  RecomputeOptions o;
  o.method = RecomputeMethod::kUntiedGreedy;
  o.memory_budget_bytes = budget;
  const RecomputeResult ck = plan_recompute(schedule, cand.chunks, cost, o);
  ASSERT_TRUE(ck.feasible) << ck.reason;
  EXPECT_EQ(ck.recompute[0][0], 15);
  EXPECT_GT(cand.recompute_floor[0], 0);
  EXPECT_LE(cand.recompute_floor[0], cost.recompute_time(chunk, 0, 15) * (1 + 1e-9));
}

// The simulated one wave's highest peak over the stages, with every layer recomputed or none.
double one_wave_peak(const Instance& inst, const std::vector<Chunk>& chunks, bool recomputed) {
  const int d = inst.options.num_stages;
  Recompute recompute(d, std::vector<int>(chunks.size(), 0));
  if (recomputed)
    for (int p = 0; p < d; ++p)
      std::fill(recompute[p].begin(), recompute[p].end(), inst.cost.layers(p));
  const SimResult sim =
      simulate_quietly(one_wave_schedule(chunks, d), chunks, inst.cost, recompute);
  return *std::max_element(sim.peak_memory_bytes.begin(), sim.peak_memory_bytes.end());
}

// never_fits_recomputed: the floor with every layer recomputed, said only when even full
// recompute leaves the simulated one wave over the budget (never at a budget it fits).
TEST(PipelineBound, NeverFitsRecomputedOnlyWhenFullRecomputeIsOver) {
  std::mt19937_64 rng(62);
  int said = 0;
  for (int trial = 0; trial < 40; ++trial) {
    const Instance inst = random_instance(rng);
    const Candidate cand = candidate(inst, some_setting(inst, trial));
    SCOPED_TRACE(described(inst, cand.setting));
    const int d = inst.options.num_stages;
    const double peak = one_wave_peak(inst, cand.chunks, true);
    for (double share : {0.5, 0.9, 0.99, 1.0, 1.01}) {
      Candidate at = cand;
      planning::pipeline_bound(at, inst.cost, d, share * peak);
      if (share >= 1) EXPECT_FALSE(at.never_fits_recomputed) << "budget " << share << " x peak";
      said += at.never_fits_recomputed;
    }
  }
  EXPECT_GT(said, 0) << "never said: the test shows nothing";
}

// never_fits_as_is (the search's early check) answers as pipeline_bound's walk does, at budgets
// either side of the simulated peak.
TEST(PipelineBound, NeverFitsAsIsAloneAgreesWithTheWalk) {
  std::mt19937_64 rng(63);
  int said = 0, denied = 0;
  for (int trial = 0; trial < 40; ++trial) {
    const Instance inst = random_instance(rng);
    const Candidate cand = candidate(inst, some_setting(inst, trial));
    SCOPED_TRACE(described(inst, cand.setting));
    const int d = inst.options.num_stages;
    const double peak = one_wave_peak(inst, cand.chunks, false);
    for (double share : {0.3, 0.7, 0.95, 1.0, 1.05}) {
      Candidate at = cand;
      planning::pipeline_bound(at, inst.cost, d, share * peak);
      EXPECT_EQ(planning::never_fits_as_is(cand.chunks, inst.cost, d, share * peak),
                at.never_fits_as_is)
          << "budget " << share << " x peak";
      (at.never_fits_as_is ? said : denied) += 1;
    }
  }
  EXPECT_GT(said, 0) << "never said: the test shows nothing";
  EXPECT_GT(denied, 0) << "always said: the test shows nothing";
}

TEST(SearchKeys, FromTheBoundsAsDocumented) {
  Candidate cand;
  cand.busy = {1.0, 2.0};
  cand.fill = {0.0, 0.5};
  cand.drain = {0.0, 0.25};
  cand.bound = 2.75;
  cand.optimistic = 3.0;
  cand.excess = {0.0, 0.0};
  cand.recompute_floor = {0.0, 0.0};
  EXPECT_DOUBLE_EQ(planning::bound_with(cand, {0.0, 0.0}), 2.75);
  EXPECT_DOUBLE_EQ(planning::bound_with(cand, {3.0, 0.0}), 4.0);
  EXPECT_DOUBLE_EQ(planning::bound_with(cand, {0.0, 1.0}), 3.75);
  EXPECT_FALSE(planning::over_budget(cand));
  // May fit: the bound, or the optimistic time once simulated.
  EXPECT_DOUBLE_EQ(planning::search_key(cand), 3.0);
  cand.optimistic = 2.0;
  EXPECT_DOUBLE_EQ(planning::search_key(cand), 2.75);
  // Known not to fit: one wave with the least recompute, or several waves, whichever is less.
  cand.excess = {0.0, 1e9};
  cand.recompute_floor = {0.0, 1.5};
  EXPECT_TRUE(planning::over_budget(cand));
  EXPECT_DOUBLE_EQ(planning::one_wave_key(cand), 4.25);  // 0.5 + 2 + 1.5 + 0.25
  EXPECT_DOUBLE_EQ(planning::waves_key(cand), 2.75);     // 2 + 0.5 + 0.25
  EXPECT_DOUBLE_EQ(planning::search_key(cand), 2.75);
  cand.recompute_floor = {0.0, 0.1};
  EXPECT_DOUBLE_EQ(planning::one_wave_key(cand), 2.85);
  EXPECT_DOUBLE_EQ(planning::search_key(cand), 2.75);
  cand.optimistic = 3.5;  // one wave's optimistic time rules when above the bound
  EXPECT_DOUBLE_EQ(planning::one_wave_key(cand), 3.5);
  EXPECT_DOUBLE_EQ(planning::search_key(cand), 3.5);
}

}  // namespace
}  // namespace infinipipe
