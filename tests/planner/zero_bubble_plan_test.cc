// zero_bubble_plan.cc: PlannerOptions::zero_bubble. "try" gives EPP's plan W actions only where
// the simulator finds that faster within the budget, "h1" gives every method's plan them, "off"
// none; the plans stay valid and within memory.
#include "zero_bubble_plan.h"

#include <gtest/gtest.h>

#include <random>

#include "infinipipe/core/error.h"
#include "infinipipe/planner/planner.h"
#include "planner/instances.h"

namespace infinipipe {
namespace {

using test_support::a800_cost;

int weight_actions(const Plan& plan) {
  int count = 0;
  for (const std::vector<Action>& list : plan.schedule.stages)
    for (const Action& a : list) count += a.type == ActionType::kWeight;
  return count;
}

PlannerOptions options_for(int stages, const std::string& zero_bubble, double gib = 80) {
  PlannerOptions options;
  options.num_stages = stages;
  options.memory_budget_bytes = gib * (1 << 30);
  options.recompute_time_limit_s = 0;  // greedy only: the same plan every time
  options.zero_bubble = zero_bubble;
  return options;
}

// A stage's forwards before its first backward.
int warmup_of(const Plan& plan, int stage) {
  int forwards = 0;
  for (const Action& a : plan.schedule.stages[stage]) {
    if (a.type == ActionType::kBackward) break;
    forwards += a.type == ActionType::kForward;
  }
  return forwards;
}

int first_stage_warmup(const Plan& plan) { return warmup_of(plan, 0); }

TEST(ZeroBubblePlan, TryKeepsItOnlyWhereFasterAndOffNever) {
  std::mt19937_64 rng(11);
  int kept = 0, h2 = 0;
  for (int trial = 0; trial < 8; ++trial) {
    const int stages = 2 + trial % 3 * 2;
    const CostModel cost = a800_cost("llama-7b", stages);
    const std::vector<int64_t> lengths = test_support::random_lengths(rng, 24, 32768);
    const Plan off = plan_step(Method::kEpp, lengths, cost, options_for(stages, "off"));
    const Plan tried = plan_step(Method::kEpp, lengths, cost, options_for(stages, "try"));
    EXPECT_EQ(weight_actions(off), 0);
    EXPECT_EQ(off.setting.zero_bubble, ZeroBubble::kOff);
    tried.validate();
    if (tried.setting.zero_bubble == ZeroBubble::kOff) {
      // Not faster: the plan is the one without, bit for bit.
      EXPECT_EQ(tried.hash(), off.hash());
      continue;
    }
    ++kept;
    // ZB-H2: some stage runs more forwards before its first backward than 1F1B on the same
    // chunks (the plan may be a runner-up's chunking, not `off`'s; where 1F1B's warm-up already
    // holds all of a stage's forwards, there is no more to run).
    if (tried.setting.zero_bubble == ZeroBubble::kH2) {
      ++h2;
      ScheduleOptions one_f_one_b;
      one_f_one_b.num_stages = stages;
      one_f_one_b.overlap_waves = waves_overlap(tried.schedule, tried.waves);
      Plan plain = tried;
      plain.schedule = build_schedule(tried.chunks, tried.waves, one_f_one_b);
      bool longer = false;
      for (int p = 0; p < stages; ++p) {
        EXPECT_GE(warmup_of(tried, p), warmup_of(plain, p));
        longer = longer || warmup_of(tried, p) > warmup_of(plain, p);
      }
      EXPECT_TRUE(longer) << tried.schedule.text();
    }
    // Every stage's chunks but the first stage's (which keeps its backwards whole).
    EXPECT_EQ(weight_actions(tried), (stages - 1) * static_cast<int>(tried.chunks.size()));
    EXPECT_LT(tried.step_time_s, off.step_time_s);
    for (double peak : tried.peak_memory_bytes) EXPECT_LE(peak, 80.0 * (1 << 30));
  }
  EXPECT_GT(kept, 0) << "no instance found zero bubble faster: the test shows nothing";
  EXPECT_GT(h2, 0) << "no instance kept ZB-H2: its search shows nothing";
}

TEST(ZeroBubblePlan, H1OrH2GivesEveryMethodWeightActions) {
  const int stages = 4;
  const CostModel cost = a800_cost("llama-7b", stages);
  const std::vector<int64_t> lengths = {8192, 4096, 4096, 2048, 2048, 1024, 1024, 512};
  for (const std::string mode : {"h1", "h2"})
    for (Method method : all_methods()) {
      Setting setting;
      setting.k = 4;
      setting.chunk_tokens = 2048;
      // A budget where every method fits with what its W actions hold.
      const Plan plan = plan_step(method, lengths, cost, options_for(stages, mode, 160), setting);
      plan.validate();
      EXPECT_EQ(plan.setting.zero_bubble, parse_zero_bubble(mode)) << to_string(method);
      EXPECT_EQ(weight_actions(plan), (stages - 1) * static_cast<int>(plan.chunks.size()))
          << to_string(method);
      EXPECT_NE(describe(method, plan.setting).find("zero-bubble=" + mode), std::string::npos);
      if (mode == "h2") {
        // h2_extra_warmup(4) = 2 forwards more on stage 0 than ZB-H1's, where the chunks allow.
        const Plan h1 = plan_step(method, lengths, cost, options_for(stages, "h1", 160), setting);
        EXPECT_EQ(first_stage_warmup(plan),
                  std::min(first_stage_warmup(h1) + 2, static_cast<int>(plan.chunks.size())))
            << to_string(method);
      }
    }
}

TEST(ZeroBubblePlan, HoldingWhatWNeedsCostsMemoryThePlannerSees) {
  // Chunks held from B to W keep all their layers' tensors: as the budget shrinks, forcing ZB-H1
  // comes to need more recompute than EPP without it, or fits nothing, and within the budget.
  const int stages = 4;
  const CostModel cost = a800_cost("llama-7b", stages);
  const std::vector<int64_t> lengths = {65536, 32768, 16384, 8192, 4096, 2048};
  int pressed = 0, planned = 0;
  for (double gib = 80; gib >= 30; gib -= 5) {
    const PlanResult off = plan_epp(lengths, cost, options_for(stages, "off", gib));
    if (!off.feasible) continue;
    ++planned;
    const PlanResult forced = plan_epp(lengths, cost, options_for(stages, "h1", gib));
    if (!forced.feasible) {
      EXPECT_NE(forced.reason.find("zero bubble"), std::string::npos) << forced.reason;
      EXPECT_NE(forced.reason.find("whose W is still to run"), std::string::npos) << forced.reason;
      ++pressed;
      continue;
    }
    for (double peak : forced.plan.peak_memory_bytes) EXPECT_LE(peak, gib * (1 << 30));
    if (forced.plan.recompute_s > off.plan.recompute_s) ++pressed;
  }
  EXPECT_GT(planned, 2);
  EXPECT_GT(pressed, 0) << "no budget made zero bubble's memory matter: the test shows nothing";
}

TEST(ZeroBubblePlan, OffByDefaultSinceTheExecutorDoesNotRunW) {
  EXPECT_EQ(PlannerOptions{}.zero_bubble, "off");
  EXPECT_EQ(PlannerOptions::for_training(2, 1e9).zero_bubble, "off");
}

TEST(ZeroBubblePlan, AnUnknownModeIsAnErrorNamingTheValidOnes) {
  const CostModel cost = a800_cost("tiny", 2);
  try {
    plan_step(Method::kEpp, {1024, 512}, cost, options_for(2, "zb-h2"));
    FAIL() << "an unknown mode was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("\"try\""), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("\"h1\""), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace infinipipe
