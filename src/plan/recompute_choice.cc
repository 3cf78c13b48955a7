#include "recompute_choice.h"

#include "planner_support.h"

namespace infinipipe::planning {

CheckpointOptions checkpoint_options(CheckpointMethod method, const PlannerOptions& options) {
  CheckpointOptions ck;
  ck.method = method;
  ck.memory_budget_bytes = options.memory_budget_bytes;
  ck.time_limit_s = options.checkpoint_time_limit_s;
  return ck;
}

bool best_checkpointing(const Schedule& schedule, const std::vector<Chunk>& chunks,
                        const std::vector<CheckpointMethod>& methods, const CostModel& cost,
                        const PlannerOptions& options, CheckpointResult& checkpoint, SimResult& sim,
                        std::string& reason) {
  bool found = false;
  for (CheckpointMethod method : methods) {
    check_not_cancelled(options);
    CheckpointResult solved =
        plan_checkpointing(schedule, chunks, cost, checkpoint_options(method, options));
    search_work() += static_cast<int64_t>(chunks.size()) * schedule.num_stages();
    if (!solved.feasible) {
      if (reason.empty()) reason = solved.reason;
      continue;
    }
    SimResult simulated =
        predict_checked(schedule, chunks, cost, solved, options.memory_budget_bytes);
    if (simulated.over_budget) {
      if (reason.empty()) reason = simulated.over_budget_message;
      continue;
    }
    if (found && simulated.step_time_s >= sim.step_time_s) continue;
    // Name which program won, tied or not: the solvers' own names do not say.
    if (method == CheckpointMethod::kStageAware || method == CheckpointMethod::kStageAwareGreedy) {
      if (solved.solver.rfind("untied", 0) != 0 && solved.solver != "none needed")
        solved.solver = "tied " + solved.solver;
    }
    checkpoint = std::move(solved);
    sim = std::move(simulated);
    found = true;
  }
  return found;
}

// search_checkpointing tries the untied greedy within this fraction of the time to beat.
constexpr double kUntiedWithin = 0.03;

bool search_checkpointing(Candidate& cand, double time_to_beat, const CostModel& cost,
                          const PlannerOptions& options, std::string& why) {
  if (!best_checkpointing(cand.schedule, cand.chunks, {CheckpointMethod::kStageAwareGreedy}, cost,
                          options, cand.checkpoint, cand.sim, why))
    return best_checkpointing(cand.schedule, cand.chunks, {CheckpointMethod::kUntiedGreedy}, cost,
                              options, cand.checkpoint, cand.sim, why);
  if (cand.checkpoint.recompute_s > 0 &&
      cand.sim.step_time_s < time_to_beat * (1 + kUntiedWithin)) {
    CheckpointResult untied;
    SimResult sim;
    std::string ignored;
    if (best_checkpointing(cand.schedule, cand.chunks, {CheckpointMethod::kUntiedGreedy}, cost,
                           options, untied, sim, ignored) &&
        sim.step_time_s < cand.sim.step_time_s) {
      cand.checkpoint = std::move(untied);
      cand.sim = std::move(sim);
    }
  }
  return true;
}

void choose_checkpointing(Candidate& cand, const std::vector<CheckpointMethod>& methods,
                          const CostModel& cost, const PlannerOptions& options) {
  if (cand.checkpoint.recompute_s == 0) return;  // nothing to recompute, nothing to choose
  std::vector<CheckpointMethod> allowed;
  for (CheckpointMethod m : methods)  // CBC's time limit makes its answer load-dependent
    if (m != CheckpointMethod::kStageAware || options.checkpoint_time_limit_s > 0)
      allowed.push_back(m);
  if (allowed.empty()) return;
  CheckpointResult checkpoint;
  SimResult sim;
  std::string reason;
  if (!best_checkpointing(cand.schedule, cand.chunks, allowed, cost, options, checkpoint, sim,
                          reason))
    return;
  if (sim.step_time_s < cand.sim.step_time_s) {
    cand.checkpoint = std::move(checkpoint);
    cand.sim = std::move(sim);
  }
}

}  // namespace infinipipe::planning
