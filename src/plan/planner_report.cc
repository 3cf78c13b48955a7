#include "infinipipe/plan/planner_report.h"

#include <algorithm>

#include <nlohmann/json.hpp>

#include "plan_json_fields.h"

namespace infinipipe {

using planning::read_optional;

double step_time_lower_bound(const std::vector<int64_t>& lengths, const CostModel& cost) {
  Chunk everything;
  for (size_t i = 0; i < lengths.size(); ++i)
    everything.slices.push_back({static_cast<int>(i), 0, lengths[i], lengths[i]});
  double busiest = 0;
  for (int p = 0; p < cost.num_stages(); ++p)
    busiest = std::max(busiest, cost.forward_time(everything, p) +
                                    cost.backward_time(everything, p, /*checkpointed_layers=*/0));
  return busiest;
}

void set_bound(PlannerReport& report, const std::vector<int64_t>& lengths, const CostModel& cost,
               double step_time_s) {
  report.step_time_lower_bound_s = step_time_lower_bound(lengths, cost);
  report.predicted_over_bound =
      report.step_time_lower_bound_s > 0 ? step_time_s / report.step_time_lower_bound_s : 0;
}

void to_json(nlohmann::json& j, const PlannerReport& r) {
  j = nlohmann::json{{"cpu_ms", r.cpu_ms},
                     {"candidates", r.candidates},
                     {"tried", r.tried},
                     {"pruned", r.pruned},
                     {"recomputed", r.recomputed},
                     {"work", r.work},
                     {"budget_exhausted", r.budget_exhausted},
                     {"step_time_lower_bound_s", r.step_time_lower_bound_s},
                     {"predicted_over_bound", r.predicted_over_bound}};
}

void from_json(const nlohmann::json& j, PlannerReport& r) {
  r = PlannerReport{};
  read_optional(j, "cpu_ms", r.cpu_ms);
  read_optional(j, "candidates", r.candidates);
  read_optional(j, "tried", r.tried);
  read_optional(j, "pruned", r.pruned);
  read_optional(j, "recomputed", r.recomputed);
  read_optional(j, "work", r.work);
  read_optional(j, "budget_exhausted", r.budget_exhausted);
  read_optional(j, "step_time_lower_bound_s", r.step_time_lower_bound_s);
  read_optional(j, "predicted_over_bound", r.predicted_over_bound);
}

}  // namespace infinipipe
