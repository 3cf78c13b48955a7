#pragma once
// Discrete-event run of every stage's action list against the cost model: compute, recompute,
// sends and receives with their dependencies. Gives the step time, busy time and bubbles per
// stage and memory over time, and finds deadlocks and memory over budget.
#include <limits>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "infinipipe/core/chunk.h"
#include "infinipipe/core/recompute.h"
#include "infinipipe/cost/cost_model.h"
#include "infinipipe/schedule/action.h"
#include "infinipipe/sim/memory_timeline.h"
#include "infinipipe/sim/offload.h"

namespace infinipipe {

struct SimOptions {
  // Per stage, and with virtual stages per rank as well.
  double memory_budget_bytes = std::numeric_limits<double>::infinity();
  bool record_events = true;  // keep the timeline (for traces); planners turn it off for speed
  // A planner that only needs to know whether the step beats a time: once the step surely takes
  // longer, the run stops (SimResult::stopped_early) without measuring memory. Surely: some
  // stage's clock passes it, or, with stop_floor (per stage: no more than its compute in all plus
  // the time the step surely lasts after its last action), its clock plus the compute it has
  // left plus that tail does.
  double stop_above = std::numeric_limits<double>::infinity();
  std::vector<double> stop_floor;
  // The schedule has one stage more than the cost model: a virtual last stage that runs every
  // chunk's head. Its F c costs head_time (the head's forward, loss and backward), its B c
  // nothing; it holds no memory, and the stage before it leaves the head out of F and B.
  // plan/head_spread times a schedule built for d + 1 stages so (docs/design.md, "Spread head").
  bool virtual_head_stage = false;
  // Keep every action's start time (SimResult::start_s).
  bool record_starts = false;
  // The stages' peaks, already measured for this schedule and recompute with the same sums
  // (RecomputeResult::peaks): taken as they are instead of walking the memory moments again.
  // Only a caller that measured them for exactly these inputs may pass them; null measures.
  const MemoryPeaks* known_peaks = nullptr;
  // Activation offload (offload.h): the chunks a stage keeps on the device at each moment, and the
  // host link that carries the rest. A compute waits until the chunks its moment drops have been
  // copied out; a backward until its chunk is back. Not with virtual stages or known_peaks.
  const Offload* offload = nullptr;
};

struct SimEvent {
  int stage = 0;
  std::string name;      // the action's text, e.g. "F3", or "recompute B3"
  std::string category;  // "forward", "backward", "recompute", "head", "weight",
                         // "send", "recv"
  double start_s = 0;
  double end_s = 0;
};

struct SimResult {
  double step_time_s = 0;
  std::vector<double> busy_s;           // per stage, compute including recompute
  std::vector<double> bubble_fraction;  // per stage, 1 - busy / step time
  std::vector<double> recompute_s;      // per stage
  // Per stage, of one rank: Ulysses all-to-alls (forward, backward and recompute; part of busy_s,
  // 0 without sequence parallelism) and the sends it made (not part of busy_s).
  std::vector<double> alltoall_s;
  std::vector<double> p2p_s;
  // Per stage, of one rank: its gradient synchronisation after its last action
  // (CostModel::gradient_sync_time; not part of busy_s, not a bubble).
  std::vector<double> gradient_sync_s;
  std::vector<double> peak_memory_bytes;  // per stage
  // With SimOptions::offload, per stage: the activations it copied to the host (and back), and
  // how long its computes waited on those copies (part of its bubble).
  std::vector<double> offload_bytes;
  std::vector<double> offload_wait_s;
  // Virtual stages (Schedule::ranks) only, per rank: its stages' memory added up over time
  // (rank_memory_peaks, an upper bound), checked against the budget as well as each stage's peak.
  // Then bubble_fraction gives each stage its rank's bubble, and the step ends when the last
  // rank has synchronised its stages' gradients one after the other.
  std::vector<double> rank_peak_memory_bytes;
  // Per stage: (time, bytes) at every memory moment, in time order; kept only with
  // SimOptions::record_events (peak_memory_bytes is always there).
  std::vector<std::vector<std::pair<double, double>>> memory;
  std::vector<SimEvent> events;
  // With SimOptions::record_starts: per stage and action, when it started (a SEND when its
  // transfer began, a RECV when it was posted).
  std::vector<std::vector<double>> start_s;
  bool over_budget = false;
  std::string over_budget_message;  // names the stage, the moment and the bytes
  // Stopped at SimOptions::stop_above: step_time_s is the clock that passed it (the step takes
  // at least that), the memory and the other sums are not measured.
  bool stopped_early = false;

  double mean_bubble_fraction() const;
  double total_recompute_s() const;
};

// Throws Error (with the schedule grid, the stuck step marked) on deadlock.
SimResult simulate(const Schedule& schedule, const std::vector<Chunk>& chunks,
                   const CostModel& cost, const Recompute& recompute, const SimOptions& options);

// Chrome trace (chrome://tracing, Perfetto): one thread per stage, memory as a counter.
nlohmann::json chrome_trace(const SimResult& result);
void write_chrome_trace(const SimResult& result, const std::string& path);

}  // namespace infinipipe
