#include "infinipipe/plan/planner_report.h"

#include <algorithm>
#include <limits>

#include <nlohmann/json.hpp>

#include "plan_json_fields.h"

namespace infinipipe {

using planning::read_optional;

double step_time_lower_bound(const std::vector<int64_t>& lengths, const CostModel& cost,
                             bool spread_head) {
  Chunk everything;
  for (size_t i = 0; i < lengths.size(); ++i)
    everything.slices.push_back({static_cast<int>(i), 0, lengths[i], lengths[i]});
  const double layer_forward = cost.layer_forward_time(everything);
  std::vector<double> work(cost.num_stages());
  for (int p = 0; p < cost.num_stages(); ++p)
    work[p] = cost.forward_time_with(everything, p, layer_forward, !spread_head) +
              cost.backward_time_with(everything, p, /*checkpointed_layers=*/0, layer_forward,
                                      !spread_head);
  std::sort(work.begin(), work.end());
  if (!spread_head) return work.back();
  // Water filling: raise the least busy stages together until the head's work is poured out.
  double head = cost.head_time(everything);
  double level = work.front();
  for (size_t k = 1; k <= work.size(); ++k) {
    const double next = k < work.size() ? work[k] : std::numeric_limits<double>::infinity();
    if (head <= (next - level) * double(k)) return std::max(work.back(), level + head / double(k));
    head -= (next - level) * double(k);
    level = next;
  }
  return level;
}

void set_bound(PlannerReport& report, const std::vector<int64_t>& lengths, const CostModel& cost,
               double step_time_s, bool spread_head) {
  report.step_time_lower_bound_s = step_time_lower_bound(lengths, cost, spread_head);
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
