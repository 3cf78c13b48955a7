#pragma once
// A candidate made into a plan, in the order the search looks closer (internal to the plan
// part): one wave without recompute, one wave with recompute, several waves.
#include <limits>
#include <string>
#include <vector>

#include "candidate.h"
#include "infinipipe/planner/planner.h"

namespace infinipipe::planning {

// The candidate's chunks in one wave without recompute: its exact plan when the simulator finds
// it within the budget; else the optimistic time, which recompute can only lengthen. With
// `stop_above`, the simulation may stop once the step is known to be slower than that
// (cand.sim.stopped_early): neither its time nor its memory is then known.
void one_wave_without_recompute(Candidate& cand, const CostModel& cost,
                                const PlannerOptions& options,
                                double stop_above = std::numeric_limits<double>::infinity());

// The candidate in one wave with recompute (search_recompute). False when it does not fit.
bool one_wave_with_recompute(Candidate& cand, double time_to_beat, const CostModel& cost,
                             const PlannerOptions& options, std::string& reason);

// Whether the chunks' chains have more than one length: the grouping into waves groups chains by
// length, so with one length it can only make the one wave again.
bool several_chain_lengths(const std::vector<Chunk>& chunks);

// True when recompute cannot make the candidate fit: some chunk's floor exceeds the budget on
// some stage, or its chunks form one chain (so the grouping
// into waves can only make the one wave again) and even recomputing every layer of every chunk
// leaves some moment of its one wave over budget; `reason` then says where. Recompute holds
// less the more layers it recomputes (CostModel::activation_bytes is linear in them), so no
// solver can do better; false when some chunk's recompute would not save bytes.
bool recompute_cannot_fit(const Candidate& cand, const CostModel& cost,
                          const PlannerOptions& options, std::string& reason);

// A candidate that does not fit as it is: one wave with recompute, and waves when those can
// still win (a second wave adds about one more fill and drain to the optimistic time) or when
// one wave does not fit at all, unless its chains have one length. Keeps the faster; false when
// neither fits.
bool plan_with_recompute(Candidate& cand, double time_to_beat, bool may_group,
                         const CostModel& cost, const PlannerOptions& options, std::string& reason,
                         bool& grouped);

}  // namespace infinipipe::planning
