// recompute_choice.cc: which checkpointing program a candidate's schedule gets. Each program is
// solved and the simulator decides: best_recompute keeps the lowest simulated step time (ties:
// the earlier method), search_recompute tries the untied greedy when the tied one is close,
// choose_recompute keeps another program only when it is faster.
#include "recompute_choice.h"

#include <algorithm>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "infinipipe/recompute/recompute_planner.h"
#include "infinipipe/schedule/scheduler.h"
#include "planner/candidate_fixtures.h"
#include "planner/instances.h"
#include "planner_support.h"

namespace infinipipe {
namespace {

// A candidate in one wave whose schedule needs recompute to fit (the search's situation), or
// false when the instance's budget is generous.
bool needs_recompute(const Instance& inst, int pick, Candidate& cand) {
  cand = candidate(inst, some_setting(inst, pick));
  cand.waves = {planning::all_chunks(cand.chunks.size())};
  cand.schedule = one_wave_schedule(cand.chunks, inst.options.num_stages);
  return planning::predict(cand.schedule, cand.chunks, inst.cost, {},
                           inst.options.memory_budget_bytes)
      .over_budget;
}

TEST(RecomputeOptions, CarryTheMethodBudgetAndTimeLimit) {
  PlannerOptions options;
  options.memory_budget_bytes = 12e9;
  options.recompute_time_limit_s = 0.25;
  const RecomputeOptions o = planning::recompute_options(RecomputeMethod::kUntiedGreedy, options);
  EXPECT_EQ(o.method, RecomputeMethod::kUntiedGreedy);
  EXPECT_EQ(o.memory_budget_bytes, 12e9);
  EXPECT_EQ(o.time_limit_s, 0.25);
}

TEST(BestRecompute, KeepsTheMethodWithTheLowestSimulatedStepTime) {
  const std::vector<RecomputeMethod> methods = {RecomputeMethod::kFull, RecomputeMethod::kUniform,
                                                RecomputeMethod::kStageAwareGreedy,
                                                RecomputeMethod::kUntiedGreedy};
  std::mt19937_64 rng(70);
  int compared = 0, not_first = 0;
  for (int trial = 0; trial < 80 && compared < 20; ++trial) {
    const Instance inst = random_instance(rng);
    Candidate cand;
    if (!needs_recompute(inst, trial, cand)) continue;
    SCOPED_TRACE(described(inst, cand.setting));
    // Each method on its own, simulated.
    int best = -1;
    double best_time = 0;
    std::vector<RecomputeResult> solved;
    for (size_t m = 0; m < methods.size(); ++m) {
      solved.push_back(plan_recompute(cand.schedule, cand.chunks, inst.cost,
                                      planning::recompute_options(methods[m], inst.options)));
      if (!solved[m].feasible) continue;
      const SimResult sim =
          planning::predict(cand.schedule, cand.chunks, inst.cost, solved[m].recompute,
                            inst.options.memory_budget_bytes);
      if (sim.over_budget) continue;
      if (best < 0 || sim.step_time_s < best_time) {
        best = static_cast<int>(m);
        best_time = sim.step_time_s;
      }
    }
    RecomputeResult checkpoint;
    SimResult sim;
    std::string reason;
    const bool found = planning::best_recompute(cand.schedule, cand.chunks, methods, inst.cost,
                                                inst.options, checkpoint, sim, reason);
    ASSERT_EQ(found, best >= 0);
    if (!found) continue;
    ++compared;
    not_first += best > 0;
    EXPECT_EQ(sim.step_time_s, best_time);
    EXPECT_EQ(checkpoint.recompute, solved[best].recompute);
    EXPECT_FALSE(sim.over_budget);
    // The tied program's answer says it is tied; the others keep their solver's name.
    if (methods[best] == RecomputeMethod::kStageAwareGreedy &&
        solved[best].solver.rfind("untied", 0) != 0)
      EXPECT_EQ(checkpoint.solver, "tied " + solved[best].solver);
    else
      EXPECT_EQ(checkpoint.solver, solved[best].solver);
  }
  EXPECT_GE(compared, 10);
  EXPECT_GE(not_first, 3) << "the first method always won: the choice was never tested";
}

TEST(BestRecompute, TiesGoToTheEarlierMethod) {
  // Where everything fits, every method recomputes nothing and the step times tie exactly; the
  // solvers' names tell which answer was kept.
  std::mt19937_64 rng(71);
  Instance inst = random_instance(rng);
  inst.options.memory_budget_bytes = 1e18;
  Candidate cand;
  ASSERT_FALSE(needs_recompute(inst, 1, cand));
  auto kept = [&](const std::vector<RecomputeMethod>& methods) {
    RecomputeResult checkpoint;
    SimResult sim;
    std::string reason;
    EXPECT_TRUE(planning::best_recompute(cand.schedule, cand.chunks, methods, inst.cost,
                                         inst.options, checkpoint, sim, reason));
    EXPECT_EQ(checkpoint.recompute_s, 0);
    return checkpoint.solver;
  };
  EXPECT_EQ(kept({RecomputeMethod::kUniform, RecomputeMethod::kNone}), "uniform");
  EXPECT_EQ(kept({RecomputeMethod::kNone, RecomputeMethod::kUniform}), "none");
  EXPECT_EQ(kept({RecomputeMethod::kUntiedGreedy, RecomputeMethod::kNone}), "none needed");
  // Nothing to recompute is not called tied.
  EXPECT_EQ(kept({RecomputeMethod::kStageAwareGreedy, RecomputeMethod::kNone}), "none needed");
}

TEST(BestRecompute, NothingFitsGivesTheFirstMethodsReason) {
  std::mt19937_64 rng(72);
  Instance inst = random_instance(rng);
  // Not even the weights fit.
  inst.options.memory_budget_bytes = largest_model_state(inst.cost) * 0.5;
  Candidate cand;
  ASSERT_TRUE(needs_recompute(inst, 0, cand));
  RecomputeResult checkpoint;
  SimResult sim;
  std::string reason;
  EXPECT_FALSE(planning::best_recompute(
      cand.schedule, cand.chunks, {RecomputeMethod::kStageAwareGreedy, RecomputeMethod::kFull},
      inst.cost, inst.options, checkpoint, sim, reason));
  const RecomputeResult first =
      plan_recompute(cand.schedule, cand.chunks, inst.cost,
                     planning::recompute_options(RecomputeMethod::kStageAwareGreedy, inst.options));
  ASSERT_FALSE(first.feasible);
  EXPECT_EQ(reason, first.reason);
  EXPECT_NE(reason.find("stage"), std::string::npos) << reason;
}

TEST(SearchRecompute, NeverSlowerThanTheTiedGreedyAndFitsTheBudget) {
  std::mt19937_64 rng(73);
  int compared = 0, untied = 0;
  for (int trial = 0; trial < 80 && compared < 15; ++trial) {
    const Instance inst = random_instance(rng);
    Candidate cand;
    if (!needs_recompute(inst, trial, cand)) continue;
    SCOPED_TRACE(described(inst, cand.setting));
    RecomputeResult tied;
    SimResult tied_sim;
    std::string reason;
    const bool tied_fits =
        planning::best_recompute(cand.schedule, cand.chunks, {RecomputeMethod::kStageAwareGreedy},
                                 inst.cost, inst.options, tied, tied_sim, reason);
    std::string why;
    const bool fits = planning::search_recompute(cand, tied_fits ? tied_sim.step_time_s : 1e30,
                                                 inst.cost, inst.options, why);
    if (!fits) {
      EXPECT_FALSE(tied_fits);
      EXPECT_FALSE(why.empty());
      continue;
    }
    ++compared;
    EXPECT_FALSE(cand.sim.over_budget);
    EXPECT_TRUE(cand.checkpoint.feasible);
    if (tied_fits) EXPECT_LE(cand.sim.step_time_s, tied_sim.step_time_s);
    untied += cand.checkpoint.solver.rfind("untied", 0) == 0;
    // What it keeps is what it says: the simulation of its own recompute.
    const SimResult again =
        planning::predict(cand.schedule, cand.chunks, inst.cost, cand.checkpoint.recompute,
                          inst.options.memory_budget_bytes);
    EXPECT_EQ(again.step_time_s, cand.sim.step_time_s);
  }
  EXPECT_GE(compared, 8);
  EXPECT_GE(untied, 1) << "the untied greedy never won: its trial was never tested";
}

TEST(ChooseRecompute, KeepsAnotherProgramOnlyWhenFaster) {
  std::mt19937_64 rng(74);
  int compared = 0, changed = 0;
  for (int trial = 0; trial < 80 && compared < 10; ++trial) {
    const Instance inst = random_instance(rng);
    Candidate cand;
    if (!needs_recompute(inst, trial, cand)) continue;
    SCOPED_TRACE(described(inst, cand.setting));
    // Start from full recompute, which fits whenever anything does but is rarely fastest.
    cand.checkpoint =
        plan_recompute(cand.schedule, cand.chunks, inst.cost,
                       planning::recompute_options(RecomputeMethod::kFull, inst.options));
    if (!cand.checkpoint.feasible) continue;
    cand.sim = planning::predict(cand.schedule, cand.chunks, inst.cost, cand.checkpoint.recompute,
                                 inst.options.memory_budget_bytes);
    ++compared;
    const Candidate before = cand;
    // The greedy programs, each on its own.
    double fastest = before.sim.step_time_s;
    for (RecomputeMethod m : {RecomputeMethod::kUntiedGreedy, RecomputeMethod::kStageAwareGreedy}) {
      const RecomputeResult ck = plan_recompute(cand.schedule, cand.chunks, inst.cost,
                                                planning::recompute_options(m, inst.options));
      if (!ck.feasible) continue;
      const SimResult sim = planning::predict(cand.schedule, cand.chunks, inst.cost, ck.recompute,
                                              inst.options.memory_budget_bytes);
      if (!sim.over_budget) fastest = std::min(fastest, sim.step_time_s);
    }
    planning::choose_recompute(cand,
                               {RecomputeMethod::kUntiedGreedy, RecomputeMethod::kStageAwareGreedy},
                               inst.cost, inst.options);
    EXPECT_EQ(cand.sim.step_time_s, fastest);
    EXPECT_FALSE(cand.sim.over_budget);
    if (cand.sim.step_time_s < before.sim.step_time_s) {
      ++changed;
      EXPECT_NE(cand.checkpoint.recompute, before.checkpoint.recompute);
    } else {
      EXPECT_EQ(cand.checkpoint.recompute, before.checkpoint.recompute);
      EXPECT_EQ(cand.checkpoint.solver, "full");
    }
    // Full recompute again is no faster than what is kept: nothing changes.
    const Candidate chosen = cand;
    planning::choose_recompute(cand, {RecomputeMethod::kFull}, inst.cost, inst.options);
    EXPECT_EQ(cand.checkpoint.recompute, chosen.checkpoint.recompute);
    EXPECT_EQ(cand.checkpoint.solver, chosen.checkpoint.solver);
    EXPECT_EQ(cand.sim.step_time_s, chosen.sim.step_time_s);
    // CBC (kStageAware) is skipped without a time limit: nothing changes.
    PlannerOptions no_cbc = inst.options;
    no_cbc.recompute_time_limit_s = 0;
    Candidate kept = before;
    planning::choose_recompute(kept, {RecomputeMethod::kStageAware}, inst.cost, no_cbc);
    EXPECT_EQ(kept.checkpoint.recompute, before.checkpoint.recompute);
    EXPECT_EQ(kept.checkpoint.solver, before.checkpoint.solver);
    EXPECT_EQ(kept.sim.step_time_s, before.sim.step_time_s);
  }
  EXPECT_GE(compared, 5);
  EXPECT_GE(changed, 3) << "full recompute was never beaten: the choice was never tested";
}

TEST(ChooseRecompute, NothingToChooseWithoutRecompute) {
  std::mt19937_64 rng(75);
  const Instance inst = random_instance(rng);
  Candidate cand = candidate(inst, some_setting(inst, 0));
  cand.checkpoint.recompute_s = 0;
  cand.checkpoint.solver = "none needed";
  cand.sim.step_time_s = 123;
  // Full recompute would be slower anyway, but it is not even tried (the schedule is empty).
  planning::choose_recompute(cand, {RecomputeMethod::kFull}, inst.cost, inst.options);
  EXPECT_EQ(cand.checkpoint.solver, "none needed");
  EXPECT_EQ(cand.sim.step_time_s, 123);
}

}  // namespace
}  // namespace infinipipe
