#pragma once
// A planned step with activation offload (docs/design.md, "Activation offload"): how fast a
// plan runs when each stage copies the activations it cannot hold to host memory instead of
// recomputing them (sim/offload.h). A what-if for now: the executor does not offload yet.
#include <string>

#include "infinipipe/cost/cost_model.h"
#include "infinipipe/plan/plan.h"
#include "infinipipe/sim/offload.h"
#include "infinipipe/sim/simulator.h"

namespace infinipipe {

struct OffloadOptions {
  double memory_budget_bytes = 0;  // per stage, model state included
  double host_link_bandwidth = 0;  // bytes/s each way (Hardware::host_link_bandwidth)
  int gpus_per_host_link = 1;      // Hardware::gpus_per_host_link
  int max_prefetch = 3;            // Offload::prefetch tried: 1 .. this
};

struct OffloadPlan {
  bool fits = false;
  std::string reason;  // why nothing fits (the tightest stage's need)
  double step_time_s = 0;
  Offload offload;
  bool recompute_kept = false;  // the plan's own recompute (else none at all)
  SimResult sim;
  int candidates = 0;  // offload settings simulated
};

// The fastest way to run `plan`'s schedule within the budget by offloading, over its own
// recompute and none, and prefetch depths 1 .. max_prefetch. Per stage the resident count is the
// largest that fits (its memory only grows with it), -1 where the stage fits with nothing
// offloaded. Each setting is simulated with its copies. A stage's d_s GPUs copy their shares of a
// chunk at once (CostModel::activation_bytes is one GPU's), so with g GPUs per host link a stage's
// copy takes its bytes over rate / min(d_s, g), and max(1, g / d_s) neighbouring stages share a
// link; one of d_s and g must divide the other.
OffloadPlan plan_offload(const Plan& plan, const CostModel& cost, const OffloadOptions& options);

}  // namespace infinipipe
