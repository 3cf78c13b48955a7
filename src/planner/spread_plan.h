#pragma once
// The planner's use of the spread head (PlannerOptions::spread_head; internal to the plan part).
#include <vector>

#include "infinipipe/planner/planner.h"
#include "infinipipe/recompute/recompute_planner.h"

namespace infinipipe::planning {

// With options.spread_head, the plan's chunks and waves again with their heads spread
// (planner/head_spread.h), once with every stage eligible and once without stage 0: each
// spread schedule gets `methods`' programs (best_recompute) or keeps the plan's recompute,
// whichever fits and is faster (no methods: the plan's must fit as it is). The plan becomes the
// fastest spread one that fits when that is faster than it; otherwise it stays as it was, bit for
// bit.
void spread_heads_if_faster(Plan& plan, const CostModel& cost, const PlannerOptions& options,
                            const std::vector<RecomputeMethod>& methods);

}  // namespace infinipipe::planning
