#pragma once
// The walk behind memory_moments, for callers that only need to look at each moment once: the
// simulator visits thousands of moments per plan and should not copy every in-flight list.
#include <functional>
#include <vector>

#include "infinipipe/sim/memory_timeline.h"

namespace infinipipe {

// Called once per moment, in action order, with what memory_moments would store in it;
// `in_flight` is only valid during the call.
using MomentVisitor =
    std::function<void(int action_index, double fixed_bytes, const std::vector<int>& in_flight)>;

void for_each_memory_moment(const Schedule& schedule, int stage, const std::vector<Chunk>& chunks,
                            const CostModel& cost, const MomentVisitor& visit);

// binding_moments without copying: the chunks in flight are [first, last), valid during the call.
using BindingVisitor =
    std::function<void(int action_index, double fixed_bytes, const int* first, const int* last)>;
void for_each_binding_moment(const Schedule& schedule, int stage, const std::vector<Chunk>& chunks,
                             const CostModel& cost, const BindingVisitor& visit);

}  // namespace infinipipe
