#include "infinipipe/planner/offload_plan.h"

#include <algorithm>
#include <vector>

#include "infinipipe/core/error.h"
#include "infinipipe/core/memory_text.h"

namespace infinipipe {

namespace {

// Stage p's activation bytes per chunk under one recompute, and its peak with nothing offloaded:
// neither depends on the resident count or the prefetch depth tried.
struct StageMemory {
  std::vector<double> activation;
  double peak_keeping_all = 0;
};

StageMemory stage_memory(const Plan& plan, const CostModel& cost, const Recompute& recompute,
                         int p) {
  const int n = static_cast<int>(plan.chunks.size());
  StageMemory memory;
  memory.activation.resize(n);
  for (int c = 0; c < n; ++c)
    memory.activation[c] =
        cost.activation_bytes(plan.chunks[c], p, recompute_layers(recompute, p, c));
  memory.peak_keeping_all =
      walk_offload(plan.schedule, p, plan.chunks, cost, memory.activation, -1, 1).peak_bytes;
  return memory;
}

// How many of its latest forwards' chunks stage p can keep within `budget` (-1: every chunk
// fits, 0: not even one does), and in `peak` the peak of the tightest count tried.
int resident_that_fits(const Plan& plan, const CostModel& cost, const StageMemory& memory, int p,
                       int prefetch, double budget, double& peak) {
  peak = memory.peak_keeping_all;
  if (peak <= budget) return -1;
  // The peak grows with the resident count (the kept sets only grow), so bisect for the largest.
  int low = 0, high = static_cast<int>(plan.chunks.size());  // fits with `low`, not with `high`
  while (high - low > 1) {
    const int mid = (low + high) / 2;
    const double bytes =
        walk_offload(plan.schedule, p, plan.chunks, cost, memory.activation, mid, prefetch)
            .peak_bytes;
    if (bytes <= budget) {
      low = mid;
    } else {
      high = mid;
      peak = bytes;
    }
  }
  return low;
}

}  // namespace

OffloadPlan plan_offload(const Plan& plan, const CostModel& cost, const OffloadOptions& options) {
  check(options.host_link_bandwidth > 0,
        "plan_offload: the hardware gives no host link bandwidth (Hardware::host_link_bandwidth)");
  check(options.max_prefetch >= 1, "plan_offload: max_prefetch must be at least 1");
  const int g = options.gpus_per_host_link, sp = cost.layout().sequence;
  check(g >= 1 && (g % sp == 0 || sp % g == 0),
        "plan_offload: " + std::to_string(g) + " GPUs per host link and " + std::to_string(sp) +
            " sequence-parallel ranks per stage: one must divide the other");
  const int d = plan.schedule.num_stages();
  OffloadPlan best;
  best.reason = "no setting tried";
  double tightest = -1;
  const bool has_recompute = [&] {
    for (const auto& stage : plan.recompute)
      for (int layers : stage)
        if (layers > 0) return true;
    return false;
  }();
  for (const bool keep : {false, true}) {
    if (keep && !has_recompute) continue;
    const Recompute recompute = keep ? plan.recompute : Recompute{};
    std::vector<StageMemory> memory;
    for (int p = 0; p < d; ++p) memory.push_back(stage_memory(plan, cost, recompute, p));
    for (int prefetch = 1; prefetch <= options.max_prefetch; ++prefetch) {
      Offload offload;
      offload.prefetch = prefetch;
      offload.bytes_per_s = options.host_link_bandwidth / std::min(sp, g);
      offload.stages_per_link = std::max(1, g / sp);
      offload.resident.assign(d, -1);
      bool fits = true;
      for (int p = 0; p < d && fits; ++p) {
        double peak = 0;
        offload.resident[p] = resident_that_fits(plan, cost, memory[p], p, prefetch,
                                                 options.memory_budget_bytes, peak);
        if (offload.resident[p] != 0) continue;
        fits = false;
        if (!best.fits && peak > tightest) {
          tightest = peak;
          best.reason =
              "stage " + std::to_string(p) + " needs " + gib_text(peak) + " keeping one chunk";
          best.reason += keep ? " with the plan's recompute" : " without recompute";
        }
      }
      if (!fits) continue;
      SimOptions sim_options;
      sim_options.memory_budget_bytes = options.memory_budget_bytes;
      sim_options.record_events = false;
      sim_options.offload = &offload;
      SimResult sim = simulate(plan.schedule, plan.chunks, cost, recompute, sim_options);
      ++best.candidates;
      // A stage that offloads nothing is measured the simulator's way, whose sums may round
      // differently from the walk's by a last bit.
      if (sim.over_budget) continue;
      if (best.fits && sim.step_time_s >= best.step_time_s) continue;
      best.fits = true;
      best.reason.clear();
      best.step_time_s = sim.step_time_s;
      best.offload = offload;
      best.recompute_kept = keep;
      best.sim = std::move(sim);
    }
  }
  return best;
}

}  // namespace infinipipe
