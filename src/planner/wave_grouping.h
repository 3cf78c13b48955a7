#pragma once
// A candidate's chunks grouped into waves by the grouping DP, each wave weighed by its simulated
// time with the recompute it needs (internal to the plan part; docs/design.md, "Waves").
#include <string>

#include "candidate.h"
#include "infinipipe/planner/planner.h"

namespace infinipipe::planning {

// Waves by the grouping DP, then recompute on the whole step (search_recompute). False,
// with the reason, when nothing fits.
// The DP may cut between any two chain lengths, and every wave it weighs costs a checkpoint
// solve and a simulation, so with many lengths it dominates planning. With `coarse`, cuts are
// allowed only at about kCoarseWaveCuts places that split the chunks into near-equal parts
// (waves of other bounds cost +infinity, which the DP rejects at once).
bool grouped_waves(Candidate& cand, double time_to_beat, const CostModel& cost,
                   const PlannerOptions& options, std::string& reason, bool coarse = true);

// Whether grouped_waves fails whatever the time to beat, found without a solve: every wave that
// holds the longest chains is over the budget on some stage even with every layer recomputed
// (pipeline_bound's floor), and every grouping has such a wave. False says nothing. The reason
// names the smallest such wave. One walk of the waves' bounds (WaveBounds::bound_runs from the
// first group), about what a simulation of the candidate costs.
bool no_grouping_fits(const Candidate& cand, const CostModel& cost, const PlannerOptions& options,
                      std::string& reason);

}  // namespace infinipipe::planning
