// Zero bubble on a finished plan (zero_bubble_plan.h).
#include "zero_bubble_plan.h"

#include <algorithm>

#include "infinipipe/core/error.h"
#include "planner_support.h"
#include "recompute_choice.h"

namespace infinipipe::planning {

ZeroBubbleChoice zero_bubble_choice(const PlannerOptions& options) {
  if (options.zero_bubble == "off") return ZeroBubbleChoice::kOff;
  if (options.zero_bubble == "try") return ZeroBubbleChoice::kTry;
  if (options.zero_bubble == "h1") return ZeroBubbleChoice::kAlways;
  throw Error("planner option zero_bubble is \"" + options.zero_bubble +
              "\": expected \"try\" (EPP keeps it where faster), \"h1\" (every method) or "
              "\"off\"");
}

bool split_backwards(Plan& plan, const CostModel& cost, const PlannerOptions& options,
                     const std::vector<RecomputeMethod>& methods, bool always,
                     std::string& reason) {
  if (plan.setting.zero_bubble != ZeroBubble::kOff) return true;
  const Schedule schedule = with_weight_actions(plan.schedule, ZeroBubble::kH1);
  Recompute recompute = plan.recompute;
  std::string solver = plan.checkpoint_solver;
  SimResult sim = predict(schedule, plan.chunks, cost, recompute, options.memory_budget_bytes);
  if (sim.over_budget) {
    if (methods.empty()) {
      reason = "zero bubble: " + sim.over_budget_message;
      return false;
    }
    RecomputeResult checkpoint;
    if (!best_recompute(schedule, plan.chunks, methods, cost, options, checkpoint, sim, reason)) {
      reason = "zero bubble: " + reason;
      return false;
    }
    recompute = std::move(checkpoint.recompute);
    solver = checkpoint.solver;
  }
  if (!always && sim.step_time_s >= plan.step_time_s) return true;
  plan.schedule = schedule;
  plan.recompute = std::move(recompute);
  plan.checkpoint_solver = solver;
  plan.setting.zero_bubble = ZeroBubble::kH1;
  plan.set_prediction(sim);
  // A baseline's uniform recompute, solved again, is its setting's count.
  if (std::find(methods.begin(), methods.end(), RecomputeMethod::kUniform) != methods.end()) {
    int most = 0;
    for (const auto& stage : plan.recompute)
      for (int layers : stage) most = std::max(most, layers);
    plan.setting.uniform_recompute = most;
  }
  return true;
}

}  // namespace infinipipe::planning
