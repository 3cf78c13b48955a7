// Every assignment of a tiny checkpointing program, for tests that prove the other solvers exact.
#include <cstdio>
#include <vector>

#include "infinipipe/core/error.h"
#include "infinipipe/recompute/recompute_planner.h"
#include "problem_tools.h"

namespace infinipipe {

TiedSolution solve_exhaustive(const TiedProblem& problem) {
  check_problem_shape(problem);
  constexpr double kMaxAssignments = 5e6;  // a few seconds at most; tests stay far below
  const int num_vars = static_cast<int>(problem.upper.size());
  double assignments = 1;
  for (int u : problem.upper) assignments *= u + 1.0;
  if (assignments > kMaxAssignments) {
    char message[200];
    std::snprintf(message, sizeof message,
                  "solve_exhaustive: %.3g assignments exceed the limit of %.3g; use solve_milp or "
                  "solve_greedy for this problem",
                  assignments, kMaxAssignments);
    throw Error(message);
  }

  std::vector<int> values(num_vars, 0);
  double objective = 0;
  TiedSolution best;
  best.solver = "exhaustive";
  while (true) {
    // Rows are summed afresh (not updated incrementally) so millions of steps cannot drift.
    if ((!best.feasible || objective < best.objective) && solution_feasible(problem, values)) {
      best.feasible = true;
      best.values = values;
      best.objective = objective;
    }
    int j = 0;  // odometer step
    for (; j < num_vars; ++j) {
      const int delta = values[j] < problem.upper[j] ? 1 : -values[j];
      values[j] += delta;
      objective += delta * problem.cost[j];
      if (delta == 1) break;
    }
    if (j == num_vars) break;
  }
  if (best.feasible) {
    // Drift-free value for comparisons with other solvers.
    best.objective = solution_objective(problem, best.values);
    best.optimal = true;
  } else {
    best.values = problem.upper;
    best.objective = solution_objective(problem, best.values);
  }
  return best;
}

}  // namespace infinipipe
