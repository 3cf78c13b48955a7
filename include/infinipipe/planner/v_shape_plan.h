#pragma once
// A planned step on the V shape (docs/design.md, "Virtual stages"): what EPP's chunks and waves
// take when each rank's layers are cut into two stages placed in a V (schedule/placement.h).
// A what-if for now: the executor does not run virtual stages yet, and nothing is recomputed,
// so a step whose V needs recompute is reported as not fitting.
#include <string>
#include <vector>

#include "infinipipe/cost/cost_model.h"
#include "infinipipe/plan/plan.h"
#include "infinipipe/schedule/action.h"
#include "infinipipe/schedule/scheduler.h"
#include "infinipipe/sim/simulator.h"

namespace infinipipe {

struct VShapeOptions {
  double memory_budget_bytes = 0;  // per rank, model state included
  // Extra warm-up forwards tried on the first stage (ScheduleOptions::extra_warmup): 0 .. this.
  int max_extra_warmup = 24;
};

struct VShapePlan {
  bool fits = false;   // some candidate fits the budget without recompute
  std::string reason;  // why none fits (the tightest candidate's over-budget message)
  double step_time_s = 0;
  ZeroBubble zero_bubble = ZeroBubble::kOff;
  int extra_warmup = 0;
  std::vector<int> layers_per_stage;  // 2d stages; stage s on rank v_shape(d)[s]
  Schedule schedule;                  // with Schedule::ranks
  SimResult sim;
  int candidates = 0;  // placed schedules weighed
};

// The cost model of `cost`'s pipeline cut into 2d stages: rank r's layers split between stages r
// and 2d-1-r, the larger half on stage r when `first_half_larger`. Links are those of 2d stages
// laid out in a row, so only a pipeline inside one node with one replica is taken: Error
// otherwise, and when a rank has fewer than 2 layers. The ideal even head what-if is kept; a
// spread-head trainer's head replicas are not (the V runs every head on rank 0's last stage).
CostModel v_shape_cost(const CostModel& cost, bool first_half_larger);

// The fastest V-shaped schedule of `plan`'s chunks and waves that fits without recompute, over
// both layer halvings, zero bubble off, ZB-H1 and ZB-H2, and 0 .. max_extra_warmup extra
// warm-up forwards: 1F1B over the 2d stages in the scheduler's chain order, each placed on the
// ranks by place_on_ranks four ways (without time; by the stages' start times unplaced; twice by
// the last placement's), timed and its memory checked per rank by the simulator.
VShapePlan plan_v_shape(const Plan& plan, const CostModel& cost, const VShapeOptions& options);

}  // namespace infinipipe
