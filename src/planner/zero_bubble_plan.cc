// Zero bubble on a finished plan (zero_bubble_plan.h).
#include "zero_bubble_plan.h"

#include <algorithm>

#include "infinipipe/core/error.h"
#include "infinipipe/planner/head_spread.h"
#include "planner_support.h"
#include "recompute_choice.h"

namespace infinipipe::planning {

ZeroBubbleChoice zero_bubble_choice(const PlannerOptions& options) {
  if (options.zero_bubble == "off") return ZeroBubbleChoice::kOff;
  if (options.zero_bubble == "try") return ZeroBubbleChoice::kTry;
  if (options.zero_bubble == "h1" || options.zero_bubble == "h2") return ZeroBubbleChoice::kAlways;
  throw Error("planner option zero_bubble is \"" + options.zero_bubble +
              "\": expected \"try\" (EPP keeps ZB-H1 or ZB-H2 where faster), \"h1\" or \"h2\" "
              "(every method) or \"off\"");
}

namespace {

// The plan's chunks, waves and heads with `mode`'s W actions: ZB-H1's on its schedule as it is,
// ZB-H2's on the schedule built again with the longer warm-up (the planner's schedules are 1F1B
// in the scheduler's chain order, as spread_plan.cc rebuilds them too).
Schedule with_mode(const Plan& plan, ZeroBubble mode, int extra_warmup, const CostModel& cost,
                   int stages) {
  if (mode == ZeroBubble::kH1) return with_weight_actions(plan.schedule, mode);
  ScheduleOptions options;
  options.num_stages = stages;
  options.overlap_waves = waves_overlap(plan.schedule, plan.waves);
  options.zero_bubble = mode;
  options.extra_warmup = extra_warmup;
  std::vector<int> heads = plan.schedule.head_stages(static_cast<int>(plan.chunks.size()));
  if (std::all_of(heads.begin(), heads.end(), [](int o) { return o == -1; }))
    return build_schedule(plan.chunks, plan.waves, options);
  for (int& o : heads)
    if (o == -1) o = stages - 1;
  return spread_head_schedule(plan.chunks, plan.waves, options, heads, cost, plan.recompute);
}

}  // namespace

bool split_backwards(Plan& plan, const CostModel& cost, const PlannerOptions& options,
                     const std::vector<RecomputeMethod>& methods, ZeroBubble mode, bool always,
                     std::string& reason, int extra_warmup) {
  if (plan.setting.zero_bubble != ZeroBubble::kOff) return true;
  const Schedule schedule = with_mode(plan, mode, extra_warmup, cost, options.num_stages);
  Recompute recompute = plan.recompute;
  std::string solver = plan.checkpoint_solver;
  SimResult sim = predict(schedule, plan.chunks, cost, recompute, options.memory_budget_bytes);
  if (sim.over_budget) {
    if (methods.empty()) {
      reason = std::string("zero bubble ") + to_string(mode) + ": " + sim.over_budget_message;
      return false;
    }
    RecomputeResult checkpoint;
    if (!best_recompute(schedule, plan.chunks, methods, cost, options, checkpoint, sim, reason)) {
      reason = std::string("zero bubble ") + to_string(mode) + ": " + reason;
      return false;
    }
    recompute = std::move(checkpoint.recompute);
    solver = checkpoint.solver;
  }
  if (!always && sim.step_time_s >= plan.step_time_s) return true;
  plan.schedule = schedule;
  plan.recompute = std::move(recompute);
  plan.checkpoint_solver = solver;
  plan.setting.zero_bubble = mode;
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

void split_backwards_if_faster(Plan& plan, const CostModel& cost, const PlannerOptions& options,
                               const std::vector<RecomputeMethod>& methods) {
  if (plan.setting.zero_bubble != ZeroBubble::kOff) return;
  const Plan before = plan;
  std::string reason;
  split_backwards(plan, cost, options, methods, ZeroBubble::kH1, false, reason);
  const int d = options.num_stages;
  // Every count from 1 to d-1 up to 16 stages; beyond, every (d-1)/8-th (8 to 15 of them).
  for (int extra = 1; extra < d; extra += std::max(1, (d - 1) / 8)) {
    Plan h2 = before;
    split_backwards(h2, cost, options, methods, ZeroBubble::kH2, false, reason, extra);
    if (h2.step_time_s < plan.step_time_s) plan = std::move(h2);
  }
}

}  // namespace infinipipe::planning
