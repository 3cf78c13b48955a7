// baseline_plan.cc: a baseline (batch-level, Seq1F1B, ChunkFlow) at one setting: its chunking,
// one wave, 1F1B, uniform recompute (a fixed count, or the smallest that fits). Every feasible
// plan is executable and fits; a setting that cannot chunk or fit the step is infeasible with the
// reason; EPP is not a baseline.
#include <algorithm>
#include <random>

#include <gtest/gtest.h>

#include "infinipipe/core/error.h"
#include "infinipipe/planner/planner.h"
#include "infinipipe/schedule/scheduler.h"
#include "infinipipe/sim/simulator.h"
#include "planner/instances.h"
#include "planner/plan_checks.h"

namespace infinipipe {
namespace {

TEST(BaselinePlan, EveryFeasiblePlanIsExecutableAndFits) {
  // The instances of EppSearch.EveryFeasiblePlanIsExecutableAndFits.
  std::mt19937_64 rng(20250921);
  for (int trial = 0; trial < 150; ++trial) {
    const Instance inst = random_instance(rng);
    SCOPED_TRACE(inst.description);
    const int64_t longest = longest_of(inst.lengths);
    Setting s;
    s.token_cap = 2 * longest;
    s.k = 4;
    s.chunk_tokens = 1024;
    for (Method m : {Method::kBatch, Method::kSeq1F1B, Method::kChunkFlow}) {
      const PlanResult r = plan_at(m, inst, s);
      if (r.feasible)
        expect_executable(r.plan, inst);
      else
        EXPECT_FALSE(r.reason.empty());
    }
  }
}

TEST(BaselinePlan, UniformRecomputeIsUniformAndFixedCountIsHonoured) {
  std::mt19937_64 rng(7);
  int checked = 0;
  for (int trial = 0; trial < 20; ++trial) {
    const Instance inst = random_instance(rng);
    SCOPED_TRACE(inst.description);
    Setting s = capped_at_longest(inst.lengths);
    const PlanResult own = plan_at(Method::kBatch, inst, s);
    if (!own.feasible) continue;
    const int count = own.plan.setting.uniform_recompute;
    ASSERT_GE(count, 0);
    for (int p = 0; p < inst.cost.num_stages(); ++p)
      for (int layers : own.plan.recompute[p])
        EXPECT_EQ(layers, std::min(count, inst.cost.layers(p)));
    // One fewer layer must not fit (the count is the smallest), one more costs time.
    if (count > 0) {
      s.uniform_recompute = count - 1;
      EXPECT_FALSE(plan_at(Method::kBatch, inst, s).feasible);
    }
    s.uniform_recompute = count + 1;
    const PlanResult more = plan_at(Method::kBatch, inst, s);
    ASSERT_TRUE(more.feasible) << more.reason;
    EXPECT_EQ(more.plan.setting.uniform_recompute, count + 1);
    EXPECT_GE(more.plan.step_time_s, own.plan.step_time_s);
    ++checked;
  }
  EXPECT_GE(checked, 5);
}

TEST(BaselinePlan, EmptyBatchIsAnError) {
  const CostModel cost = a800_cost("tiny", 2);
  EXPECT_THROW(
      plan_with_setting(Method::kBatch, {}, Setting{1, 1024, 0, -1}, cost, options_for(cost, 1e12)),
      Error);
}

TEST(BaselinePlan, SequenceThatCannotFitIsInfeasibleWithItsNameStageAndBytes) {
  const CostModel cost = a800_cost("llama-13b", 4);
  const double state = largest_model_state(cost);
  // A hair above the model state: not even one long sequence fully checkpointed fits.
  const PlannerOptions options = options_for(cost, state + 64.0 * 1024 * 1024);
  const PlanResult base = plan_with_setting(Method::kBatch, {1000, 65536, 2000},
                                            Setting{1, 65536, 0, -1}, cost, options);
  ASSERT_FALSE(base.feasible);
  EXPECT_NE(base.reason.find("stage"), std::string::npos) << base.reason;
}

TEST(BaselinePlan, SequenceLongerThanTheCapMakesTheBaselineInfeasible) {
  const CostModel cost = a800_cost("tiny", 2);
  const PlanResult r = plan_with_setting(Method::kBatch, {100, 5000}, Setting{1, 4096, 0, -1}, cost,
                                         options_for(cost, 1e12));
  EXPECT_FALSE(r.feasible);
  EXPECT_FALSE(r.reason.empty());
}

TEST(BaselinePlan, EppIsNotABaseline) {
  const CostModel cost = a800_cost("tiny", 2);
  try {
    plan_with_setting(Method::kEpp, {100, 200}, Setting{}, cost, options_for(cost, 1e12));
    FAIL() << "expected Error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("plan_epp"), std::string::npos) << e.what();
  }
}

TEST(BaselinePlan, OneWaveOfTheSettingsChunksInOneFOneB) {
  std::mt19937_64 rng(41);
  int planned = 0;
  for (int trial = 0; trial < 30; ++trial) {
    const Instance inst = random_instance(rng);
    SCOPED_TRACE(inst.description);
    const int64_t longest = longest_of(inst.lengths);
    const Method method =
        std::vector<Method>{Method::kBatch, Method::kSeq1F1B, Method::kChunkFlow}[trial % 3];
    Setting s;
    s.token_cap = longest + 512;
    s.k = 2;
    s.chunk_tokens = 2048;
    const PlanResult r = plan_at(method, inst, s);
    if (!r.feasible) continue;
    ++planned;
    const Plan& plan = r.plan;
    EXPECT_EQ(plan.method, method);
    const std::vector<Chunk> chunks = setting_chunks(method, inst.lengths, s, inst.cost);
    ASSERT_EQ(plan.chunks.size(), chunks.size());
    for (size_t c = 0; c < chunks.size(); ++c) EXPECT_EQ(plan.chunks[c].slices, chunks[c].slices);
    ASSERT_EQ(plan.waves.size(), 1u);
    EXPECT_EQ(plan.waves[0], every_chunk(chunks.size()));
    EXPECT_EQ(plan.schedule.text(), one_wave_schedule(chunks, inst.options.num_stages).text());
    // The smallest uniform count is found and recorded in the setting.
    int most = 0;
    for (const auto& stage : plan.recompute)
      for (int layers : stage) most = std::max(most, layers);
    EXPECT_EQ(plan.setting.uniform_recompute, most);
    Setting rest = plan.setting;
    rest.uniform_recompute = s.uniform_recompute;
    EXPECT_EQ(rest, s) << "only the recompute count is filled in";
    EXPECT_NO_THROW(plan.validate());
  }
  EXPECT_GE(planned, 15);
}

TEST(BaselinePlan, FixedCountIsCappedAtEachStagesLayersAndNamedFixed) {
  const CostModel cost = a800_cost("tiny", 2);
  Setting s;
  s.token_cap = 4096;
  s.uniform_recompute = 1000;
  const PlanResult r =
      plan_with_setting(Method::kBatch, {100, 3000, 700}, s, cost, options_for(cost, 1e12));
  ASSERT_TRUE(r.feasible) << r.reason;
  EXPECT_EQ(r.plan.checkpoint_solver, "fixed");
  EXPECT_EQ(r.plan.setting.uniform_recompute, 1000);
  ASSERT_EQ(r.plan.recompute.size(), 2u);
  for (int p = 0; p < 2; ++p)
    EXPECT_EQ(r.plan.recompute[p], std::vector<int>(r.plan.chunks.size(), cost.layers(p)));
  EXPECT_GT(r.plan.recompute_s, 0);
}

TEST(BaselinePlan, FixedCountOverTheBudgetIsInfeasibleWithTheSimulatorsMessage) {
  const CostModel cost = a800_cost("llama-13b", 4);
  const double state = largest_model_state(cost);
  const PlannerOptions options = options_for(cost, state + 1024.0 * 1024 * 1024);
  Setting s;
  s.token_cap = 16384;
  s.uniform_recompute = 0;
  const std::vector<int64_t> lengths = {16384, 9000, 7000};
  const PlanResult r = plan_with_setting(Method::kBatch, lengths, s, cost, options);
  ASSERT_FALSE(r.feasible);
  const std::string prefix = "batch " + describe(Method::kBatch, s) + ": ";
  EXPECT_EQ(r.reason.rfind(prefix, 0), 0u) << r.reason;
  // The simulator's own message about the same schedule.
  const std::vector<Chunk> chunks = batch_chunks(lengths, s.token_cap);
  const SimResult sim =
      simulate_quietly(one_wave_schedule(chunks, 4), chunks, cost, {}, options.memory_budget_bytes);
  ASSERT_TRUE(sim.over_budget);
  EXPECT_EQ(r.reason, prefix + sim.over_budget_message);
}

TEST(BaselinePlan, ASettingThatCannotChunkTheStepNamesTheSetting) {
  const CostModel cost = a800_cost("tiny", 2);
  Setting s;
  s.token_cap = 4096;
  const PlanResult r =
      plan_with_setting(Method::kSeq1F1B, {100, 5000}, s, cost, options_for(cost, 1e12));
  ASSERT_FALSE(r.feasible);
  EXPECT_EQ(r.reason.rfind("seq1f1b " + describe(Method::kSeq1F1B, s) + ": ", 0), 0u) << r.reason;
  EXPECT_NE(r.reason.find("sequence 1"), std::string::npos) << r.reason;
  const PlanResult flow =
      plan_with_setting(Method::kChunkFlow, {100, 5000}, Setting{}, cost, options_for(cost, 1e12));
  ASSERT_FALSE(flow.feasible);
  EXPECT_NE(flow.reason.find("chunk size 0"), std::string::npos) << flow.reason;
}

}  // namespace
}  // namespace infinipipe
