#include "infinipipe/planner/v_shape_plan.h"

#include "infinipipe/core/error.h"
#include "infinipipe/schedule/placement.h"

namespace infinipipe {

CostModel v_shape_cost(const CostModel& cost, bool first_half_larger) {
  const int d = cost.num_stages();
  const ParallelLayout& layout = cost.layout();
  check(layout.data == 1, "V shape: a pipeline with " + std::to_string(layout.data) +
                              " replicas; the what-if takes one (its links are laid out in a row)");
  for (int p = 0; p + 1 < d; ++p)
    check(!layout.boundary_crosses_nodes(p, d),
          "V shape: the pipeline crosses nodes between stages " + std::to_string(p) + " and " +
              std::to_string(p + 1) + "; the what-if takes a pipeline inside one node");
  std::vector<int> layers(2 * static_cast<size_t>(d));
  for (int r = 0; r < d; ++r) {
    const int l = cost.layers(r);
    check(l >= 2, "V shape: rank " + std::to_string(r) + " has " + std::to_string(l) +
                      " layer; each rank's layers are cut into two stages, so it needs 2");
    layers[r] = first_half_larger ? (l + 1) / 2 : l / 2;
    layers[2 * d - 1 - r] = l - layers[r];
  }
  CostModel out(cost.shape(), layers, cost.coefficients(), layout);
  if (cost.ideal_even_head()) out = out.with_ideal_even_head();
  return out;
}

VShapePlan plan_v_shape(const Plan& plan, const CostModel& cost, const VShapeOptions& options) {
  const int d = cost.num_stages();
  const int n = static_cast<int>(plan.chunks.size());
  const std::vector<int> rank_of = v_shape(d);
  VShapePlan best;
  double tightest = 0;  // the least bytes over budget among candidates that did not fit
  for (bool first_half_larger : {true, false}) {
    const CostModel logical = v_shape_cost(cost, first_half_larger);
    for (ZeroBubble mode : {ZeroBubble::kOff, ZeroBubble::kH1, ZeroBubble::kH2}) {
      for (int extra = 0; extra <= options.max_extra_warmup; ++extra) {
        ScheduleOptions schedule_options;
        schedule_options.num_stages = 2 * d;
        schedule_options.overlap_waves = waves_overlap(plan.schedule, plan.waves);
        schedule_options.zero_bubble = mode;
        // ZB-H2 without a count takes h2_extra_warmup: 0 is ZB-H1's warm-up, written as such.
        if (mode == ZeroBubble::kH2 && extra == 0) continue;
        schedule_options.extra_warmup = extra;
        const Schedule built = build_schedule(plan.chunks, plan.waves, schedule_options);
        // Orders tried: the merge without time, then merges guided by start times: the stages'
        // own when each has a rank (no contention), then twice the last placement's.
        SimOptions timing;
        timing.record_events = false;
        timing.record_starts = true;
        std::vector<Schedule> orders = {place_on_ranks(built, rank_of, n)};
        orders.push_back(place_on_ranks(built, rank_of, n,
                                        simulate(built, plan.chunks, logical, {}, timing).start_s));
        for (int again = 0; again < 2; ++again)
          orders.push_back(
              place_on_ranks(built, rank_of, n,
                             simulate(orders.back(), plan.chunks, logical, {}, timing).start_s));
        for (const Schedule& placed : orders) {
          SimOptions sim_options;
          sim_options.memory_budget_bytes = options.memory_budget_bytes;
          sim_options.record_events = false;
          SimResult sim = simulate(placed, plan.chunks, logical, {}, sim_options);
          ++best.candidates;
          if (sim.over_budget) {
            double over = 0;
            for (double bytes : sim.rank_peak_memory_bytes)
              over = std::max(over, bytes - options.memory_budget_bytes);
            if (!best.fits && (best.reason.empty() || over < tightest)) {
              tightest = over;
              best.reason = sim.over_budget_message;
            }
            continue;
          }
          if (best.fits && sim.step_time_s >= best.step_time_s) continue;
          best.fits = true;
          best.reason.clear();
          best.step_time_s = sim.step_time_s;
          best.zero_bubble = mode;
          best.extra_warmup = extra;
          best.layers_per_stage = logical.layers_per_stage();
          best.schedule = placed;
          best.sim = std::move(sim);
        }
      }
    }
  }
  return best;
}

}  // namespace infinipipe
