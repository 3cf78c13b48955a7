#pragma once
// Activation offload (docs/design.md, "Activation offload"): a stage copies the activations of
// some chunks in flight to host memory after their forwards and back before their backwards.
// Which chunks stay on the device is decided by the stage's action order alone, so the memory
// walk (memory_timeline.h) stays a walk over actions and the simulator only adds the copies'
// time: at each memory moment a stage keeps its `resident` latest forwards' chunks and the chunks
// of its next `prefetch` backwards; every other chunk in flight is on the host.
#include <vector>

#include "infinipipe/core/chunk.h"
#include "infinipipe/cost/cost_model.h"
#include "infinipipe/schedule/action.h"

namespace infinipipe {

struct Offload {
  // Per stage: its latest forwards whose chunks it keeps; -1 keeps every chunk (no offload).
  // At least 1 where it offloads: a forward's chunk is on the device when the forward ends.
  std::vector<int> resident;
  // A chunk comes back once it is among the stage's next `prefetch` backwards (at least 1).
  int prefetch = 2;
  // The host link, each way (Hardware::host_link_bandwidth); one copy at a time each way.
  double bytes_per_s = 0;

  // Error unless it fits a schedule of `num_stages` stages: one entry per stage, prefetch at least
  // 1 and a positive rate where some stage offloads.
  void validate(int num_stages) const;
  bool offloads(int stage) const {
    return stage < static_cast<int>(resident.size()) && resident[stage] >= 0;
  }
};

// One stage's walk with offload: what it holds at each memory moment and when chunks move.
struct OffloadWalk {
  // Per moment, in action order: its action's index, and its bytes (the moment's fixed bytes plus
  // the activations of the resident chunks).
  std::vector<int> moment_action;
  std::vector<double> bytes;
  // Per action index: the chunks whose copy out must have ended by this action's moment, and the
  // chunks whose copy back may start once this compute ends (each chunk moves once each way).
  std::vector<std::vector<int>> copied_out_by;
  std::vector<std::vector<int>> copied_in_after;
  double peak_bytes = 0;  // the largest of `bytes` (the model state when there is no moment)
  int peak_action = -1;
  // Per chunk, what its copies carry (0: it stays): its activations, less on the last stage the
  // logits of a chunk with an H, which it never keeps (memory_timeline.h). And their sum.
  std::vector<double> moved_bytes;
  double bytes_each_way = 0;
};

// `activation`: per chunk, what it holds on this stage (CostModel::activation_bytes at its
// recompute). `resident` -1 gives the walk without offload.
OffloadWalk walk_offload(const Schedule& schedule, int stage, const std::vector<Chunk>& chunks,
                         const CostModel& cost, const std::vector<double>& activation, int resident,
                         int prefetch);

}  // namespace infinipipe
