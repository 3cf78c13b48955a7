#pragma once
// Splits a step's chains into waves: sort chains by length (slice count) descending and cut the
// sorted list into contiguous ranges, choosing the cuts by dynamic programming:
//   dp[j] = min over i < j of dp[i] + wave_cost(chains in (i, j])
// Chains of equal length are never separated. wave_cost returns +infinity for a wave that
// cannot fit memory.
#include <functional>
#include <vector>

#include "infinipipe/core/chunk.h"
#include "infinipipe/schedule/scheduler.h"

namespace infinipipe {

// Cost of running `wave` as one 1F1B pipeline (its time plus warm-up/cool-down, plus the
// recompute it needs); +infinity when it cannot fit.
using WaveCost = std::function<double(const Wave& wave)>;

// Throws Error when no grouping is feasible (even waves of one chain length do not fit).
// With `lower_bound` (no more than wave_cost of the same wave, and cheaper), a wave whose bound
// shows it cannot improve dp[j] is never weighed, and for each j the waves are weighed in order of
// dp[i] + bound, so good groupings found early rule out the rest. The grouping is the same as
// without it: ties still go to the smallest i.
std::vector<Wave> group_into_waves(const std::vector<Chunk>& chunks, const WaveCost& wave_cost,
                                   const WaveCost& lower_bound = nullptr);

}  // namespace infinipipe
