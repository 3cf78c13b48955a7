// properties/plan_checks.cc: a planner's plan passes every check, and each kind of breakage we
// claim to catch is caught on a plan broken on purpose (so zero violations at volume means the
// properties held, not that the checks looked away).
#include "properties/plan_checks.h"

#include <algorithm>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "infinipipe/cost/hardware.h"
#include "infinipipe/cost/model_shape.h"
#include "infinipipe/planner/planner.h"

namespace infinipipe::properties {
namespace {

constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;

struct Planned {
  CostModel cost;
  std::vector<int64_t> lengths = {6000, 700, 300, 90};
  double budget = 4 * kGiB;
  Plan plan;
};

// EPP at K=3 on 3 stages: the long sequence is split over three chunks, so the slice order and
// the K/V buffers are in play.
Planned planned() {
  Planned p;
  p.cost = CostModel::analytic(ModelShape::builtin("tiny"), Hardware::builtin("cpu"), 3);
  PlannerOptions options;
  options.num_stages = 3;
  options.memory_budget_bytes = p.budget;
  options.recompute_time_limit_s = 0;
  Setting setting;
  setting.epp_k = 3;
  const PlanResult result = plan_epp_at(p.lengths, setting, p.cost, options);
  EXPECT_TRUE(result.feasible) << result.reason;
  p.plan = result.plan;
  return p;
}

std::vector<std::string> kinds(const std::vector<Violation>& violations) {
  std::vector<std::string> out;
  for (const Violation& v : violations) out.push_back(v.kind);
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

bool has(const std::vector<Violation>& violations, const std::string& kind) {
  const auto k = kinds(violations);
  return std::find(k.begin(), k.end(), kind) != k.end();
}

// The forward positions of the long sequence's slices on a stage, in slice order.
std::vector<size_t> split_forwards(const Plan& plan, int stage) {
  std::vector<std::pair<int64_t, size_t>> found;
  const auto& actions = plan.schedule.stages[stage];
  for (size_t a = 0; a < actions.size(); ++a) {
    if (actions[a].type != ActionType::kForward) continue;
    for (const Slice& s : plan.chunks[actions[a].chunk].slices)
      if (s.seq == 0) found.push_back({s.start, a});
  }
  std::sort(found.begin(), found.end());
  std::vector<size_t> positions;
  for (const auto& f : found) positions.push_back(f.second);
  return positions;
}

TEST(PlanChecks, APlannersPlanPasses) {
  const Planned p = planned();
  ASSERT_GE(split_forwards(p.plan, 0).size(), 2u);
  const auto violations = check_plan(p.plan, p.lengths, p.cost, p.budget);
  EXPECT_TRUE(violations.empty()) << violations.front().kind << ": " << violations.front().detail;
}

TEST(PlanChecks, ATokenInNoSliceIsCoverage) {
  Planned p = planned();
  for (Chunk& c : p.plan.chunks)
    for (Slice& s : c.slices)
      if (s.seq == 2) s.end -= 1;
  const auto violations = check_plan(p.plan, p.lengths, p.cost, p.budget);
  EXPECT_TRUE(has(violations, "coverage"));
  EXPECT_TRUE(has(violations, "validate"));  // Plan::validate agrees
}

TEST(PlanChecks, TwoSlicesOfASequenceInOneChunkIsCoverage) {
  Planned p = planned();
  // Move the long sequence's last slice into the chunk of its first: every token is still
  // covered once, but the chunk attention cannot hold two slices of one sequence.
  int first = -1, last = -1;
  for (int c = 0; c < static_cast<int>(p.plan.chunks.size()); ++c)
    for (const Slice& s : p.plan.chunks[c].slices) {
      if (s.seq == 0 && s.start == 0) first = c;
      if (s.seq == 0 && s.end == s.seq_length) last = c;
    }
  ASSERT_NE(first, last);
  auto& from = p.plan.chunks[last].slices;
  const auto moved =
      std::find_if(from.begin(), from.end(), [](const Slice& s) { return s.seq == 0; });
  p.plan.chunks[first].slices.push_back(*moved);
  from.erase(moved);
  EXPECT_TRUE(has(check_plan(p.plan, p.lengths, p.cost, p.budget), "coverage"));
}

TEST(PlanChecks, SlicesForwardedOutOfOrderIsSliceOrder) {
  Planned p = planned();
  const std::vector<size_t> at = split_forwards(p.plan, 1);
  auto& actions = p.plan.schedule.stages[1];
  std::swap(actions[at[0]], actions[at[1]]);
  const auto violations = check_plan(p.plan, p.lengths, p.cost, p.budget);
  EXPECT_TRUE(has(violations, "slice order"));
  EXPECT_TRUE(has(violations, "schedule"));  // the validator agrees
}

TEST(PlanChecks, AChunkNeverBackwardedIsSliceOrder) {
  Planned p = planned();
  auto& actions = p.plan.schedule.stages[2];
  actions.erase(std::find_if(actions.begin(), actions.end(),
                             [](const Action& a) { return a.type == ActionType::kBackward; }));
  EXPECT_TRUE(has(check_plan(p.plan, p.lengths, p.cost, p.budget), "slice order"));
}

TEST(PlanChecks, APeakOverTheBudgetIsMemory) {
  const Planned p = planned();
  const double peak =
      *std::max_element(p.plan.peak_memory_bytes.begin(), p.plan.peak_memory_bytes.end());
  const auto violations = check_plan(p.plan, p.lengths, p.cost, 0.99 * peak);
  EXPECT_EQ(kinds(violations), std::vector<std::string>{"memory"});
}

TEST(PlanChecks, APredictionThatIsNotTheSimulationsIsPrediction) {
  Planned p = planned();
  p.plan.step_time_s *= 0.9;
  EXPECT_EQ(kinds(check_plan(p.plan, p.lengths, p.cost, p.budget)),
            std::vector<std::string>{"prediction"});
}

TEST(PlanChecks, RecomputeBeyondAStagesLayersIsValidate) {
  Planned p = planned();
  p.plan.recompute.assign(3, std::vector<int>(p.plan.chunks.size(), 0));
  p.plan.recompute[0][0] = p.cost.layers(0) + 1;
  EXPECT_TRUE(has(check_plan(p.plan, p.lengths, p.cost, p.budget), "validate"));
}

TEST(PlanChecks, EveryKindIsListed) {
  const auto& k = violation_kinds();
  for (const char* kind : {"validate", "schedule", "coverage", "slice order", "deadlock", "memory",
                           "accounting", "prediction", "planner threw", "timed out", "crashed"})
    EXPECT_NE(std::find(k.begin(), k.end(), kind), k.end()) << kind;
}

}  // namespace
}  // namespace infinipipe::properties
