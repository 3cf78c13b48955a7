// The planner's entry point (planner.h): one dispatch for the trainer, the bindings and the
// C++ example.
#include "infinipipe/planner/planner.h"

#include <algorithm>

#include "infinipipe/core/error.h"
#include "infinipipe/core/log.h"

namespace infinipipe {

PlannerOptions PlannerOptions::for_training(int num_stages, double memory_budget_bytes) {
  PlannerOptions options;
  options.num_stages = num_stages;
  options.memory_budget_bytes = memory_budget_bytes;
  options.max_k = 32;
  options.recompute_time_limit_s = 0;
  // As the default, stated so that a change of the default does not change training unseen.
  options.zero_bubble = "off";
  return options;
}

Plan plan_step(Method method, const std::vector<int64_t>& lengths, const CostModel& cost,
               const PlannerOptions& options, Setting setting) {
  // A spread-head trainer keeps a head replica on every stage and syncs them every step.
  if (options.spread_head && !cost.head_replicas())
    return plan_step(method, lengths, cost.with_head_replicas(), options, setting);
  PlanResult result;
  if (method == Method::kEpp) {
    result = plan_epp(lengths, cost, options);
  } else {
    check_lengths(lengths);
    if (setting.token_cap == 0)
      setting.token_cap = *std::max_element(lengths.begin(), lengths.end());
    result = plan_with_setting(method, lengths, setting, cost, options);
  }
  check(result.feasible, std::string("no ") + to_string(method) +
                             " plan fits this step: " + result.reason +
                             " (raise the memory budget, or change the method's setting)");
  result.plan.validate();
  if (log::enabled(log::Level::kInfo))
    log::info("planned " + std::to_string(lengths.size()) + " sequences (" +
              std::to_string(result.plan.tokens()) + " tokens) with " + to_string(method) + ": " +
              describe(method, result.plan.setting) + ", " +
              std::to_string(result.plan.chunks.size()) + " chunks, " +
              std::to_string(result.plan.waves.size()) + " waves, predicted " +
              std::to_string(result.plan.step_time_s) + " s, in " +
              std::to_string(result.plan.plan_ms) + " ms");
  return std::move(result.plan);
}

}  // namespace infinipipe
