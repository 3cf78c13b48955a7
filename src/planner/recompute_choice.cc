#include "recompute_choice.h"

#include "planner_support.h"

namespace infinipipe::planning {

// One method's answer on one schedule: solved, and simulated when it fits in bytes.
struct SolveMemo::Solved {
  RecomputeResult checkpoint;
  SimResult sim;
  int64_t work = 0;  // what solving and simulating added to search_work()
};

// The last few answers, with everything they were computed from. Every input is compared, not
// hashed: an answer is reused only for the same method, cost model, options, chunks and
// schedule, so it is what a new solve would give, bit for bit.
struct SolveMemo::Entry {
  RecomputeMethod method;
  const CostModel* cost;
  double budget, time_limit;
  std::vector<Chunk> chunks;
  Schedule schedule;
  Solved solved;
};

namespace {

SolveMemo*& active_memo() {
  thread_local SolveMemo* memo = nullptr;
  return memo;
}

// At most this many answers are kept (the repeats seen are of the schedule just solved).
constexpr size_t kMemoEntries = 4;

}  // namespace

SolveMemo::SolveMemo() : outer_(active_memo()) { active_memo() = this; }
SolveMemo::~SolveMemo() { active_memo() = outer_; }

SolveMemo::Solved SolveMemo::solve(const Schedule& schedule, const std::vector<Chunk>& chunks,
                                   RecomputeMethod method, const CostModel& cost,
                                   const PlannerOptions& options) {
  const int64_t work_before = search_work();
  Solved out;
  out.checkpoint = plan_recompute(schedule, chunks, cost, recompute_options(method, options));
  search_work() += static_cast<int64_t>(chunks.size()) * schedule.num_stages();
  if (out.checkpoint.feasible)
    out.sim = predict_checked(schedule, chunks, cost, out.checkpoint, options.memory_budget_bytes);
  out.work = search_work() - work_before;
  return out;
}

SolveMemo::Solved SolveMemo::solved(const Schedule& schedule, const std::vector<Chunk>& chunks,
                                    RecomputeMethod method, const CostModel& cost,
                                    const PlannerOptions& options) {
  SolveMemo* memo = active_memo();
  if (!memo) return solve(schedule, chunks, method, cost, options);
  for (const Entry& e : memo->entries_)
    if (e.method == method && e.cost == &cost && e.budget == options.memory_budget_bytes &&
        e.time_limit == options.recompute_time_limit_s && same_chunks(e.chunks, chunks) &&
        e.schedule.stages == schedule.stages) {
      search_work() += e.solved.work;  // as the solve would have counted it
      return e.solved;
    }
  Solved out = solve(schedule, chunks, method, cost, options);
  if (memo->entries_.size() == kMemoEntries) memo->entries_.erase(memo->entries_.begin());
  memo->entries_.push_back({method, &cost, options.memory_budget_bytes,
                            options.recompute_time_limit_s, chunks, schedule, out});
  return out;
}

RecomputeOptions recompute_options(RecomputeMethod method, const PlannerOptions& options) {
  RecomputeOptions ck;
  ck.method = method;
  ck.memory_budget_bytes = options.memory_budget_bytes;
  ck.time_limit_s = options.recompute_time_limit_s;
  return ck;
}

bool best_recompute(const Schedule& schedule, const std::vector<Chunk>& chunks,
                    const std::vector<RecomputeMethod>& methods, const CostModel& cost,
                    const PlannerOptions& options, RecomputeResult& checkpoint, SimResult& sim,
                    std::string& reason) {
  bool found = false;
  for (RecomputeMethod method : methods) {
    check_not_cancelled(options);
    SolveMemo::Solved answer = SolveMemo::solved(schedule, chunks, method, cost, options);
    RecomputeResult& solved = answer.checkpoint;
    if (!solved.feasible) {
      if (reason.empty()) reason = solved.reason;
      continue;
    }
    SimResult& simulated = answer.sim;
    if (simulated.over_budget) {
      if (reason.empty()) reason = simulated.over_budget_message;
      continue;
    }
    if (found && simulated.step_time_s >= sim.step_time_s) continue;
    // Name which program won, tied or not: the solvers' own names do not say.
    if (method == RecomputeMethod::kStageAware || method == RecomputeMethod::kStageAwareGreedy) {
      if (solved.solver.rfind("untied", 0) != 0 && solved.solver != "none needed")
        solved.solver = "tied " + solved.solver;
    }
    checkpoint = std::move(solved);
    sim = std::move(simulated);
    found = true;
  }
  return found;
}

// search_recompute tries the untied greedy within this fraction of the time to beat.
constexpr double kUntiedWithin = 0.03;

bool search_recompute(Candidate& cand, double time_to_beat, const CostModel& cost,
                      const PlannerOptions& options, std::string& why) {
  if (!best_recompute(cand.schedule, cand.chunks, {RecomputeMethod::kStageAwareGreedy}, cost,
                      options, cand.checkpoint, cand.sim, why))
    return best_recompute(cand.schedule, cand.chunks, {RecomputeMethod::kUntiedGreedy}, cost,
                          options, cand.checkpoint, cand.sim, why);
  if (cand.checkpoint.recompute_s > 0 &&
      cand.sim.step_time_s < time_to_beat * (1 + kUntiedWithin)) {
    RecomputeResult untied;
    SimResult sim;
    std::string ignored;
    if (best_recompute(cand.schedule, cand.chunks, {RecomputeMethod::kUntiedGreedy}, cost, options,
                       untied, sim, ignored) &&
        sim.step_time_s < cand.sim.step_time_s) {
      cand.checkpoint = std::move(untied);
      cand.sim = std::move(sim);
    }
  }
  return true;
}

void choose_recompute(Candidate& cand, const std::vector<RecomputeMethod>& methods,
                      const CostModel& cost, const PlannerOptions& options) {
  if (cand.checkpoint.recompute_s == 0) return;  // nothing to recompute, nothing to choose
  std::vector<RecomputeMethod> allowed;
  for (RecomputeMethod m : methods)  // CBC's time limit makes its answer load-dependent
    if (m != RecomputeMethod::kStageAware || options.recompute_time_limit_s > 0)
      allowed.push_back(m);
  if (allowed.empty()) return;
  RecomputeResult checkpoint;
  SimResult sim;
  std::string reason;
  if (!best_recompute(cand.schedule, cand.chunks, allowed, cost, options, checkpoint, sim, reason))
    return;
  if (sim.step_time_s < cand.sim.step_time_s) {
    cand.checkpoint = std::move(checkpoint);
    cand.sim = std::move(sim);
  }
}

}  // namespace infinipipe::planning
