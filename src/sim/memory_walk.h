#pragma once
// The walk behind memory_moments, for callers that only need to look at each moment once: the
// simulator visits thousands of moments per plan and should not copy every in-flight list.
#include <functional>
#include <vector>

#include "infinipipe/sim/memory_timeline.h"

namespace infinipipe {

// Called once per moment, in action order, with what memory_moments would store in it;
// `in_flight` is only valid during the call. With `weights` (one per chunk), `weight_sum` is their
// running sum over the chunks in flight, added as chunks come and subtracted as they go: off
// from the sum in list order by rounding only (see Simulation::measure_memory); 0 without.
using MomentVisitor = std::function<void(int action_index, double fixed_bytes,
                                         const std::vector<int>& in_flight, double weight_sum)>;

void for_each_memory_moment(const Schedule& schedule, int stage, const std::vector<Chunk>& chunks,
                            const CostModel& cost, const MomentVisitor& visit,
                            const double* weights = nullptr);

// binding_moments without copying: the chunks in flight are [first, last), valid during the call.
using BindingVisitor = std::function<void(int action_index, double fixed_bytes, const int* first,
                                          const int* last, double weight_sum)>;
void for_each_binding_moment(const Schedule& schedule, int stage, const std::vector<Chunk>& chunks,
                             const CostModel& cost, const BindingVisitor& visit,
                             const double* weights = nullptr);

}  // namespace infinipipe
