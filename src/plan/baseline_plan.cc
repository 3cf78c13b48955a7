// A baseline at one setting (planner.h: plan_with_setting): its chunking, one wave, 1F1B,
// uniform recompute.
#include <algorithm>

#include "infinipipe/checkpoint/checkpoint_planner.h"
#include "infinipipe/core/error.h"
#include "infinipipe/plan/planner.h"
#include "infinipipe/schedule/scheduler.h"
#include "planner_support.h"
#include "spread_plan.h"

namespace infinipipe {

using namespace planning;

PlanResult plan_with_setting(Method method, const std::vector<int64_t>& lengths,
                             const Setting& setting, const CostModel& cost,
                             const PlannerOptions& options) {
  PlanningCall call;
  call.report.candidates = call.report.tried = 1;  // the one setting
  check_inputs(lengths, cost, options);
  check(method != Method::kEpp, "plan_with_setting is for the baselines; plan EPP with plan_epp");

  std::vector<Chunk> chunks;
  try {
    chunks = setting_chunks(method, lengths, setting, cost);
  } catch (const Error& e) {
    return infeasible(std::string(to_string(method)) + " " + describe(method, setting) + ": " +
                      e.what());
  }
  std::vector<Wave> waves(1);
  for (int c = 0; c < static_cast<int>(chunks.size()); ++c) waves[0].push_back(c);
  ScheduleOptions schedule_options;
  schedule_options.num_stages = options.num_stages;
  Schedule schedule = build_schedule(chunks, waves, schedule_options);

  Setting chosen = setting;
  Recompute recompute;
  std::string solver;
  if (setting.uniform_recompute >= 0) {
    recompute.assign(cost.num_stages(), std::vector<int>(chunks.size(), 0));
    for (int p = 0; p < cost.num_stages(); ++p)
      std::fill(recompute[p].begin(), recompute[p].end(),
                std::min(setting.uniform_recompute, cost.layers(p)));
    solver = "fixed";
  } else {
    CheckpointOptions uniform;
    uniform.method = CheckpointMethod::kUniform;
    uniform.memory_budget_bytes = options.memory_budget_bytes;
    CheckpointResult ck = plan_checkpointing(schedule, chunks, cost, uniform);
    if (!ck.feasible)
      return infeasible(std::string(to_string(method)) + " " + describe(method, setting) + ": " +
                        ck.reason);
    recompute = std::move(ck.recompute);
    chosen.uniform_recompute = 0;
    for (const auto& stage : recompute)
      for (int layers : stage)
        chosen.uniform_recompute = std::max(chosen.uniform_recompute, layers);
    solver = ck.solver;
  }
  const SimResult sim = predict(schedule, chunks, cost, recompute, options.memory_budget_bytes);
  if (setting.uniform_recompute >= 0 && sim.over_budget)
    return infeasible(std::string(to_string(method)) + " " + describe(method, setting) + ": " +
                      sim.over_budget_message);

  PlanResult result;
  result.feasible = true;
  result.plan = make_plan(method, chosen, lengths, std::move(chunks), std::move(waves),
                          std::move(schedule), std::move(recompute), cost, sim, solver);
  // A fixed recompute stays fixed; a chosen one is chosen again the same way.
  spread_heads_if_faster(result.plan, cost, options,
                         setting.uniform_recompute >= 0
                             ? std::vector<CheckpointMethod>{}
                             : std::vector<CheckpointMethod>{CheckpointMethod::kUniform});
  call.finish(result.plan, cost);
  return result;
}

}  // namespace infinipipe
