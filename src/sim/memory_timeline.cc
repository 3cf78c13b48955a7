#include "infinipipe/sim/memory_timeline.h"

#include <algorithm>
#include <cmath>
#include <string>
#include <tuple>

#include "infinipipe/core/error.h"
#include "memory_walk.h"

namespace infinipipe {

double stage_model_state_bytes(const Schedule& schedule, int stage, const CostModel& cost) {
  double bytes = cost.model_state_bytes(stage);
  if (stage == schedule.num_stages() - 1) return bytes;  // its own head
  // A spread-head trainer builds a replica on every stage, whatever this step's heads.
  if (cost.head_replicas()) return bytes + cost.head_replica_bytes();
  const std::vector<Action>& actions = schedule.stages[stage];
  const bool runs_heads = std::any_of(actions.begin(), actions.end(),
                                      [](const Action& a) { return a.type == ActionType::kHead; });
  return runs_heads ? bytes + cost.head_replica_bytes() : bytes;
}

std::vector<RankPeak> rank_memory_peaks(
    const std::vector<std::vector<std::pair<double, double>>>& timelines,
    const std::vector<double>& idle_bytes, const std::vector<int>& rank_of_stage, int num_ranks) {
  check(timelines.size() == idle_bytes.size() && timelines.size() == rank_of_stage.size(),
        "rank_memory_peaks: give each stage a timeline, its idle bytes and its rank");
  std::vector<RankPeak> peaks(num_ranks);
  std::vector<double> held = idle_bytes;
  // Per rank, (time, stage, bytes) of its stages' moments: a stable sort keeps each stage's
  // moments in their order, and the sum is taken after each, so ties count every order.
  std::vector<std::vector<std::tuple<double, int, double>>> events(num_ranks);
  for (size_t p = 0; p < timelines.size(); ++p) {
    const int r = rank_of_stage[p];
    check(r >= 0 && r < num_ranks, "rank_memory_peaks: stage " + std::to_string(p) +
                                       " is on rank " + std::to_string(r) + " of " +
                                       std::to_string(num_ranks));
    peaks[r].bytes += idle_bytes[p];
    for (const auto& [time, bytes] : timelines[p])
      events[r].emplace_back(time, static_cast<int>(p), bytes);
  }
  for (int r = 0; r < num_ranks; ++r) {
    std::stable_sort(events[r].begin(), events[r].end(),
                     [](const auto& a, const auto& b) { return std::get<0>(a) < std::get<0>(b); });
    double total = peaks[r].bytes;
    for (const auto& [time, p, bytes] : events[r]) {
      total += bytes - held[p];
      held[p] = bytes;
      if (total > peaks[r].bytes) peaks[r] = {total, time};
    }
  }
  return peaks;
}

std::vector<MemoryMoment> memory_moments(const Schedule& schedule, int stage,
                                         const std::vector<Chunk>& chunks, const CostModel& cost) {
  std::vector<MemoryMoment> moments;
  for_each_memory_moment(
      schedule, stage, chunks, cost,
      [&](int action_index, double fixed_bytes, const std::vector<int>& in_flight, double) {
        moments.push_back({action_index, fixed_bytes, in_flight});
      });
  return moments;
}

std::vector<MemoryMoment> binding_moments(const Schedule& schedule, int stage,
                                          const std::vector<Chunk>& chunks, const CostModel& cost) {
  std::vector<MemoryMoment> kept;
  for_each_binding_moment(
      schedule, stage, chunks, cost,
      [&](int action_index, double fixed_bytes, const int* first, const int* last, double) {
        kept.push_back({action_index, fixed_bytes, std::vector<int>(first, last)});
      });
  return kept;
}

double moment_bytes(const MemoryMoment& moment, int stage, const std::vector<Chunk>& chunks,
                    const CostModel& cost, const Recompute& recompute) {
  double bytes = moment.fixed_bytes;
  for (int chunk : moment.in_flight)
    bytes += cost.activation_bytes(chunks[chunk], stage, recompute_layers(recompute, stage, chunk));
  return bytes;
}

double observable_activation_peak(const Schedule& schedule, int stage,
                                  const std::vector<Chunk>& chunks, const CostModel& cost,
                                  const Recompute& recompute) {
  const double model_state = stage_model_state_bytes(schedule, stage, cost);
  double peak = 0;
  for_each_memory_moment(
      schedule, stage, chunks, cost,
      [&](int action_index, double fixed_bytes, const std::vector<int>& in_flight, double) {
        double bytes = fixed_bytes - model_state;
        for (int c : in_flight)
          bytes += cost.activation_bytes(chunks[c], stage, recompute_layers(recompute, stage, c));
        const Action& action = schedule.stages[stage][action_index];
        if (action.type == ActionType::kBackward) {
          const Chunk& chunk = chunks[action.chunk];
          // Of the workspace the meter sees the lean layer's refilled GEMM inputs (they are
          // saved tensors), not the gradients.
          bytes -= cost.backward_workspace_bytes(chunk, stage) -
                   cost.forward_workspace_bytes(chunk, stage);
          // Recomputing layer l keeps inputs 0..l and the layer's saved tensors, its input among
          // them: at most checkpoint_saving_bytes more than the chunk's in-flight count when all
          // layers are checkpointed, and never more than that count when a full layer was held.
          if (recompute_layers(recompute, stage, action.chunk) == cost.layers(stage))
            bytes += cost.checkpoint_saving_bytes(chunk, stage);
        }
        peak = std::max(peak, bytes);
      });
  return peak;
}

}  // namespace infinipipe
