#include "plan_replicas.h"

#include <algorithm>
#include <numeric>

#include <nlohmann/json.hpp>

#include "infinipipe/planner/data_split.h"
#include "plan_tool.h"

namespace infinipipe::tools {

ReplicaSteps split_steps(const std::vector<std::vector<int64_t>>& steps, const CostModel& cost,
                         int replicas) {
  ReplicaSteps out;
  out.replicas = replicas;
  if (replicas == 1) {
    out.planned = steps;
    return out;
  }
  for (const auto& lengths : steps) {
    out.indices.push_back(split_over_replicas(lengths, cost, replicas));
    for (const auto& indices : out.indices.back()) {
      std::vector<int64_t> share;
      for (int i : indices) share.push_back(lengths[i]);
      out.planned.push_back(std::move(share));
    }
  }
  return out;
}

ReplicaResult slowest_replica(const std::vector<PlanResult>& results, int step, int replicas) {
  ReplicaResult out;
  for (int r = 0; r < replicas; ++r) {
    const PlanResult* result = &results.at(static_cast<size_t>(step) * replicas + r);
    out.replicas.push_back(result);
    if (out.step && !out.step->feasible) continue;  // the first infeasible replica decides
    if (!out.step || !result->feasible || result->plan.step_time_s > out.step->plan.step_time_s)
      out.step = result;
  }
  return out;
}

void add_layout_fields(nlohmann::json& row, const ReplicaResult& result, const CostModel& cost,
                       const ReplicaSteps& split, int step) {
  row["layout"] = cost.layout();
  const Plan& plan = result.step->plan;
  std::vector<double> peak(cost.num_stages(), 0), state(cost.num_stages(), 0);
  for (const PlanResult* r : result.replicas)
    for (int p = 0; p < cost.num_stages() && p < int(r->plan.peak_memory_bytes.size()); ++p)
      peak[p] = std::max(peak[p], r->plan.peak_memory_bytes[p] / kGiB);
  for (int p = 0; p < cost.num_stages(); ++p) state[p] = cost.model_state_bytes(p) / kGiB;
  row["peak_memory_gib_per_rank"] = peak;
  row["model_state_gib_per_rank"] = state;
  row["alltoall_s_per_stage"] = plan.stage_alltoall_s;
  row["p2p_s_per_stage"] = plan.stage_p2p_s;
  row["gradient_sync_s_per_stage"] = plan.stage_gradient_sync_s;
  if (split.replicas == 1) return;
  nlohmann::json replicas = nlohmann::json::array();
  const auto& indices = split.indices.at(step);
  for (size_t r = 0; r < result.replicas.size(); ++r) {
    const auto& lengths = split.planned.at(static_cast<size_t>(step) * split.replicas + r);
    replicas.push_back({{"sequences", indices[r].size()},
                        {"tokens", std::accumulate(lengths.begin(), lengths.end(), int64_t{0})},
                        {"step_time_s", result.replicas[r]->plan.step_time_s}});
  }
  row["replicas"] = replicas;
}

}  // namespace infinipipe::tools
