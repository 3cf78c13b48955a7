#pragma once
// 0.1.0's name of the recompute planner's header, kept until 0.2 (the part was named for what it
// plans: infinipipe/recompute/). Its types and function keep their old names as aliases too.
#warning \
    "infinipipe/checkpoint/checkpoint_planner.h is deprecated: include infinipipe/recompute/recompute_planner.h"
#include "infinipipe/recompute/recompute_planner.h"

namespace infinipipe {

using CheckpointMethod [[deprecated("use RecomputeMethod")]] = RecomputeMethod;
using CheckpointOptions [[deprecated("use RecomputeOptions")]] = RecomputeOptions;
using CheckpointResult [[deprecated("use RecomputeResult")]] = RecomputeResult;

[[deprecated("use plan_recompute")]] inline RecomputeResult plan_checkpointing(
    const Schedule& schedule, const std::vector<Chunk>& chunks, const CostModel& cost,
    const RecomputeOptions& options) {
  return plan_recompute(schedule, chunks, cost, options);
}

}  // namespace infinipipe
