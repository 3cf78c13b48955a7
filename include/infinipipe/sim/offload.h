#pragma once
// Activation offload (docs/design.md, "Activation offload"): a stage copies the activations of
// some chunks in flight to host memory after their forwards and back before their backwards.
// Which chunks stay on the device is decided by the stage's action order alone, so the memory
// walk (memory_timeline.h) stays a walk over actions and the simulator only adds the copies'
// time: at each memory moment a stage keeps its `resident` latest forwards' chunks and the chunks
// of its next `prefetch` backwards; every other chunk in flight is on the host.
#include <utility>
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
  // Neighbouring stages sharing one host link each way: stages p and q share one when
  // p / stages_per_link == q / stages_per_link (their GPUs sit behind one PCIe switch).
  int stages_per_link = 1;

  // Error unless it fits a schedule of `num_stages` stages: one entry per stage, prefetch at least
  // 1, a positive rate where some stage offloads, and at least one stage per link.
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

// One way of one host link: the copies booked on it, as busy intervals in time order. The
// simulator times each stage as far as it can before the next (simulator.cc), not in time order,
// so a copy takes the first gap after it is ready that holds it, not the link's last end: a
// stage timed later may still copy before the copies booked ahead of it by a neighbour.
class HostLinkWay {
 public:
  // Books a copy of `duration` seconds that may start at `ready`; returns when it ends.
  double book(double ready, double duration);

 private:
  std::vector<std::pair<double, double>> busy_;  // [start, end), sorted, not overlapping
};

// `activation`: per chunk, what it holds on this stage (CostModel::activation_bytes at its
// recompute). `resident` -1 gives the walk without offload.
OffloadWalk walk_offload(const Schedule& schedule, int stage, const std::vector<Chunk>& chunks,
                         const CostModel& cost, const std::vector<double>& activation, int resident,
                         int prefetch);

}  // namespace infinipipe
