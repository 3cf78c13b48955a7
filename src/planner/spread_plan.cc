// Spread heads on a finished plan when the simulator finds that faster (spread_plan.h).
#include "spread_plan.h"

#include <algorithm>

#include "infinipipe/core/error.h"
#include "infinipipe/core/log.h"
#include "infinipipe/planner/head_spread.h"
#include "infinipipe/schedule/validator.h"
#include "planner_support.h"
#include "recompute_choice.h"

namespace infinipipe::planning {

namespace {

struct Spread {
  Schedule schedule;
  RecomputeResult checkpoint;
  SimResult sim;
};

// The plan's chunks and waves with `heads`, and recompute that fits; false when none does.
bool spread_with(const Plan& plan, const std::vector<int>& heads, const CostModel& cost,
                 const PlannerOptions& options, const std::vector<RecomputeMethod>& methods,
                 Spread& out) {
  ScheduleOptions schedule_options;
  schedule_options.num_stages = options.num_stages;
  // The planner's schedules are 1F1B in its chain order; overlapped waves are what it chose.
  schedule_options.overlap_waves = waves_overlap(plan.schedule, plan.waves);
  out.schedule =
      spread_head_schedule(plan.chunks, plan.waves, schedule_options, heads, cost, plan.recompute);
  // Never seen to fail (head_spread_test's random steps), but a plan is never lost to it: the
  // unspread plan stays.
  try {
    validate_schedule(out.schedule, plan.chunks);
  } catch (const Error& e) {
    log::warn(std::string("spread head: schedule refused, plan kept unspread: ") + e.what());
    return false;
  }
  out.sim = predict(out.schedule, plan.chunks, cost, plan.recompute, options.memory_budget_bytes);
  const bool kept_fits = !out.sim.over_budget;
  if (kept_fits) {
    out.checkpoint.recompute = plan.recompute;
    out.checkpoint.solver = plan.checkpoint_solver;
  }
  // The recompute programs again on the spread schedule, kept when faster: the last stage keeps
  // no logits there, so less may fit (LLaMA-13B, 8 stages, wikipedia batch 512 at 96K, 16 steps:
  // EPP's mean 39.487 -> 39.390 s, two steps faster).
  if (methods.empty()) return kept_fits;
  std::string reason;
  Spread solved;
  if (!best_recompute(out.schedule, plan.chunks, methods, cost, options, solved.checkpoint,
                      solved.sim, reason))
    return kept_fits;
  if (kept_fits && solved.sim.step_time_s >= out.sim.step_time_s) return true;
  out.checkpoint = std::move(solved.checkpoint);
  out.sim = std::move(solved.sim);
  return true;
}

}  // namespace

void spread_heads_if_faster(Plan& plan, const CostModel& cost, const PlannerOptions& options,
                            const std::vector<RecomputeMethod>& methods) {
  if (!options.spread_head || options.num_stages < 2) return;
  bool found = false;
  Spread best;
  // Heads on every stage, and not on stage 0 (measured at LLaMA-13B, 8 stages, wikipedia batch
  // 512 at 96K, 10 steps: also trying heads only from stage 2 or 4 on changed the mean step by
  // under 0.1%).
  for (int first : {0, 1}) {
    HeadAssignmentOptions assignment;
    assignment.first_stage = first;
    const std::vector<int> heads =
        assign_head_stages(plan.chunks, forward_order(plan.schedule), cost, assignment);
    const int last = options.num_stages - 1;
    if (std::all_of(heads.begin(), heads.end(), [&](int o) { return o == last; })) continue;
    check_not_cancelled(options);
    Spread spread;
    if (!spread_with(plan, heads, cost, options, methods, spread)) continue;
    if (found && spread.sim.step_time_s >= best.sim.step_time_s) continue;
    best = std::move(spread);
    found = true;
  }
  if (!found || best.sim.step_time_s >= plan.step_time_s) return;
  plan.schedule = std::move(best.schedule);
  plan.recompute = std::move(best.checkpoint.recompute);
  plan.checkpoint_solver = best.checkpoint.solver;
  plan.set_prediction(best.sim);
  // A baseline's uniform recompute, solved again, is its setting's count.
  if (std::find(methods.begin(), methods.end(), RecomputeMethod::kUniform) != methods.end()) {
    int most = 0;
    for (const auto& stage : plan.recompute)
      for (int layers : stage) most = std::max(most, layers);
    plan.setting.uniform_recompute = most;
  }
}

}  // namespace infinipipe::planning
