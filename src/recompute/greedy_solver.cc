// Greedy covering for the checkpointing program: raise the variable that covers the most
// still-needed bytes per second of recompute until every row holds, then lower what turned out
// unnecessary. It runs inside the planner's sweep, so every step is incremental: raising a
// variable only touches the rows it appears in and the scores of their variables.
#include <algorithm>
#include <numeric>
#include <vector>

#include "infinipipe/recompute/recompute_planner.h"
#include "problem_tools.h"
#include "tournament.h"

namespace infinipipe {
namespace {

// A column's row, with its coefficient.
struct Entry {
  int index;
  double coef;
};
struct Span {
  const Entry* first;
  const Entry* last;
  const Entry* begin() const { return first; }
  const Entry* end() const { return last; }
};
// Lists in one array: list i is entries[start[i] .. start[i + 1]).
struct Lists {
  std::vector<int> start;
  std::vector<Entry> entries;
  Span operator[](int i) const {
    return Span{entries.data() + start[i], entries.data() + start[i + 1]};
  }
};

// What a rescan reads and writes of each variable of the row, kept together rather than in four
// arrays (docs/planning.md, "Search speed", eighth round).
struct Var {
  double score = 0;
  double inv_cost = 0;
  int value = 0;
  int upper = 0;
};

// Bytes a variable's next increment covers in a row still short by `remaining`.
inline double covered(double coef, double remaining) {
  return remaining > 0 ? std::min(coef, remaining) : 0;
}

// Free recompute goes first; among free variables the larger score still wins (scores stay
// below 1e15 bytes, so the product cannot overflow).
inline double inverse_cost(double cost) { return cost > 0 ? 1 / cost : 1e200; }

// The problem's columns, each row's shape checked as it is counted (check_problem_shape's
// answer, without a pass of its own), and each variable's first score: what it covers in the
// rows still short (`remaining` > 0), summed in the same order as a pass of its own would.
void read_columns(const TiedProblem& problem, const std::vector<double>& remaining, Lists& columns,
                  std::vector<double>& max_coef, std::vector<Var>& vars) {
  const int num_vars = static_cast<int>(problem.upper.size());
  const int num_rows = static_cast<int>(problem.rows.size());
  columns.start.assign(num_vars + 1, 0);
  max_coef.assign(num_rows, 0);
  for (int r = 0; r < num_rows; ++r) {
    const TiedProblem::Row& row = problem.rows[r];
    if (row.var.size() != row.coef.size()) throw_bad_row(r, true);
    for (size_t i = 0; i < row.var.size(); ++i) {
      if (!entry_in_shape(row.var[i], row.coef[i], num_vars)) throw_bad_row(r, false);
      ++columns.start[row.var[i] + 1];
      max_coef[r] = std::max(max_coef[r], row.coef[i]);
    }
  }
  for (int j = 0; j < num_vars; ++j) columns.start[j + 1] += columns.start[j];
  columns.entries.resize(columns.start[num_vars]);
  std::vector<int> fill(columns.start.begin(), columns.start.end() - 1);
  Entry* entries = columns.entries.data();
  Var* var = vars.data();
  for (int r = 0; r < num_rows; ++r) {
    const TiedProblem::Row& row = problem.rows[r];
    const int* row_var = row.var.data();
    const double* row_coef = row.coef.data();
    const size_t size = row.var.size();
    const double left = remaining[r];
    if (left > 0) {
      for (size_t i = 0; i < size; ++i) {
        entries[fill[row_var[i]]++] = {r, row_coef[i]};
        var[row_var[i]].score += covered(row_coef[i], left);
      }
    } else {
      for (size_t i = 0; i < size; ++i) entries[fill[row_var[i]]++] = {r, row_coef[i]};
    }
  }
}

class Cover {
 public:
  explicit Cover(const TiedProblem& problem) : problem_(problem) {
    const int num_rows = static_cast<int>(problem.rows.size());
    // remaining_[r] > 0 exactly while row r is violated (the tolerance is folded in here).
    remaining_.resize(num_rows);
    for (int r = 0; r < num_rows; ++r) {
      remaining_[r] = problem.rows[r].need - row_tolerance(problem.rows[r].need);
      violated_ += remaining_[r] > 0;
    }
    vars_.resize(problem.upper.size());
    read_columns(problem, remaining_, columns_, max_coef_, vars_);
    // Bytes covered per second of recompute, 0 for variables at their bound: a flat array of
    // its own because the tournament reads it.
    priority_.resize(vars_.size());
    for (size_t j = 0; j < vars_.size(); ++j) {
      Var& var = vars_[j];
      var.inv_cost = inverse_cost(problem.cost[j]);
      var.upper = problem.upper[j];
      priority_[j] = var.upper > 0 ? var.score * var.inv_cost : 0;
    }
  }

  // Raises the best variable until every row holds; false when some row cannot be helped.
  // A pick that changes no priority is the best again: when a pick's walk finds that the next
  // `quiet` picks of the same variable would change none (no row of its column comes within its
  // largest coefficient of its need, the variable stays below its bound), and the variable is
  // picked again, those picks and the one after them are made in one walk.
  bool raise() {
    Tournament tournament(priority_);
    int last = -1, quiet = 0;
    while (violated_ > 0) {
      const int pick = tournament.best();
      if (vars_.empty() || !(priority_[pick] > 0)) return false;
      quiet = raise(pick, pick == last ? quiet : 0, tournament);
      last = pick;
    }
    return true;
  }

  std::vector<int> values() const {
    std::vector<int> values(vars_.size());
    for (size_t j = 0; j < vars_.size(); ++j) values[j] = vars_[j].value;
    return values;
  }

  // Later picks can make earlier ones unnecessary; lower the dearest first, keeping every row.
  std::vector<int> clean_up() const {
    std::vector<int> values = this->values();
    const int num_vars = static_cast<int>(vars_.size());
    std::vector<double> slack(remaining_.size());  // lhs - need + tolerance: >= 0 is satisfied
    for (size_t r = 0; r < slack.size(); ++r) slack[r] = -remaining_[r];
    std::vector<int> by_cost(num_vars);
    std::iota(by_cost.begin(), by_cost.end(), 0);
    std::stable_sort(by_cost.begin(), by_cost.end(),
                     [&](int a, int b) { return problem_.cost[a] > problem_.cost[b]; });
    for (int j : by_cost) {
      while (values[j] > 0) {
        bool removable = true;
        for (const Entry& e : columns_[j])
          if (slack[e.index] < e.coef) {
            removable = false;
            break;
          }
        if (!removable) break;
        --values[j];
        for (const Entry& e : columns_[j]) slack[e.index] -= e.coef;
      }
    }
    return values;
  }

 private:
  // Makes `quiet` picks of `pick` known to change no priority, then one more as any pick is made;
  // returns how many picks after these are known to change none.
  int raise(int pick, int quiet, Tournament& tournament) {
    Var& picked = vars_[pick];
    picked.value += quiet;
    if (++picked.value >= picked.upper) {
      priority_[pick] = 0;
      tournament.update(pick);
    }
    const int most_quiet = std::max(picked.upper - 1 - picked.value, 0);
    return quiet > 0 ? walk<true>(pick, quiet, most_quiet, tournament)
                     : walk<false>(pick, 0, most_quiet, tournament);
  }

  // The rows of the picked variable's column, each lowered by its coefficient `quiet` + 1 times.
  template <bool kQuiet>
  int walk(int pick, int quiet, int next_quiet, Tournament& tournament) {
    for (const Entry& e : columns_[pick]) {
      double before = remaining_[e.index];
      // The quiet picks' subtractions, one at a time as they would have been made: bit for bit
      // the same row, and nothing else they would have done (no row of theirs came within its
      // largest coefficient of its need, so none was satisfied and no score changed).
      if constexpr (kQuiet)
        for (int k = 0; k < quiet; ++k) before -= e.coef;
      const double after = before - e.coef;
      // Kept for satisfied rows too: the clean-up reads the slack from it, and must see what
      // later picks added to a row an earlier pick satisfied.
      remaining_[e.index] = after;
      if (before <= 0) continue;
      if (after <= 0) --violated_;
      // While the row still needs more than any single increment gives, no score in it changes.
      const double most = max_coef_[e.index];
      const double spare = after - most;  // >= 0 exactly when after >= most (IEEE subtraction)
      if (spare >= 0) {
        if (next_quiet > 0) next_quiet = quiet_picks(after, spare, most, e.coef, next_quiet);
        continue;
      }
      if (after > 0) next_quiet = 0;  // the next pick would change scores in this row
      rescan(e.index, before, after, tournament);
    }
    return next_quiet;
  }

  // How many of up to `limit` further subtractions of `coef`, made one at a time, keep a row short
  // by `remaining` (= `most` + `spare`) short by `most` or more (so they change no score in it).
  static int quiet_picks(double remaining, double spare, double most, double coef, int limit) {
    // Each subtraction rounds by at most 2^-53 of `remaining`, and `spare - limit * coef` by a few
    // times 2^-53 of `remaining` when it is positive: a margin of 1e-9 of `remaining` covers all
    // of that many times over, so then every one of the subtractions leaves `most` or more.
    if (spare - limit * coef > 1e-9 * remaining) return limit;
    int k = 0;
    for (double left = remaining; k < limit; ++k) {
      left -= coef;
      if (!(left >= most)) break;
    }
    return k;
  }

  // The scores of row r's variables once it is short by `after` instead of `before` (> 0).
  void rescan(int r, double before, double after, Tournament& tournament) {
    const double covered_after = after > 0 ? after : 0;
    const TiedProblem::Row& row = problem_.rows[r];
    // Read through pointers held here: the tournament's marks grow a vector, which the compiler
    // must otherwise assume may move the row's and the variables' arrays, loading them anew for
    // every entry.
    const int* row_var = row.var.data();
    const double* row_coef = row.coef.data();
    const size_t size = row.var.size();
    Var* vars = vars_.data();
    double* priority = priority_.data();
    for (size_t i = 0; i < size; ++i) {
      const double coef = row_coef[i];
      // Covering its coefficient before and after, a variable's score stays as it is.
      if (coef <= after) continue;
      // covered(coef, after) - covered(coef, before), coef being above `after`.
      const double change = covered_after - std::min(coef, before);
      if (change == 0) continue;  // adding 0 to a score, never -0, would change no bit either
      const int v = row_var[i];
      Var& var = vars[v];
      var.score += change;
      if (var.value < var.upper) {
        priority[v] = var.score > 0 ? var.score * var.inv_cost : 0;
        tournament.update(v);
      }
    }
  }

  const TiedProblem& problem_;
  Lists columns_;
  std::vector<double> max_coef_, remaining_, priority_;
  std::vector<Var> vars_;
  int violated_ = 0;
};

}  // namespace

TiedSolution solve_greedy(const TiedProblem& problem) {
  check_variable_shape(problem);
  Cover cover(problem);
  TiedSolution solution;
  solution.solver = "greedy";
  if (!cover.raise()) {  // violated rows nobody can help: infeasible
    solution.values = problem.upper;
    solution.objective = solution_objective(problem, solution.values);
    return solution;
  }
  solution.values = cover.clean_up();
  solution.feasible = solution_feasible(problem, solution.values);
  if (!solution.feasible) {  // incremental sums drifted past the tolerance: keep the safe answer
    solution.values = cover.values();
    solution.feasible = solution_feasible(problem, solution.values);
  }
  solution.objective = solution_objective(problem, solution.values);
  return solution;
}

}  // namespace infinipipe
