#pragma once
// What one planning call did, and how far its plan is from a time no plan of the step can beat:
// the planner's report, carried by every plan it returns (Plan::planner), printed by the plan
// tool (--json: "planner") and read by the Python trainer (result.plan["planner"]).
#include <cstdint>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "infinipipe/cost/cost_model.h"

namespace infinipipe {

struct PlannerReport {
  // CPU time of the planning call on the thread that ran it (CLOCK_THREAD_CPUTIME_ID): the
  // planner is single-threaded, and a thread's clock is not charged for other threads planning
  // at the same time (the property benchmark plans on several), unlike the process's clock.
  double cpu_ms = 0;
  // EPP's search (docs/design.md, "The EPP search"): the settings that became candidates
  // (distinct chunkings, and the winner's drain tapers), those it simulated at least once
  // (tried), and those it never simulated because their bound was no better than the best plan
  // already found, or because they are over the budget as they are and have too many chunks
  // for recompute or no recompute can make them fit (pruned); candidates = tried + pruned.
  // Settings that cannot chunk the step, or repeat another's chunks, are no candidates; capped
  // settings left unchunked because they could not give a plan count as one pruned candidate
  // each. `recomputed`: tried candidates that also went
  // through recompute and the grouping into waves, the expensive step. A baseline plans its one
  // setting: 1 candidate, 1 tried, 0 pruned, 0 recomputed.
  int candidates = 0;
  int tried = 0;
  int pruned = 0;
  int recomputed = 0;
  // The search's work (PlannerOptions::search_work_limit counts it) and whether the limit
  // stopped the search with the best plan found so far.
  int64_t work = 0;
  bool budget_exhausted = false;
  // step_time_lower_bound(lengths, cost), and the plan's predicted step time over it (1 would be
  // a plan without bubbles, sends or recompute on its busiest stage; 0 when the bound is 0).
  double step_time_lower_bound_s = 0;
  double predicted_over_bound = 0;
};

// No plan of these lengths on this cost model has a shorter step: the busiest stage's compute
// without recompute, i.e. the forward and backward of every token on the stage's layers (the
// embedding on the first stage, the head on the last). Sequences are costed whole in one chunk:
// a sliced sequence's attention adds up to the same ((c + s)^2 - c^2 telescopes), and one chunk
// pays the per-chunk overhead least. A stage runs its work one piece at a time, so a simulated
// step is at least this long. With `spread_head` the head's work (its forward and backward) may
// go to any stage in any share (docs/design.md, "Spread head"): the bound is then the level that
// the head's work, poured onto the stages' other compute, fills them to (never below the
// busiest stage's other compute).
double step_time_lower_bound(const std::vector<int64_t>& lengths, const CostModel& cost,
                             bool spread_head = false);

// Fills the bound and the ratio of a plan predicted to take `step_time_s` (spread_head: the plan
// runs heads on other stages than the last).
void set_bound(PlannerReport& report, const std::vector<int64_t>& lengths, const CostModel& cost,
               double step_time_s, bool spread_head = false);

void to_json(nlohmann::json& j, const PlannerReport& report);
void from_json(const nlohmann::json& j, PlannerReport& report);

}  // namespace infinipipe
