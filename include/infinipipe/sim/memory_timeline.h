#pragma once
// The moments at which a stage's memory can peak, shared by the checkpoint planner (one memory
// constraint per moment) and the simulator (memory over time), so both count the same bytes.
//
// Walking a stage's actions: a chunk is in flight from the end of its forward to the end of its
// backward. A split sequence's K/V buffer exists from the first forward of any of its slices to
// the end of the backward of its first slice (backwards run slices in reverse); its dK/dV
// buffer from the start of its first backward to the same end (the chunk attention allocates
// it lazily at that backward: kernels/chunk_attention.h). Moments:
//   - at every forward: model state + buffers + activations of the chunks in flight, the new
//     one's included, plus its forward workspace (the lean layer's GEMM inputs of one layer);
//   - during every backward: the same plus the chunk's backward workspace;
//   - during every H (spread head): the same plus the chunk's logits (head_logits_bytes).
// A stage other than the last holds the head's replica as model state when it runs H actions,
// and always under a spread-head trainer's cost model (CostModel::head_replicas), which builds
// one on every stage (stage_model_state_bytes). On the last stage a chunk with an H keeps no logits
// from F to B: their bytes (which activation_bytes counts there whatever the recompute) come off
// the moment's fixed bytes while the chunk is in flight, so moment_bytes stays fixed bytes plus
// activations.
#include <utility>
#include <vector>

#include "infinipipe/core/chunk.h"
#include "infinipipe/core/recompute.h"
#include "infinipipe/cost/cost_model.h"
#include "infinipipe/schedule/action.h"

namespace infinipipe {

struct MemoryMoment {
  int action_index = 0;  // the F or B in the stage's action list
  double fixed_bytes =
      0;  // everything checkpointing cannot change: model state, buffers, workspace
  std::vector<int> in_flight;  // chunks whose activations are held: each adds
                               // activation_bytes(chunk, stage, recompute)
};

// Per stage, the largest moment_bytes over the binding moments (the first such moment in action
// order) and the index of its action in the stage's list (-1 when the stage has no moment). The
// checkpoint planner's byte check measures them for the recompute it returns, with the
// simulator's sums in the simulator's order, so a simulation of that recompute can take them
// instead of walking every stage's moments again (SimOptions::known_peaks).
struct MemoryPeaks {
  std::vector<double> bytes;
  std::vector<int> action_index;
};

// The stage's model state: CostModel::model_state_bytes plus, on a stage other than the last
// that runs H actions, the head's replica.
double stage_model_state_bytes(const Schedule& schedule, int stage, const CostModel& cost);

std::vector<MemoryMoment> memory_moments(const Schedule& schedule, int stage,
                                         const std::vector<Chunk>& chunks, const CostModel& cost);

// The moments that can bind: memory_moments without those another moment dominates (its
// in-flight set contains theirs and its fixed bytes are no smaller), so for every recompute the
// largest moment_bytes of these equals that of all moments, bit for bit. The checkpoint planner's
// rows and the simulator's peak use these; a long run of forwards (one long sequence's slices,
// all in flight together) then keeps one moment instead of thousands of growing lists.
std::vector<MemoryMoment> binding_moments(const Schedule& schedule, int stage,
                                          const std::vector<Chunk>& chunks, const CostModel& cost);

// Virtual stages (action.h): per rank, the peak of its stages' memory added up over time.
// `timelines`: per stage, (time, bytes) at each of its moments in time order; `idle_bytes`: per
// stage, what it holds before its first moment (its model state); `rank_of_stage`: per stage,
// its rank. A stage is taken to hold a moment's bytes until its next moment: an upper bound,
// since a backward's workspace and its chunk's activations go at its end, and a rank's peak
// within that bound fits its memory.
struct RankPeak {
  double bytes = 0;
  double time_s = 0;  // the first time it is reached (0 when idle)
};
std::vector<RankPeak> rank_memory_peaks(
    const std::vector<std::vector<std::pair<double, double>>>& timelines,
    const std::vector<double>& idle_bytes, const std::vector<int>& rank_of_stage, int num_ranks);

double moment_bytes(const MemoryMoment& moment, int stage, const std::vector<Chunk>& chunks,
                    const CostModel& cost, const Recompute& recompute);

// The part of the stage's predicted peak that a run can observe through saved-tensor hooks plus
// the executor's held buffers (the runtime's MemoryMeter; docs/runtime.md, "Memory"): the
// largest moment without the model state and, at a backward, without the backward workspace
// except its saved tensors. Those are the recomputed layer's activations beyond its kept input
// when every layer of the chunk is checkpointed (otherwise the chunk's still-held full layers
// already bound them); the workspace's gradients are never saved tensors.
double observable_activation_peak(const Schedule& schedule, int stage,
                                  const std::vector<Chunk>& chunks, const CostModel& cost,
                                  const Recompute& recompute);

}  // namespace infinipipe
