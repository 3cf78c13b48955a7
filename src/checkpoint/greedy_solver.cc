// Greedy covering for the checkpointing program: raise the variable that covers the most
// still-needed bytes per second of recompute until every row holds, then lower what turned out
// unnecessary. It runs inside the planner's sweep, so every step is incremental: raising a
// variable only touches the rows it appears in and the scores of their variables.
#include <algorithm>
#include <numeric>
#include <vector>

#include "infinipipe/checkpoint/checkpoint_planner.h"
#include "problem_tools.h"
#include "tournament.h"

namespace infinipipe {
namespace {

struct Entry {
  int row;
  double coef;
};
struct Span {
  const Entry* first;
  const Entry* last;
  const Entry* begin() const { return first; }
  const Entry* end() const { return last; }
};

// Bytes a variable's next increment covers in a row still short by `remaining`.
inline double covered(double coef, double remaining) {
  return remaining > 0 ? std::min(coef, remaining) : 0;
}

// Free recompute goes first; among free variables the larger score still wins (scores stay
// below 1e15 bytes, so the product cannot overflow).
inline double inverse_cost(double cost) { return cost > 0 ? 1 / cost : 1e200; }

}  // namespace

TiedSolution solve_greedy(const TiedProblem& problem) {
  check_variable_shape(problem);
  const int num_vars = static_cast<int>(problem.upper.size());
  const int num_rows = static_cast<int>(problem.rows.size());

  // Column-major copy (compressed: column j is entries[start[j] .. start[j+1])), each row's shape
  // checked as it is counted (check_problem_shape's answer, without a pass of its own).
  std::vector<int> start(num_vars + 1, 0);
  std::vector<double> max_coef(num_rows, 0);
  for (int r = 0; r < num_rows; ++r) {
    const TiedProblem::Row& row = problem.rows[r];
    if (row.var.size() != row.coef.size()) throw_bad_row(r, true);
    for (size_t i = 0; i < row.var.size(); ++i) {
      if (!entry_in_shape(row.var[i], row.coef[i], num_vars)) throw_bad_row(r, false);
      ++start[row.var[i] + 1];
      max_coef[r] = std::max(max_coef[r], row.coef[i]);
    }
  }
  for (int j = 0; j < num_vars; ++j) start[j + 1] += start[j];
  std::vector<Entry> entries(start[num_vars]);
  {
    std::vector<int> fill(start.begin(), start.end() - 1);
    for (int r = 0; r < num_rows; ++r) {
      const TiedProblem::Row& row = problem.rows[r];
      for (size_t i = 0; i < row.var.size(); ++i) entries[fill[row.var[i]]++] = {r, row.coef[i]};
    }
  }
  auto column = [&](int j) {
    return Span{entries.data() + start[j], entries.data() + start[j + 1]};
  };

  // remaining[r] > 0 exactly while row r is violated (the tolerance is folded in here).
  std::vector<double> remaining(num_rows);
  for (int r = 0; r < num_rows; ++r)
    remaining[r] = problem.rows[r].need - row_tolerance(problem.rows[r].need);
  std::vector<double> score(num_vars, 0);
  int violated = 0;
  for (int r = 0; r < num_rows; ++r) {
    if (remaining[r] <= 0) continue;
    ++violated;
    const TiedProblem::Row& row = problem.rows[r];
    for (size_t i = 0; i < row.var.size(); ++i)
      score[row.var[i]] += covered(row.coef[i], remaining[r]);
  }

  // Bytes covered per second of recompute, 0 for variables at their bound: kept in one flat
  // array because finding its maximum is the inner loop.
  std::vector<double> inv_cost(num_vars), priority(num_vars);
  std::vector<int> values(num_vars, 0);
  for (int j = 0; j < num_vars; ++j) {
    inv_cost[j] = inverse_cost(problem.cost[j]);
    priority[j] = problem.upper[j] > 0 ? score[j] * inv_cost[j] : 0;
  }
  Tournament tournament(priority);
  while (violated > 0) {
    const int pick = tournament.best();
    if (num_vars == 0 || !(priority[pick] > 0)) break;  // violated rows nobody can help: infeasible
    ++values[pick];
    if (values[pick] >= problem.upper[pick]) {
      priority[pick] = 0;
      tournament.update(pick);
    }
    for (const Entry& e : column(pick)) {
      const double before = remaining[e.row];
      const double after = before - e.coef;
      // Kept for satisfied rows too: the clean-up below reads the slack from it, and must see
      // what later picks added to a row an earlier pick satisfied.
      remaining[e.row] = after;
      if (before <= 0) continue;
      if (after <= 0) --violated;
      // While the row still needs more than any single increment gives, no score in it changes.
      if (after >= max_coef[e.row]) continue;
      const TiedProblem::Row& row = problem.rows[e.row];
      for (size_t i = 0; i < row.var.size(); ++i) {
        const int v = row.var[i];
        const double change = covered(row.coef[i], after) - covered(row.coef[i], before);
        // Covering no less than its coefficient before and after: its score, so its priority,
        // stays as it is (adding 0 to a score, never -0, changes no bit).
        if (change == 0) continue;
        score[v] += change;
        if (values[v] < problem.upper[v]) {
          priority[v] = score[v] > 0 ? score[v] * inv_cost[v] : 0;
          tournament.update(v);
        }
      }
    }
  }

  TiedSolution solution;
  solution.solver = "greedy";
  if (violated > 0) {
    solution.values = problem.upper;
    solution.objective = solution_objective(problem, solution.values);
    return solution;
  }

  // Later picks can make earlier ones unnecessary; lower the dearest first, keeping every row.
  std::vector<int> before_cleanup = values;
  std::vector<double> slack(num_rows);  // lhs - need + tolerance: >= 0 means satisfied
  for (int r = 0; r < num_rows; ++r) slack[r] = -remaining[r];
  std::vector<int> by_cost(num_vars);
  std::iota(by_cost.begin(), by_cost.end(), 0);
  std::stable_sort(by_cost.begin(), by_cost.end(),
                   [&](int a, int b) { return problem.cost[a] > problem.cost[b]; });
  for (int j : by_cost) {
    while (values[j] > 0) {
      bool removable = true;
      for (const Entry& e : column(j))
        if (slack[e.row] < e.coef) {
          removable = false;
          break;
        }
      if (!removable) break;
      --values[j];
      for (const Entry& e : column(j)) slack[e.row] -= e.coef;
    }
  }

  solution.values = std::move(values);
  solution.feasible = solution_feasible(problem, solution.values);
  if (!solution.feasible) {  // incremental sums drifted past the tolerance: keep the safe answer
    solution.values = std::move(before_cleanup);
    solution.feasible = solution_feasible(problem, solution.values);
  }
  solution.objective = solution_objective(problem, solution.values);
  return solution;
}

}  // namespace infinipipe
