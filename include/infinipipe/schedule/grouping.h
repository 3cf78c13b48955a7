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
std::vector<Wave> group_into_waves(const std::vector<Chunk>& chunks, const WaveCost& wave_cost);

}  // namespace infinipipe
