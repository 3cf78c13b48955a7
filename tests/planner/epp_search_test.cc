// epp_search.cc: EPP's per-step search (plan_epp) and EPP at one setting (plan_epp_at). Every
// feasible plan is executable and fits; the search never loses to a setting it could have taken
// that fits as it is, its own or a baseline's chunking (its bounds are sound), nor clearly to
// batch-level at the longest sequence's cap; the recompute it keeps is never slower in simulation
// than the tied or untied programs on the same schedule; bad input is an error and an infeasible
// step is explained. (EPP's chunking knobs: chunking/sequence_processor_test.cc; a plan's setting
// giving its chunks again: setting_chunks_test.cc.)
#include <algorithm>
#include <random>

#include <gtest/gtest.h>

#include "chunking/chunking_test_support.h"
#include "infinipipe/chunking/sequence_processor.h"
#include "infinipipe/core/error.h"
#include "infinipipe/planner/planner.h"
#include "infinipipe/planner/static_baseline.h"
#include "infinipipe/recompute/recompute_planner.h"
#include "infinipipe/schedule/scheduler.h"
#include "infinipipe/sim/simulator.h"
#include "planner/instances.h"
#include "planner/plan_checks.h"
#include "planner_support.h"

namespace infinipipe {
namespace {

using testing::random_lengths;

// plan_epp of `inst` with one of the search's shortcuts (planner_support.h) off, then on.
std::pair<PlanResult, PlanResult> off_then_on(bool& shortcut, const Instance& inst) {
  shortcut = false;
  PlanResult off = plan_epp(inst.lengths, inst.cost, inst.options);
  shortcut = true;
  return {std::move(off), plan_epp(inst.lengths, inst.cost, inst.options)};
}

TEST(EppSearch, NeverSlowerThanASettingThatFitsAsItIs) {
  std::mt19937_64 rng(35);
  int compared = 0, borrowed_compared = 0;
  for (int trial = 0; trial < 25; ++trial) {
    Instance inst = random_instance(rng);
    inst.options.max_k = 6;
    SCOPED_TRACE(inst.description);
    const PlanResult epp = plan_epp(inst.lengths, inst.cost, inst.options);
    const int64_t longest = longest_of(inst.lengths);
    std::vector<Setting> settings;
    for (int k = 1; k <= std::min<int64_t>(6, longest); ++k) {
      for (int64_t cap : inst.options.chunk_token_caps) {
        for (bool strict : {false, true}) {
          Setting s;
          s.epp_k = k;
          s.epp_token_cap = cap;
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
      const SimResult one =
          simulate_quietly(one_wave_schedule(chunks, inst.options.num_stages), chunks, inst.cost,
                           {}, inst.options.memory_budget_bytes);
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
    for (RecomputeMethod method : {RecomputeMethod::kStageAwareGreedy,
                                   RecomputeMethod::kUntiedGreedy, RecomputeMethod::kStageAware}) {
      RecomputeOptions o;
      o.method = method;
      o.memory_budget_bytes = inst.options.memory_budget_bytes;
      o.time_limit_s = inst.options.recompute_time_limit_s;
      const RecomputeResult ck = plan_recompute(plan.schedule, plan.chunks, inst.cost, o);
      if (!ck.feasible || (method == RecomputeMethod::kStageAware && ck.solver != "cbc")) continue;
      const SimResult sim = simulate_quietly(plan.schedule, plan.chunks, inst.cost, ck.recompute,
                                             inst.options.memory_budget_bytes);
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
  const CostModel cost = a800_cost("tiny", 2);
  PlannerOptions o = options_for(cost, 1e12);
  o.chunk_token_caps = {0, -1024};
  EXPECT_THROW(plan_epp({100, 2000}, cost, o), Error);
}

TEST(EppSearch, EveryFeasiblePlanIsExecutableAndFits) {
  std::mt19937_64 rng(20250921);
  int feasible_epp = 0, infeasible_epp = 0, with_recompute = 0, multi_wave = 0, overlapped = 0;
  for (int trial = 0; trial < 150; ++trial) {
    const Instance inst = random_instance(rng);
    SCOPED_TRACE(inst.description);
    const PlanResult epp = plan_epp(inst.lengths, inst.cost, inst.options);
    if (epp.feasible) {
      ++feasible_epp;
      expect_executable(epp.plan, inst);
      EXPECT_GE(epp.plan.setting.epp_k, 1);
      EXPECT_LE(epp.plan.setting.epp_k, inst.options.max_k);
      EXPECT_LE(epp.plan.setting.k, inst.options.max_k);  // Seq1F1B's, when its chunks won
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
  }
  // The instances must exercise the interesting cases, or the properties above prove little.
  EXPECT_GE(feasible_epp, 10);
  EXPECT_GE(infeasible_epp, 1);
  EXPECT_GE(with_recompute, 10);
  EXPECT_GE(multi_wave, 1);
  EXPECT_GE(overlapped, 1);
  std::printf(
      "EPP: %d feasible (%d with recompute, %d with several waves, %d of them overlapped), %d "
      "infeasible\n",
      feasible_epp, with_recompute, multi_wave, overlapped, infeasible_epp);
}

// EPP's K = 1 packs whole sequences under the longest sequence's tokens, as batch-level does at
// that cap, and then checkpoints per stage and chunk instead of uniformly and tries every other
// K as well: batch-level at that cap clearly beating it points at a planner bug. The 5% allows
// for the two packers placing short sequences differently (EPP's K = 1 packs under a time
// target as well as the token cap and can open one more chunk than token-only best-fit): over
// 357 random instances (seeds 1-10) EPP was slower in 22, by at most 3.0%. (Against the other
// baselines' per-step bests there is no such guarantee: Seq1F1B cuts packed short sequences and
// ChunkFlow uses equal-token chunks, plans outside EPP's search space; see docs/planning.md.)
TEST(EppSearch, EppKeepsUpWithBatchLevelAtTheLongestSequenceCap) {
  std::mt19937_64 rng(99);
  int compared = 0;
  for (int trial = 0; trial < 40; ++trial) {
    const Instance inst = random_instance(rng);
    SCOPED_TRACE(inst.description);
    const PlanResult epp = plan_epp(inst.lengths, inst.cost, inst.options);
    const PlanResult base = plan_at(Method::kBatch, inst, capped_at_longest(inst.lengths));
    if (!base.feasible) continue;
    ++compared;
    ASSERT_TRUE(epp.feasible) << "EPP infeasible where batch-level fits: " << epp.reason;
    EXPECT_LE(epp.plan.step_time_s, base.plan.step_time_s * 1.05)
        << "batch-level " << describe(Method::kBatch, base.plan.setting) << " takes "
        << base.plan.step_time_s << " s, EPP K=" << epp.plan.setting.epp_k << " "
        << epp.plan.step_time_s << " s";
  }
  EXPECT_GE(compared, 20);
}

TEST(EppSearch, EmptyBatchIsAnError) {
  const CostModel cost = a800_cost("tiny", 2);
  EXPECT_THROW(plan_epp({}, cost, options_for(cost, 1e12)), Error);
}

TEST(EppSearch, NonPositiveLengthIsAnErrorNamingIt) {
  const CostModel cost = a800_cost("tiny", 2);
  for (int64_t bad : {int64_t{0}, int64_t{-5}}) {
    try {
      plan_epp({100, 200, bad, 50}, cost, options_for(cost, 1e12));
      FAIL() << "expected Error for length " << bad;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("2"), std::string::npos) << e.what();
    }
  }
}

TEST(EppSearch, SequenceThatCannotFitIsInfeasibleWithItsNameStageAndBytes) {
  const CostModel cost = a800_cost("llama-13b", 4);
  const double state = largest_model_state(cost);
  // A hair above the model state: not even one long sequence fully checkpointed fits.
  const PlannerOptions options = options_for(cost, state + 64.0 * 1024 * 1024);
  const PlanResult r = plan_epp({1000, 65536, 2000}, cost, options);
  ASSERT_FALSE(r.feasible);
  EXPECT_NE(r.reason.find("sequence"), std::string::npos) << r.reason;
  EXPECT_NE(r.reason.find("stage"), std::string::npos) << r.reason;
  EXPECT_NE(r.reason.find_first_of("0123456789"), std::string::npos) << r.reason;
  // Where the K/V buffers fit but no slicing's activations do, the reason says that the whole
  // search failed, not only the setting tried last.
  const PlanResult search =
      plan_epp({1000, 65536, 2000}, cost, options_for(cost, state + 25.2 * 1024 * 1024 * 1024));
  ASSERT_FALSE(search.feasible);
  EXPECT_EQ(search.reason.rfind("no EPP setting", 0), 0u) << search.reason;
}

TEST(EppSearch, SequenceWhoseKVBuffersCannotFitFailsAtOnceNamingIt) {
  // 2M tokens on 8 stages of llama-13b: K/V buffers and their gradients alone exceed 80 GiB, so
  // no slicing helps; the planner must say so rather than sweep (which grows with the length).
  const CostModel cost = a800_cost("llama-13b", 8);
  const PlannerOptions options = options_for(cost, 80.0 * 1024 * 1024 * 1024);
  const PlanResult r = plan_epp({3000, 2000000, 500}, cost, options);
  ASSERT_FALSE(r.feasible);
  EXPECT_NE(r.reason.find("sequence 1 (2000000 tokens)"), std::string::npos) << r.reason;
  EXPECT_NE(r.reason.find("K/V buffers"), std::string::npos) << r.reason;
  EXPECT_NE(r.reason.find("80.00 GiB"), std::string::npos) << r.reason;
}

TEST(EppSearch, ASmallBudgetIsPrintedInBytesToo) {
  // "0.00 GiB against a budget of 0.00 GiB" said nothing: below 1 GiB the bytes stand beside.
  const CostModel cost = a800_cost("llama-13b", 8);
  const PlanResult r = plan_epp({3000, 2000000, 500}, cost, options_for(cost, 1234));
  ASSERT_FALSE(r.feasible);
  EXPECT_NE(r.reason.find("against a budget of 0.00 GiB (1,234 bytes)"), std::string::npos)
      << r.reason;
}

// A work limit stops the search with the best plan so far: feasible exactly when the unlimited
// search is (it goes on until one plan fits), the same plan every time (work, not time), and
// the report says when the limit stopped it.
TEST(EppSearch, WorkLimitKeepsTheBestPlanSoFarAndIsDeterministic) {
  std::mt19937_64 rng(41);
  int stopped = 0;
  for (int trial = 0; trial < 12; ++trial) {
    Instance inst = random_instance(rng);
    SCOPED_TRACE(inst.description);
    inst.options.recompute_time_limit_s = 0;  // CBC's answer depends on the machine's load
    inst.options.search_work_limit = 0;
    const PlanResult unlimited = plan_epp(inst.lengths, inst.cost, inst.options);
    inst.options.search_work_limit = 1;
    const PlanResult limited = plan_epp(inst.lengths, inst.cost, inst.options);
    ASSERT_EQ(limited.feasible, unlimited.feasible) << limited.reason;
    if (!limited.feasible) continue;
    expect_executable(limited.plan, inst);
    const PlanResult again = plan_epp(inst.lengths, inst.cost, inst.options);
    EXPECT_EQ(again.plan.hash(), limited.plan.hash());
    EXPECT_FALSE(unlimited.plan.planner.budget_exhausted);
    EXPECT_GT(limited.plan.planner.work, 0);
    EXPECT_LE(limited.plan.planner.tried, unlimited.plan.planner.tried);
    stopped += limited.plan.planner.budget_exhausted;
  }
  EXPECT_GT(stopped, 3);
}

// Candidates over the budget for sure (never_fits_as_is) are left unsimulated once their
// family's recompute searches are spent: such a simulation only confirmed the excess, and the
// candidate was then skipped. The plans are the same bit for bit, with fewer candidates tried.
// One or two recompute searches per family make the limit bind on most tight budgets; 400 steps
// because few of them have a candidate the limit leaves unsimulated that could have won (an
// unconditional skip changes a plan about once in 400).
TEST(EppSearch, SpentRecomputeSearchesSkipHopelessSimulationsWithTheSamePlans) {
  std::mt19937_64 rng(43);
  int fewer = 0;
  for (int trial = 0; trial < 400; ++trial) {
    Instance inst = random_instance(rng);
    SCOPED_TRACE(inst.description);
    inst.options.max_recompute_candidates = 1 + trial % 2;
    inst.options.recompute_time_limit_s = 0;  // CBC's answer depends on the machine's load
    const auto [simulated, skipped] = off_then_on(planning::skip_hopeless_simulations(), inst);
    ASSERT_EQ(skipped.feasible, simulated.feasible) << skipped.reason;
    if (!skipped.feasible) continue;
    EXPECT_EQ(skipped.plan.hash(), simulated.plan.hash());
    EXPECT_EQ(skipped.plan.step_time_s, simulated.plan.step_time_s);
    EXPECT_EQ(skipped.plan.planner.candidates, simulated.plan.planner.candidates);
    EXPECT_LE(skipped.plan.planner.tried, simulated.plan.planner.tried);
    EXPECT_LE(skipped.plan.planner.work, simulated.plan.planner.work);
    fewer += skipped.plan.planner.tried < simulated.plan.planner.tried;
  }
  EXPECT_GT(fewer, 2);
}

// When nothing fits without recompute, capped settings whose cap gives more chunks than recompute
// is tried on are never chunked: the same plans, the same simulations and work as with them. The
// instances make that happen (asserted below): the longest sequence alone is over the budget, and
// 128-token caps cut the step into more than kMaxRecomputeChunks (4,096) chunks. With only such
// caps and no baseline chunkings, every setting is chunked after all (no candidate is within the
// limit, which then becomes the fewest chunks any candidate has).
TEST(EppSearch, UnplannableCappedSettingsAreLeftUnchunkedWithTheSamePlans) {
  std::mt19937_64 rng(47);
  for (int trial = 0; trial < 3; ++trial) {
    Instance inst;
    inst.cost = a800_cost("tiny", 2 + trial);
    inst.lengths = random_lengths(rng, 70, 16384);
    int64_t total = 0;
    for (int64_t n : inst.lengths) total += n;
    if (total <= 4096 * 128) inst.lengths.push_back(4096 * 128 - total + 1);
    const int64_t longest = *std::max_element(inst.lengths.begin(), inst.lengths.end());
    inst.options.num_stages = inst.cost.num_stages();
    inst.options.max_k = 8;
    inst.options.recompute_time_limit_s = 0;  // CBC's answer depends on the machine's load
    // 70% of the way from the model state to the longest sequence's activations on the stage
    // where they are most: recompute is needed, and enough of it fits.
    const Chunk whole{{Slice{0, 0, longest, longest}}};
    double most = 0;
    for (int p = 0; p < inst.cost.num_stages(); ++p)
      most = std::max(most, inst.cost.activation_bytes(whole, p, 0));
    inst.options.memory_budget_bytes = largest_model_state(inst.cost) + 0.7 * most;
    bool over = false;
    for (int p = 0; p < inst.cost.num_stages(); ++p)
      over |= inst.cost.model_state_bytes(p) + inst.cost.activation_bytes(whole, p, 0) >
              inst.options.memory_budget_bytes * (1 + 1e-6);
    ASSERT_TRUE(over) << "the instance must need recompute";
    inst.options.chunk_token_caps = {0, 2048, 128};
    if (trial == 2) {
      inst.options.chunk_token_caps = {128};
      inst.options.baseline_chunkings = false;
    }
    SCOPED_TRACE("trial " + std::to_string(trial));
    const auto [chunked, skipped] = off_then_on(planning::skip_unplannable_settings(), inst);
    ASSERT_EQ(skipped.feasible, chunked.feasible) << skipped.reason;
    ASSERT_TRUE(skipped.feasible) << skipped.reason;
    EXPECT_EQ(skipped.plan.hash(), chunked.plan.hash());
    EXPECT_EQ(skipped.plan.step_time_s, chunked.plan.step_time_s);
    EXPECT_EQ(skipped.plan.planner.tried, chunked.plan.planner.tried);
    EXPECT_EQ(skipped.plan.planner.work, chunked.plan.planner.work);
  }
}

// Candidates that cannot give a plan (over the budget as they are, and over it with every layer
// recomputed in one wave and in every wave holding their longest chains) are dropped unsimulated
// and take none of their family's recompute searches, which candidates after them may then get:
// as fast plans or faster (within the 0.5%: 2,500 such steps gave at worst 0.06% slower
// and up to 24% faster), at the default limits and at tight ones.
TEST(EppSearch, UnplannableCandidatesAreDroppedWithPlansAsFast) {
  std::mt19937_64 rng(53);
  int fewer = 0, faster = 0;
  for (int trial = 0; trial < 400; ++trial) {
    Instance inst = random_instance(rng);
    SCOPED_TRACE(inst.description);
    if (trial % 2) inst.options.max_recompute_candidates = 1 + trial % 4 / 2;
    inst.options.recompute_time_limit_s = 0;  // CBC's answer depends on the machine's load
    const auto [simulated, dropped] = off_then_on(planning::drop_unplannable_candidates(), inst);
    ASSERT_EQ(dropped.feasible, simulated.feasible) << dropped.reason;
    if (!dropped.feasible) continue;
    EXPECT_LE(dropped.plan.step_time_s, simulated.plan.step_time_s * 1.005);
    faster += dropped.plan.step_time_s < simulated.plan.step_time_s;
    fewer += dropped.plan.planner.tried < simulated.plan.planner.tried;
  }
  EXPECT_GT(fewer, 20);
  EXPECT_GT(faster, 0);
}

TEST(EppSearch, FewerLayersThanStagesIsAnError) {
  EXPECT_THROW(a800_cost("tiny", 9), Error);
  const CostModel cost = a800_cost("tiny", 2);
  PlannerOptions options = options_for(cost, 1e12);
  options.num_stages = 9;
  EXPECT_THROW(plan_epp({100}, cost, options), Error);
}

TEST(EppSearch, PlanAtOneSettingIsThatSettingsPlan) {
  std::mt19937_64 rng(40);
  int planned = 0, with_recompute = 0;
  for (int trial = 0; trial < 12; ++trial) {
    const Instance inst = random_instance(rng);
    SCOPED_TRACE(inst.description);
    Setting s;
    s.epp_k = 1 + trial % 4;
    s.epp_token_cap = trial % 3 == 0 ? 1024 : 0;
    if (s.epp_k > longest_of(inst.lengths)) continue;
    const PlanResult at = plan_epp_at(inst.lengths, s, inst.cost, inst.options);
    if (!at.feasible) {
      EXPECT_FALSE(at.reason.empty());
      continue;
    }
    ++planned;
    with_recompute += at.plan.recompute_s > 0;
    expect_executable(at.plan, inst);
    EXPECT_EQ(at.plan.method, Method::kEpp);
    EXPECT_EQ(at.plan.setting, s);
    EXPECT_EQ(
        testing_support::slice_counts(at.plan.chunks),
        testing_support::slice_counts(setting_chunks(Method::kEpp, inst.lengths, s, inst.cost)));
  }
  EXPECT_GE(planned, 6);
  EXPECT_GE(with_recompute, 1);
  // A setting that cannot chunk the step is infeasible, naming the setting.
  const Instance inst = random_instance(rng);
  Setting borrowed;
  borrowed.chunker = Method::kBatch;
  borrowed.token_cap = 4096;
  const PlanResult none = plan_epp_at({100, 5000}, borrowed, inst.cost, inst.options);
  ASSERT_FALSE(none.feasible);
  EXPECT_EQ(none.reason.rfind(describe(Method::kEpp, borrowed) + ": ", 0), 0u) << none.reason;
}

}  // namespace
}  // namespace infinipipe
