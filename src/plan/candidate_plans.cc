#include "candidate_plans.h"

#include <algorithm>

#include "infinipipe/schedule/scheduler.h"
#include "planner_support.h"
#include "recompute_choice.h"
#include "wave_grouping.h"

namespace infinipipe::planning {

void one_wave_without_recompute(Candidate& cand, const CostModel& cost,
                                const PlannerOptions& options) {
  ScheduleOptions schedule_options;
  schedule_options.num_stages = options.num_stages;
  cand.waves = {all_chunks(cand.chunks.size())};
  cand.schedule = build_schedule(cand.chunks, cand.waves, schedule_options);
  cand.checkpoint = CheckpointResult{};
  cand.checkpoint.feasible = true;
  cand.checkpoint.solver = "none needed";
  cand.checkpoint.recompute.assign(cost.num_stages(), std::vector<int>(cand.chunks.size(), 0));
  cand.sim = predict(cand.schedule, cand.chunks, cost, cand.checkpoint.recompute,
                     options.memory_budget_bytes);
  cand.optimistic = cand.sim.step_time_s;
  cand.simulated = true;
  // The simulated peaks count buffers and workspaces too.
  for (size_t p = 0; p < cand.excess.size(); ++p) {
    cand.excess[p] =
        std::max(cand.excess[p], cand.sim.peak_memory_bytes[p] - options.memory_budget_bytes);
    if (cand.excess[p] > 0 && cand.saving_rate[p] > 0)
      cand.recompute_floor[p] =
          std::max(cand.recompute_floor[p], cand.excess[p] / cand.saving_rate[p]);
  }
  cand.key = search_key(cand);
}

bool one_wave_with_recompute(Candidate& cand, double time_to_beat, const CostModel& cost,
                             const PlannerOptions& options, std::string& reason) {
  ScheduleOptions schedule_options;
  schedule_options.num_stages = options.num_stages;
  cand.waves = {all_chunks(cand.chunks.size())};
  cand.schedule = build_schedule(cand.chunks, cand.waves, schedule_options);
  std::string why;
  if (search_checkpointing(cand, time_to_beat, cost, options, why)) return true;
  reason = label(cand.setting) + ": " + why;
  return false;
}

bool several_chain_lengths(const std::vector<Chunk>& chunks) {
  size_t first = 0;
  for (const std::vector<int>& chain : chains(chunks)) {
    if (first == 0) first = chain.size();
    if (chain.size() != first) return true;
  }
  return false;
}

bool recompute_cannot_fit(const Candidate& cand, const CostModel& cost,
                          const PlannerOptions& options, std::string& reason) {
  if (chains(cand.chunks).size() != 1) return false;
  for (int p = 0; p < cost.num_stages(); ++p)
    for (const Chunk& chunk : cand.chunks)
      if (cost.checkpoint_saving_bytes(chunk, p) <= 0) return false;
  const CheckpointResult full = plan_checkpointing(
      cand.schedule, cand.chunks, cost, checkpoint_options(CheckpointMethod::kFull, options));
  if (full.feasible) return false;
  reason = label(cand.setting) + ": " + full.reason;
  return true;
}

bool plan_with_recompute(Candidate& cand, double time_to_beat, bool may_group,
                         const CostModel& cost, const PlannerOptions& options, std::string& reason,
                         bool& grouped) {
  Candidate one = cand;
  const bool one_fits = one_wave_key(cand) < time_to_beat &&
                        one_wave_with_recompute(one, time_to_beat, cost, options, reason);
  const double goal = one_fits ? std::min(time_to_beat, one.sim.step_time_s) : time_to_beat;
  Candidate waves = cand;
  // The DP groups chains by length: with one length it can only make the one wave again (the
  // same schedule and solvers), which costs as much as the whole step's recompute choice. One
  // 2M-token sequence (`infinipipe-plan --model tiny --hardware cpu --stages 2 --memory-gib 64
  // --method epp`) spent 73 s in its first candidate, mostly there (issue 15).
  grouped =
      may_group && several_chain_lengths(cand.chunks) && (!one_fits || waves_key(cand) < goal);
  const bool waves_fit = grouped && grouped_waves(waves, goal, cost, options, reason);
  if (!one_fits && !waves_fit) return false;
  cand = (waves_fit && (!one_fits || waves.sim.step_time_s < one.sim.step_time_s))
             ? std::move(waves)
             : std::move(one);
  return true;
}

}  // namespace infinipipe::planning
