// EPP's search knobs and the search itself: the chunk token cap, strict packing, packed chunks
// lightest first and the drain taper keep every token in exactly one slice and respect their
// limits; the search never loses to a setting it could have taken that fits as it is, its own
// or a baseline's chunking (its bounds are sound); the recompute it keeps is never slower in
// simulation than the tied or untied programs on the same schedule; a plan's setting gives its
// chunks again.
#include <algorithm>
#include <map>
#include <random>
#include <tuple>

#include <gtest/gtest.h>

#include "infinipipe/checkpoint/checkpoint_planner.h"
#include "infinipipe/chunking/sequence_processor.h"
#include "infinipipe/core/error.h"
#include "infinipipe/plan/planner.h"
#include "infinipipe/plan/static_baseline.h"
#include "infinipipe/schedule/scheduler.h"
#include "infinipipe/sim/simulator.h"
#include "plan/instances.h"

namespace infinipipe {
namespace {

using testing::Instance;
using testing::random_instance;
using testing::random_lengths;

TEST(EppSearch, NeverSlowerThanASettingThatFitsAsItIs) {
  std::mt19937_64 rng(35);
  int compared = 0, borrowed_compared = 0;
  for (int trial = 0; trial < 25; ++trial) {
    Instance inst = random_instance(rng);
    inst.options.max_k = 6;
    SCOPED_TRACE(inst.description);
    const PlanResult epp = plan_epp(inst.lengths, inst.cost, inst.options);
    const int64_t longest = *std::max_element(inst.lengths.begin(), inst.lengths.end());
    std::vector<Setting> settings;
    for (int k = 1; k <= std::min<int64_t>(6, longest); ++k) {
      for (int64_t cap : inst.options.chunk_token_caps) {
        for (bool strict : {false, true}) {
          Setting s;
          s.k = k;
          s.token_cap = cap;
          s.strict_packing = strict;
          settings.push_back(s);
        }
      }
    }
    for (Method baseline : {Method::kSeq1F1B, Method::kChunkFlow})
      for (Setting s : candidate_settings(baseline, longest)) {
        s.chunker = baseline;
        if (s.k <= inst.options.max_k) settings.push_back(s);
      }
    for (const Setting& s : settings) {
      const std::vector<Chunk> chunks = setting_chunks(Method::kEpp, inst.lengths, s, inst.cost);
      ScheduleOptions schedule_options;
      schedule_options.num_stages = inst.options.num_stages;
      Wave all(chunks.size());
      for (size_t c = 0; c < chunks.size(); ++c) all[c] = static_cast<int>(c);
      SimOptions sim_options;
      sim_options.memory_budget_bytes = inst.options.memory_budget_bytes;
      sim_options.record_events = false;
      const SimResult one = simulate(build_schedule(chunks, {all}, schedule_options), chunks,
                                     inst.cost, {}, sim_options);
      if (one.over_budget) continue;
      ++compared;
      ASSERT_TRUE(epp.feasible) << describe(Method::kEpp, s) << " fits but EPP found nothing";
      EXPECT_LE(epp.plan.step_time_s, one.step_time_s * (1 + 1e-9))
          << describe(Method::kEpp, s) << " takes " << one.step_time_s << " s, EPP "
          << describe(Method::kEpp, epp.plan.setting) << " " << epp.plan.step_time_s << " s";
      borrowed_compared += s.chunker != Method::kEpp;
    }
  }
  EXPECT_GE(compared, 100);
  EXPECT_GE(borrowed_compared, 50);
}

// The recompute EPP keeps was chosen by simulation among the tied programs (greedy, CBC) and the
// untied greedy: solving them again on the plan's own schedule finds nothing faster. (CBC is
// compared only when it proves its answer optimal: a time-limited answer can differ run to run.)
TEST(EppSearch, KeptRecomputeIsNeverSlowerThanTiedOrUntied) {
  std::mt19937_64 rng(36);
  int with_recompute = 0, untied_won = 0, tied_won = 0;
  for (int trial = 0; trial < 60 && with_recompute < 15; ++trial) {
    const Instance inst = random_instance(rng);
    SCOPED_TRACE(inst.description);
    const PlanResult epp = plan_epp(inst.lengths, inst.cost, inst.options);
    if (!epp.feasible || epp.plan.recompute_s == 0) continue;
    ++with_recompute;
    const Plan& plan = epp.plan;
    untied_won += plan.checkpoint_solver.rfind("untied", 0) == 0;
    tied_won += plan.checkpoint_solver.rfind("tied", 0) == 0;
    for (CheckpointMethod method :
         {CheckpointMethod::kStageAwareGreedy, CheckpointMethod::kUntiedGreedy,
          CheckpointMethod::kStageAware}) {
      CheckpointOptions o;
      o.method = method;
      o.memory_budget_bytes = inst.options.memory_budget_bytes;
      o.time_limit_s = inst.options.checkpoint_time_limit_s;
      const CheckpointResult ck = plan_checkpointing(plan.schedule, plan.chunks, inst.cost, o);
      if (!ck.feasible || (method == CheckpointMethod::kStageAware && ck.solver != "cbc")) continue;
      SimOptions sim_options;
      sim_options.memory_budget_bytes = inst.options.memory_budget_bytes;
      sim_options.record_events = false;
      const SimResult sim =
          simulate(plan.schedule, plan.chunks, inst.cost, ck.recompute, sim_options);
      EXPECT_LE(plan.step_time_s, sim.step_time_s * (1 + 1e-9))
          << ck.solver << " on the plan's schedule is faster than the kept "
          << plan.checkpoint_solver;
    }
  }
  EXPECT_GE(with_recompute, 8);
  EXPECT_EQ(untied_won + tied_won, with_recompute)
      << "the solver field does not say tied or untied";
}

TEST(EppSearch, NegativeCapIsAnError) {
  const CostModel cost =
      CostModel::analytic(ModelShape::builtin("tiny"), Hardware::builtin("a800"), 2);
  PlannerOptions o;
  o.num_stages = 2;
  o.memory_budget_bytes = 1e12;
  o.chunk_token_caps = {0, -1024};
  EXPECT_THROW(plan_epp({100, 2000}, cost, o), Error);
}

}  // namespace
}  // namespace infinipipe
