// Chooses how many layers every (stage, chunk) recomputes, by the method asked for, and never
// returns an assignment as feasible before checking it in bytes against every moment.
#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "infinipipe/core/error.h"
#include "infinipipe/recompute/memory_check.h"
#include "infinipipe/recompute/recompute_planner.h"
#include "problem_tools.h"

namespace infinipipe {
namespace {

double recompute_seconds(const std::vector<Chunk>& chunks, const CostModel& cost,
                         const Recompute& recompute) {
  double total = 0;
  for (size_t k = 0; k < chunks.size(); ++k) {
    int layers = 0;
    double alltoall = 0;  // recomputed layers repeat their forward all-to-alls (0 with d_s = 1)
    for (size_t p = 0; p < recompute.size(); ++p) {
      layers += recompute[p][k];
      if (recompute[p][k] > 0)
        alltoall += recompute[p][k] * cost.layer_alltoall_time(chunks[k], static_cast<int>(p));
    }
    if (layers > 0) total += layers * cost.layer_recompute_time(chunks[k]) + alltoall;
  }
  return total;
}

Recompute from_variables(const TiedProblem& problem, const std::vector<int>& values) {
  Recompute recompute(problem.var_of.size());
  for (size_t p = 0; p < problem.var_of.size(); ++p)
    for (int j : problem.var_of[p]) recompute[p].push_back(values[j]);
  return recompute;
}

// Fills recompute_s, and feasibility from the byte check; the reason says which moment failed.
RecomputeResult finish(RecomputeResult result, const MemoryCheck& memory,
                       const std::vector<Chunk>& chunks, const CostModel& cost) {
  result.recompute_s = recompute_seconds(chunks, cost, result.recompute);
  const MemoryViolation violation = memory.worst_violation(result.recompute, &result.peaks);
  result.feasible = violation.stage < 0;
  if (!result.feasible && result.reason.empty())
    result.reason =
        memory.describe(violation, "the " + result.solver + " recompute assignment does not fit");
  return result;
}

// Why nothing fits: even recomputing every layer leaves some moment over budget.
RecomputeResult infeasible(const MemoryCheck& memory, const std::string& solver) {
  RecomputeResult result;
  result.solver = solver;
  result.recompute = memory.full_recompute();
  const MemoryViolation violation = memory.worst_violation(result.recompute);
  if (violation.stage >= 0)
    result.reason = memory.describe(
        violation, "the step does not fit in memory even with every layer recomputed");
  else
    result.reason = "the " + solver +
                    " method found no assignment although recomputing every layer fits; " +
                    "use checkpointing method full or uniform";
  return result;
}

// `unsatisfiable`: first_unsatisfiable_row(problem) >= 0 when the caller has made that pass over
// every row's entries already (stage_aware, on every wave the grouping DP weighs).
RecomputeResult solve_problem(const TiedProblem& problem, const MemoryCheck& memory,
                              const std::vector<Chunk>& chunks, const CostModel& cost,
                              bool use_milp, double time_limit_s,
                              const bool* unsatisfiable = nullptr) {
  RecomputeResult result;
  if (problem.rows.empty()) {
    result.solver = "none needed";
    result.recompute = memory.no_recompute();
    return finish(result, memory, chunks, cost);
  }
  if (unsatisfiable ? *unsatisfiable : first_unsatisfiable_row(problem) >= 0)
    return infeasible(memory, use_milp ? "cbc" : "greedy");
  const TiedSolution solution =
      use_milp ? solve_milp(problem, time_limit_s) : solve_greedy(problem);
  if (!solution.feasible) return infeasible(memory, solution.solver);
  result.solver = solution.solver;
  result.recompute = from_variables(problem, solution.values);
  return finish(result, memory, chunks, cost);
}

RecomputeResult stage_aware(const Schedule& schedule, const std::vector<Chunk>& chunks,
                            const CostModel& cost, const RecomputeOptions& options,
                            const MemoryCheck& memory, bool use_milp) {
  const double budget = options.memory_budget_bytes;
  const TiedProblem problem = build_tied_problem(schedule, chunks, cost, budget, memory.moments());
  const bool unsatisfiable = first_unsatisfiable_row(problem) >= 0;
  if (unsatisfiable && memory.fits(memory.full_recompute())) {
    // A diagonal is capped by the smallest stage it crosses, so with uneven layer counts tying
    // can rule out an assignment that full recompute shows exists: solve untied instead.
    const TiedProblem untied =
        build_untied_problem(schedule, chunks, cost, budget, memory.moments());
    RecomputeResult result =
        solve_problem(untied, memory, chunks, cost, false, options.time_limit_s);
    result.solver = "untied greedy (diagonal bounds too tight)";
    return result;
  }
  return solve_problem(problem, memory, chunks, cost, use_milp, options.time_limit_s,
                       &unsatisfiable);
}

RecomputeResult uniform(const MemoryCheck& memory, const CostModel& cost,
                        const std::vector<Chunk>& chunks) {
  int most = 0;
  for (int l : cost.layers_per_stage()) most = std::max(most, l);
  if (!memory.fits(memory.uniform_recompute(most))) return infeasible(memory, "uniform");
  // Memory falls as the count rises whenever a checkpointed layer keeps less than a full one,
  // so bisect for the smallest count; the answer is checked in bytes either way.
  int low = 0, high = most;  // high always fits
  while (low < high) {
    const int mid = (low + high) / 2;
    if (memory.fits(memory.uniform_recompute(mid)))
      high = mid;
    else
      low = mid + 1;
  }
  RecomputeResult result;
  result.solver = "uniform";
  result.recompute = memory.uniform_recompute(high);
  return finish(result, memory, chunks, cost);
}

}  // namespace

RecomputeResult plan_recompute(const Schedule& schedule, const std::vector<Chunk>& chunks,
                               const CostModel& cost, const RecomputeOptions& options) {
  check(options.memory_budget_bytes > 0 && std::isfinite(options.memory_budget_bytes),
        "checkpoint planning: the memory budget must be a positive number of bytes, got " +
            std::to_string(options.memory_budget_bytes));
  check(cost.num_stages() == schedule.num_stages(),
        "checkpoint planning: the schedule has " + std::to_string(schedule.num_stages()) +
            " stages but the cost model " + std::to_string(cost.num_stages()) +
            "; build both for the same pipeline");
  const MemoryCheck memory(schedule, chunks, cost, options.memory_budget_bytes);

  switch (options.method) {
    case RecomputeMethod::kNone: {
      RecomputeResult result;
      result.solver = "none";
      result.recompute = memory.no_recompute();
      result = finish(result, memory, chunks, cost);
      if (!result.feasible) {
        const MemoryViolation violation = memory.worst_violation(result.recompute);
        result.reason = memory.describe(
            violation,
            "the step does not fit in memory without recompute (choose a checkpointing method)");
      }
      return result;
    }
    case RecomputeMethod::kFull: {
      RecomputeResult result;
      result.solver = "full";
      result.recompute = memory.full_recompute();
      result = finish(result, memory, chunks, cost);
      if (!result.feasible) result.reason = infeasible(memory, "full").reason;
      return result;
    }
    case RecomputeMethod::kUniform:
      return uniform(memory, cost, chunks);
    case RecomputeMethod::kStageAware:
      return stage_aware(schedule, chunks, cost, options, memory, true);
    case RecomputeMethod::kStageAwareGreedy:
      return stage_aware(schedule, chunks, cost, options, memory, false);
    case RecomputeMethod::kUntiedGreedy: {
      const TiedProblem problem = build_untied_problem(
          schedule, chunks, cost, options.memory_budget_bytes, memory.moments());
      RecomputeResult result =
          solve_problem(problem, memory, chunks, cost, false, options.time_limit_s);
      if (result.solver == "greedy") result.solver = "untied greedy";
      return result;
    }
  }
  throw Error("checkpoint planning: unknown checkpointing method");
}

}  // namespace infinipipe
