#pragma once
// The planner's use of zero bubble (PlannerOptions::zero_bubble; internal to the plan part).
#include <vector>

#include "infinipipe/planner/planner.h"
#include "infinipipe/recompute/recompute_planner.h"

namespace infinipipe::planning {

// The option's mode; Error naming the valid values on anything else.
enum class ZeroBubbleChoice { kOff, kTry, kAlways };
ZeroBubbleChoice zero_bubble_choice(const PlannerOptions& options);

// The plan's schedule with `mode`'s W actions (kH1: with_weight_actions on it; kH2: built again
// with `extra_warmup` more forwards on stage 0, ScheduleOptions::extra_warmup, 0 for
// h2_extra_warmup's, heads where they were), its recompute kept when it still fits (the
// W actions and the warm-up hold more memory), else `methods`' programs solved again
// (best_recompute; a fixed recompute, no methods, must fit as it is). `always` false: the plan
// changes only when that fits and the simulator finds it faster, and otherwise stays as it was,
// bit for bit. `always` true: it changes whenever it fits, and returns false (the plan as it was,
// `reason` saying why) when it does not.
bool split_backwards(Plan& plan, const CostModel& cost, const PlannerOptions& options,
                     const std::vector<RecomputeMethod>& methods, ZeroBubble mode, bool always,
                     std::string& reason, int extra_warmup = 0);
// PlannerOptions::zero_bubble "try": ZB-H1, and ZB-H2 with h2_extra_warmup's and with the
// paper's d-1 extra forwards (more chunks in flight can cost recompute, so either may win), each
// tried as split_backwards does; the fastest kept (ties: the one that holds less); the plan as
// it was when none is faster.
void split_backwards_if_faster(Plan& plan, const CostModel& cost, const PlannerOptions& options,
                               const std::vector<RecomputeMethod>& methods);

}  // namespace infinipipe::planning
