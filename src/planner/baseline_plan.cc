// A baseline at one setting (planner.h: plan_with_setting): its chunking, one wave, 1F1B,
// uniform recompute.
#include <algorithm>

#include "infinipipe/core/error.h"
#include "infinipipe/planner/planner.h"
#include "infinipipe/recompute/recompute_planner.h"
#include "infinipipe/schedule/scheduler.h"
#include "planner_support.h"
#include "spread_plan.h"
#include "zero_bubble_plan.h"

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

  // A fixed recompute stays fixed; a chosen one is chosen again the same way when spread (or
  // split into B and W).
  const std::vector<RecomputeMethod> spread_methods =
      setting.uniform_recompute >= 0 ? std::vector<RecomputeMethod>{}
                                     : std::vector<RecomputeMethod>{RecomputeMethod::kUniform};
  // A baseline is zero-bubble only when forced (PlannerOptions::zero_bubble "h1" or "h2":
  // ablations).
  auto finish = [&](Plan plan) {
    std::string reason;
    if (zero_bubble_choice(options) == ZeroBubbleChoice::kAlways &&
        !split_backwards(plan, cost, options, spread_methods,
                         parse_zero_bubble(options.zero_bubble), true, reason))
      return infeasible(std::string(to_string(method)) + " " + describe(method, plan.setting) +
                        ": " + reason);
    PlanResult result;
    result.feasible = true;
    result.plan = std::move(plan);
    call.finish(result.plan, cost);
    return result;
  };
  // With the spread head, a setting that does not fit with the head on the last stage may fit
  // with it spread (the last stage then keeps no logits): `unspread` (its recompute, if fixed)
  // gets no prediction, so any spread plan that fits replaces it.
  auto spread_or_infeasible = [&](const std::string& why, Recompute fixed) {
    const std::string reason =
        std::string(to_string(method)) + " " + describe(method, setting) + ": " + why;
    if (!options.spread_head) return infeasible(reason);
    SimResult unknown;
    unknown.step_time_s = kInfinity;
    Plan unspread = make_plan(method, setting, lengths, chunks, waves, schedule, std::move(fixed),
                              cost, unknown, setting.uniform_recompute >= 0 ? "fixed" : "");
    spread_heads_if_faster(unspread, cost, options, spread_methods);
    if (unspread.step_time_s == kInfinity) return infeasible(reason + "; nor with the spread head");
    return finish(std::move(unspread));
  };

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
    RecomputeOptions uniform;
    uniform.method = RecomputeMethod::kUniform;
    uniform.memory_budget_bytes = options.memory_budget_bytes;
    RecomputeResult ck = plan_recompute(schedule, chunks, cost, uniform);
    if (!ck.feasible) return spread_or_infeasible(ck.reason, {});
    recompute = std::move(ck.recompute);
    chosen.uniform_recompute = 0;
    for (const auto& stage : recompute)
      for (int layers : stage)
        chosen.uniform_recompute = std::max(chosen.uniform_recompute, layers);
    solver = ck.solver;
  }
  const SimResult sim = predict(schedule, chunks, cost, recompute, options.memory_budget_bytes);
  if (setting.uniform_recompute >= 0 && sim.over_budget)
    return spread_or_infeasible(sim.over_budget_message, std::move(recompute));

  Plan plan = make_plan(method, chosen, lengths, std::move(chunks), std::move(waves),
                        std::move(schedule), std::move(recompute), cost, sim, solver);
  spread_heads_if_faster(plan, cost, options, spread_methods);
  return finish(std::move(plan));
}

}  // namespace infinipipe
