#pragma once
// The plan tool with data-parallel replicas (--dp): every step's batch is split over the
// replicas by predicted cost (split_over_replicas), each replica's share is planned on its own
// like a step, and the step takes as long as its slowest replica. Also the per-rank memory and
// communication fields every JSON row carries. Private to the plan tool.
#include <cstdint>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "infinipipe/cost/cost_model.h"
#include "infinipipe/planner/planner.h"

namespace infinipipe::tools {

struct ReplicaSteps {
  int replicas = 1;
  // What the planner is given: step i's replica r at i * replicas + r (the steps themselves when
  // replicas is 1).
  std::vector<std::vector<int64_t>> planned;
  // Per step and replica: the indices of the step's sequences it trains on (empty with one).
  std::vector<std::vector<std::vector<int>>> indices;
};

ReplicaSteps split_steps(const std::vector<std::vector<int64_t>>& steps, const CostModel& cost,
                         int replicas);

// One step of one method: the slowest replica's result (or the first infeasible one, which makes
// the step infeasible), with every replica's.
struct ReplicaResult {
  const PlanResult* step = nullptr;
  std::vector<const PlanResult*> replicas;
};

// `results` are per planned entry (ReplicaSteps::planned).
ReplicaResult slowest_replica(const std::vector<PlanResult>& results, int step, int replicas);

// Fields of a feasible JSON row that the layout adds: the layout, per stage the peak memory and
// model state of one rank (peak: the largest over the replicas), the all-to-all and p2p seconds
// of one rank of the slowest replica, and with several replicas each one's sequences, tokens and
// step time.
void add_layout_fields(nlohmann::json& row, const ReplicaResult& result, const CostModel& cost,
                       const ReplicaSteps& split, int step);

}  // namespace infinipipe::tools
