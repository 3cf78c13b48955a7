#pragma once
// A global batch split over data-parallel replicas by predicted cost, not by count: the longest
// sequences dominate a step, so equal counts can leave one replica with most of the work
// (docs/planning.md, "Data-parallel replicas"). Every rank computes the same split.
#include <cstdint>
#include <vector>

#include "infinipipe/cost/cost_model.h"

namespace infinipipe {

// Predicted cost of one whole sequence through the pipeline: its forward and backward (no
// recompute) on every stage, as one chunk of its own.
double whole_sequence_cost(int64_t length, const CostModel& cost);

// Greedy longest processing time (Graham 1969): sequences in decreasing predicted cost (ties:
// lower index first), each to the replica with the least cost so far (ties: fewer sequences,
// then the lower replica).
// Returns each replica's sequence indices in ascending order; every index appears exactly once.
// Deterministic. Error when there are fewer sequences than replicas (a replica would have
// nothing to train on) or replicas < 1, or a length < 1.
std::vector<std::vector<int>> split_over_replicas(const std::vector<int64_t>& lengths,
                                                  const CostModel& cost, int replicas);

}  // namespace infinipipe
