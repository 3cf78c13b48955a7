#pragma once
// The planner's use of zero bubble (PlannerOptions::zero_bubble; internal to the plan part).
#include <vector>

#include "infinipipe/planner/planner.h"
#include "infinipipe/recompute/recompute_planner.h"

namespace infinipipe::planning {

// The option's mode; Error naming the valid values on anything else.
enum class ZeroBubbleChoice { kOff, kTry, kAlways };
ZeroBubbleChoice zero_bubble_choice(const PlannerOptions& options);

// The plan's schedule with ZB-H1's W actions (with_weight_actions), its recompute kept when it
// still fits (the W actions hold more memory), else `methods`' programs solved again
// (best_recompute; a fixed recompute, no methods, must fit as it is). `always` false: the plan
// changes only when that fits and the simulator finds it faster, and otherwise stays as it was,
// bit for bit. `always` true: it changes whenever it fits, and returns false (the plan as it
// was, `reason` saying why) when it does not.
bool split_backwards(Plan& plan, const CostModel& cost, const PlannerOptions& options,
                     const std::vector<RecomputeMethod>& methods, bool always, std::string& reason);

}  // namespace infinipipe::planning
