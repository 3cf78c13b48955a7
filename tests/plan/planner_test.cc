// The planner: every feasible plan is executable (validates, covers every token, fits memory as
// the simulator sees it), EPP is at least as fast as the baselines on the same step, the
// paper's longest-first golden case, and bad input errors.
#include "infinipipe/plan/planner.h"

#include <algorithm>
#include <random>

#include <gtest/gtest.h>

#include "infinipipe/core/error.h"
#include "infinipipe/plan/static_baseline.h"
#include "infinipipe/schedule/scheduler.h"
#include "infinipipe/schedule/validator.h"
#include "infinipipe/sim/simulator.h"
#include "plan/instances.h"

namespace infinipipe {
namespace {

using testing::Instance;
using testing::random_instance;

// What every rank relies on, checked independently of the planner's own bookkeeping.
void expect_executable(const Plan& plan, const Instance& inst) {
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
  const SimResult sim = simulate(plan.schedule, plan.chunks, inst.cost, plan.recompute, sim_options);
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

TEST(Planner, EveryFeasiblePlanIsExecutableAndFits) {
  std::mt19937_64 rng(20250921);
  int feasible_epp = 0, infeasible_epp = 0, with_recompute = 0, multi_wave = 0, overlapped = 0;
  for (int trial = 0; trial < 150; ++trial) {
    const Instance inst = random_instance(rng);
    SCOPED_TRACE(inst.description);
    const PlanResult epp = plan_epp(inst.lengths, inst.cost, inst.options);
    if (epp.feasible) {
      ++feasible_epp;
      expect_executable(epp.plan, inst);
      EXPECT_GE(epp.plan.setting.k, 1);
      EXPECT_LE(epp.plan.setting.k, inst.options.max_k);
      if (epp.plan.recompute_s > 0) ++with_recompute;
      if (epp.plan.waves.size() > 1) {
        ++multi_wave;
        overlapped += waves_overlap(epp.plan.schedule, epp.plan.waves);
        // The ablation switch: waves back to back only.
        PlannerOptions back_to_back = inst.options;
        back_to_back.overlap_waves = false;
        const PlanResult apart = plan_epp(inst.lengths, inst.cost, back_to_back);
        ASSERT_TRUE(apart.feasible) << apart.reason;
        expect_executable(apart.plan, inst);
        EXPECT_FALSE(waves_overlap(apart.plan.schedule, apart.plan.waves));
      }
    } else {
      ++infeasible_epp;
      EXPECT_FALSE(epp.reason.empty());
    }
    const int64_t longest = *std::max_element(inst.lengths.begin(), inst.lengths.end());
    Setting s;
    s.token_cap = 2 * longest;
    s.k = 4;
    s.chunk_tokens = 1024;
    for (Method m : {Method::kBatch, Method::kSeq1F1B, Method::kChunkFlow}) {
      const PlanResult r = plan_with_setting(m, inst.lengths, s, inst.cost, inst.options);
      if (r.feasible) expect_executable(r.plan, inst);
      else EXPECT_FALSE(r.reason.empty());
    }
  }
  // The instances must exercise the interesting cases, or the properties above prove little.
  EXPECT_GE(feasible_epp, 10);
  EXPECT_GE(infeasible_epp, 1);
  EXPECT_GE(with_recompute, 10);
  EXPECT_GE(multi_wave, 1);
  EXPECT_GE(overlapped, 1);
  std::printf("EPP: %d feasible (%d with recompute, %d with several waves, %d of them overlapped), %d infeasible\n",
              feasible_epp, with_recompute, multi_wave, overlapped, infeasible_epp);
}

TEST(Planner, UniformRecomputeIsUniformAndFixedCountIsHonoured) {
  std::mt19937_64 rng(7);
  int checked = 0;
  for (int trial = 0; trial < 20; ++trial) {
    const Instance inst = random_instance(rng);
    SCOPED_TRACE(inst.description);
    const int64_t longest = *std::max_element(inst.lengths.begin(), inst.lengths.end());
    Setting s;
    s.token_cap = longest;
    const PlanResult own = plan_with_setting(Method::kBatch, inst.lengths, s, inst.cost, inst.options);
    if (!own.feasible) continue;
    const int count = own.plan.setting.uniform_recompute;
    ASSERT_GE(count, 0);
    for (int p = 0; p < inst.cost.num_stages(); ++p)
      for (int layers : own.plan.recompute[p]) EXPECT_EQ(layers, std::min(count, inst.cost.layers(p)));
    // One fewer layer must not fit (the count is the smallest), one more costs time.
    if (count > 0) {
      s.uniform_recompute = count - 1;
      EXPECT_FALSE(plan_with_setting(Method::kBatch, inst.lengths, s, inst.cost, inst.options).feasible);
    }
    s.uniform_recompute = count + 1;
    const PlanResult more = plan_with_setting(Method::kBatch, inst.lengths, s, inst.cost, inst.options);
    ASSERT_TRUE(more.feasible) << more.reason;
    EXPECT_EQ(more.plan.setting.uniform_recompute, count + 1);
    EXPECT_GE(more.plan.step_time_s, own.plan.step_time_s);
    ++checked;
  }
  EXPECT_GE(checked, 5);
}

// The paper's Figure (penalty bubbles): a long sequence's slices scheduled after short chunks
// stall the pipeline, because its warm-up is sized for a chain of one; longest first avoids it.
TEST(Planner, LongestFirstAvoidsThePenaltyBubblesOfShortFirst) {
  const int stages = 4, k = 4, shorts = 4;
  const CostModel cost =
      CostModel::analytic(ModelShape::builtin("tiny"), Hardware::builtin("a800"), stages);
  const int64_t slice = 2048;
  std::vector<Chunk> chunks;
  for (int i = 0; i < k; ++i)  // sequence 0: one chain of k slices
    chunks.push_back(Chunk{{Slice{0, i * slice, (i + 1) * slice, k * slice}}});
  for (int j = 0; j < shorts; ++j)  // sequences 1..shorts: chains of one
    chunks.push_back(Chunk{{Slice{1 + j, 0, slice, slice}}});
  Wave short_first, longest_first;
  for (int j = 0; j < shorts; ++j) short_first.push_back(k + j);
  for (int i = 0; i < k; ++i) short_first.push_back(i);
  longest_first = short_first;  // the default order sorts it
  ScheduleOptions keep;
  keep.num_stages = stages;
  keep.keep_chain_order = true;
  ScheduleOptions sorted;
  sorted.num_stages = stages;
  const Schedule bad = build_schedule(chunks, {short_first}, keep);
  const Schedule good = build_schedule(chunks, {longest_first}, sorted);
  ASSERT_NO_THROW(validate_schedule(bad, chunks));
  ASSERT_NO_THROW(validate_schedule(good, chunks));
  ASSERT_EQ(bad.stages[0].front().chunk, k) << "short-first did not keep the given order";
  SimOptions sim_options;
  sim_options.record_events = false;
  const SimResult slow = simulate(bad, chunks, cost, {}, sim_options);
  const SimResult fast = simulate(good, chunks, cost, {}, sim_options);
  EXPECT_LT(fast.step_time_s, slow.step_time_s);
  EXPECT_LT(fast.mean_bubble_fraction(), slow.mean_bubble_fraction());
}

// EPP's K = 1 packs whole sequences under the longest sequence's tokens, as batch-level does at
// that cap, and then checkpoints per stage and chunk instead of uniformly and tries every other
// K as well: batch-level at that cap clearly beating it points at a planner bug. The 5% allows
// for the two packers placing short sequences differently (EPP's K = 1 packs under a time
// target as well as the token cap and can open one more chunk than token-only best-fit): over
// 357 random instances (seeds 1-10) EPP was slower in 22, by at most 3.0%. (Against the other
// baselines' per-step bests there is no such guarantee: Seq1F1B cuts packed short sequences and
// ChunkFlow uses equal-token chunks, plans outside EPP's search space; see docs/planning.md.)
TEST(Planner, EppKeepsUpWithBatchLevelAtTheLongestSequenceCap) {
  std::mt19937_64 rng(99);
  int compared = 0;
  for (int trial = 0; trial < 40; ++trial) {
    const Instance inst = random_instance(rng);
    SCOPED_TRACE(inst.description);
    const PlanResult epp = plan_epp(inst.lengths, inst.cost, inst.options);
    Setting s;
    s.token_cap = *std::max_element(inst.lengths.begin(), inst.lengths.end());
    const PlanResult base = plan_with_setting(Method::kBatch, inst.lengths, s, inst.cost, inst.options);
    if (!base.feasible) continue;
    ++compared;
    ASSERT_TRUE(epp.feasible) << "EPP infeasible where batch-level fits: " << epp.reason;
    EXPECT_LE(epp.plan.step_time_s, base.plan.step_time_s * 1.05)
        << "batch-level " << describe(Method::kBatch, base.plan.setting) << " takes "
        << base.plan.step_time_s << " s, EPP K=" << epp.plan.setting.k << " "
        << epp.plan.step_time_s << " s";
  }
  EXPECT_GE(compared, 20);
}

// --- bad input ---------------------------------------------------------------------------

PlannerOptions options_for(const CostModel& cost, double budget) {
  PlannerOptions o;
  o.num_stages = cost.num_stages();
  o.memory_budget_bytes = budget;
  o.max_k = 8;
  return o;
}

TEST(Planner, EmptyBatchIsAnError) {
  const CostModel cost = CostModel::analytic(ModelShape::builtin("tiny"), Hardware::builtin("a800"), 2);
  EXPECT_THROW(plan_epp({}, cost, options_for(cost, 1e12)), Error);
  EXPECT_THROW(plan_with_setting(Method::kBatch, {}, Setting{1, 1024, 0, -1}, cost, options_for(cost, 1e12)), Error);
}

TEST(Planner, NonPositiveLengthIsAnErrorNamingIt) {
  const CostModel cost = CostModel::analytic(ModelShape::builtin("tiny"), Hardware::builtin("a800"), 2);
  for (int64_t bad : {int64_t{0}, int64_t{-5}}) {
    try {
      plan_epp({100, 200, bad, 50}, cost, options_for(cost, 1e12));
      FAIL() << "expected Error for length " << bad;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("2"), std::string::npos) << e.what();
    }
  }
}

TEST(Planner, SequenceThatCannotFitIsInfeasibleWithItsNameStageAndBytes) {
  const CostModel cost = CostModel::analytic(ModelShape::builtin("llama-13b"), Hardware::builtin("a800"), 4);
  double state = 0;
  for (int p = 0; p < 4; ++p) state = std::max(state, cost.model_state_bytes(p));
  // A hair above the model state: not even one long sequence fully checkpointed fits.
  const PlannerOptions options = options_for(cost, state + 64.0 * 1024 * 1024);
  const PlanResult r = plan_epp({1000, 65536, 2000}, cost, options);
  ASSERT_FALSE(r.feasible);
  EXPECT_NE(r.reason.find("sequence"), std::string::npos) << r.reason;
  EXPECT_NE(r.reason.find("stage"), std::string::npos) << r.reason;
  EXPECT_NE(r.reason.find_first_of("0123456789"), std::string::npos) << r.reason;
  // Where the K/V buffers fit but no slicing's activations do, the reason says that the whole
  // search failed, not only the setting tried last.
  const PlanResult search = plan_epp({1000, 65536, 2000}, cost,
                                     options_for(cost, state + 25.2 * 1024 * 1024 * 1024));
  ASSERT_FALSE(search.feasible);
  EXPECT_EQ(search.reason.rfind("no EPP setting", 0), 0u) << search.reason;
  const PlanResult base = plan_with_setting(Method::kBatch, {1000, 65536, 2000},
                                            Setting{1, 65536, 0, -1}, cost, options);
  ASSERT_FALSE(base.feasible);
  EXPECT_NE(base.reason.find("stage"), std::string::npos) << base.reason;
}

TEST(Planner, SequenceWhoseKVBuffersCannotFitFailsAtOnceNamingIt) {
  // 2M tokens on 8 stages of llama-13b: K/V buffers and their gradients alone exceed 80 GiB, so
  // no slicing helps; the planner must say so rather than sweep (which grows with the length).
  const CostModel cost = CostModel::analytic(ModelShape::builtin("llama-13b"), Hardware::builtin("a800"), 8);
  const PlannerOptions options = options_for(cost, 80.0 * 1024 * 1024 * 1024);
  const PlanResult r = plan_epp({3000, 2000000, 500}, cost, options);
  ASSERT_FALSE(r.feasible);
  EXPECT_NE(r.reason.find("sequence 1 (2000000 tokens)"), std::string::npos) << r.reason;
  EXPECT_NE(r.reason.find("K/V buffers"), std::string::npos) << r.reason;
  EXPECT_NE(r.reason.find("80.00 GiB"), std::string::npos) << r.reason;
}

TEST(Planner, SequenceLongerThanTheCapMakesTheBaselineInfeasible) {
  const CostModel cost = CostModel::analytic(ModelShape::builtin("tiny"), Hardware::builtin("a800"), 2);
  const PlanResult r = plan_with_setting(Method::kBatch, {100, 5000}, Setting{1, 4096, 0, -1},
                                         cost, options_for(cost, 1e12));
  EXPECT_FALSE(r.feasible);
  EXPECT_FALSE(r.reason.empty());
}

TEST(Planner, FewerLayersThanStagesIsAnError) {
  EXPECT_THROW(CostModel::analytic(ModelShape::builtin("tiny"), Hardware::builtin("a800"), 9), Error);
  const CostModel cost = CostModel::analytic(ModelShape::builtin("tiny"), Hardware::builtin("a800"), 2);
  PlannerOptions options = options_for(cost, 1e12);
  options.num_stages = 9;
  EXPECT_THROW(plan_epp({100}, cost, options), Error);
}

}  // namespace
}  // namespace infinipipe
