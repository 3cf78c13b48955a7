// The checkpointing program solved exactly by CBC (COIN-OR branch and cut) through its C
// interface, warm-started from the greedy answer, with a time limit and limits in work (the
// program's size, branch-and-bound nodes). CBC's answer is rounded and
// checked in bytes here, never trusted as is; the greedy answer stands in whenever CBC has none.
#include <algorithm>
#include <cmath>
#include <memory>
#include <vector>

#include <coin/Cbc_C_Interface.h>

#include "infinipipe/recompute/recompute_planner.h"
#include "problem_tools.h"

namespace infinipipe {
namespace {

// CBC's wall-clock limit is checked between its phases, not inside them, and a large program's
// root LP alone can take minutes: on one 256K-token sequence of LLaMA-7B on 16 stages (`build/
// infinipipe-plan --model llama-7b --hardware a800 --stages 16 --memory-gib 80 --method epp`) a
// program of 12,824,323 nonzeros ran 21 s at a 0.05 s limit, and one of about 27 million (before
// cap_mesh_slices was bounded) 50 s; the largest of the default comparison (`--distribution
// wikipedia --batch 512 --context 98304 --model llama-13b --hardware a800 --stages 8 --memory-gib
// 80 --method epp --steps 5`) has 133,246 and took 0.08 s, a LLaMA-13B 98,304-token sequence on 8
// stages at 80 GiB 476,753 and 0.19 s. Larger programs than this keep the greedy answer: a bound
// in work, the same on every machine.
constexpr int64_t kMaxCbcNonzeros = 1000000;
// Branch-and-bound nodes CBC may explore: the default comparison's programs are all solved at
// the root (0 nodes) at the plan tool's 0.05 s, but with --checkpoint-seconds 30 the
// 133,246-nonzero one explored 13,353 nodes in 46.6 s (3.5 ms each), past its 30 s limit. 500
// nodes bound such a search to about 2 s in work, whatever the time limit.
constexpr int kMaxCbcNodes = 500;

struct ModelDeleter {
  void operator()(Cbc_Model* model) const { Cbc_deleteModel(model); }
};
using ModelPtr = std::unique_ptr<Cbc_Model, ModelDeleter>;

struct CbcOutcome {
  bool has_solution = false;
  bool proven_optimal = false;
  std::vector<int> values;
};

// Rows are divided by their need (so every right-hand side is `row_lower`) and costs by the
// largest cost, keeping the LP near 1 whatever the byte and second magnitudes; bytes are
// checked afterwards by the caller.
CbcOutcome run_cbc(const TiedProblem& problem, double row_lower, double time_limit_s,
                   const std::vector<int>& warm_start) {
  const int num_vars = static_cast<int>(problem.upper.size());
  const int num_rows = static_cast<int>(problem.rows.size());

  std::vector<CoinBigIndex> start(num_vars + 1, 0);
  for (const TiedProblem::Row& row : problem.rows)
    for (int j : row.var) ++start[j + 1];
  for (int j = 0; j < num_vars; ++j) start[j + 1] += start[j];
  std::vector<int> index(start[num_vars]);
  std::vector<double> value(start[num_vars]);
  std::vector<CoinBigIndex> fill(start.begin(), start.end() - 1);
  for (int r = 0; r < num_rows; ++r) {
    const TiedProblem::Row& row = problem.rows[r];
    for (size_t i = 0; i < row.var.size(); ++i) {
      const CoinBigIndex at = fill[row.var[i]]++;
      index[at] = r;
      value[at] = row.coef[i] / row.need;
    }
  }
  const double max_cost = *std::max_element(problem.cost.begin(), problem.cost.end());
  std::vector<double> lower(num_vars, 0), upper(num_vars), objective(num_vars);
  for (int j = 0; j < num_vars; ++j) {
    upper[j] = problem.upper[j];
    objective[j] = problem.cost[j] / max_cost;
  }
  std::vector<double> row_lb(num_rows, row_lower);

  ModelPtr model(Cbc_newModel());
  Cbc_Model* m = model.get();
  Cbc_loadProblem(m, num_vars, num_rows, start.data(), index.data(), value.data(), lower.data(),
                  upper.data(), objective.data(), row_lb.data(), nullptr);
  for (int j = 0; j < num_vars; ++j) Cbc_setInteger(m, j);
  Cbc_setLogLevel(m, 0);
  // CBC 2.10's CglPreProcess::postProcess can crash (SIGSEGV) when the time limit stops the
  // search of a large instance (seen on 600-chunk steps at 0.2 s); without preprocessing it
  // returns normally. See coin-or/Cbc issues #233 and #353.
  Cbc_setParameter(m, "preprocess", "off");
  Cbc_setMaximumSeconds(m, std::max(time_limit_s, 1e-3));
  Cbc_setMaximumNodes(m, kMaxCbcNodes);
  // Distinct solutions can differ by a fraction of one cheap layer; stop only at a proven optimum.
  Cbc_setAllowableGap(m, 1e-9);
  Cbc_setAllowableFractionGap(m, 0);
  if (!warm_start.empty()) {
    std::vector<int> columns(num_vars);
    std::vector<double> start_values(num_vars);
    for (int j = 0; j < num_vars; ++j) {
      columns[j] = j;
      start_values[j] = warm_start[j];
    }
    Cbc_setMIPStartI(m, num_vars, columns.data(), start_values.data());
  }
  Cbc_solve(m);

  CbcOutcome outcome;
  const double* best = Cbc_bestSolution(m);
  if (best == nullptr) return outcome;
  outcome.has_solution = true;
  outcome.proven_optimal = Cbc_isProvenOptimal(m) != 0;
  outcome.values.resize(num_vars);
  for (int j = 0; j < num_vars; ++j)
    outcome.values[j] = std::clamp(static_cast<int>(std::lround(best[j])), 0, problem.upper[j]);
  return outcome;
}

}  // namespace

TiedSolution solve_milp(const TiedProblem& problem, double time_limit_s) {
  // The greedy answer is the warm start and the fallback, and being complete it also decides
  // feasibility: if greedy finds nothing, no assignment exists.
  TiedSolution greedy = solve_greedy(problem);
  if (!greedy.feasible || problem.rows.empty()) {
    if (problem.rows.empty()) greedy.optimal = true;  // all zeros, nothing to cover
    return greedy;
  }
  const double max_cost = *std::max_element(problem.cost.begin(), problem.cost.end());
  if (max_cost <= 0) {  // recompute is free: any feasible answer is optimal
    greedy.optimal = true;
    return greedy;
  }
  int64_t nonzeros = 0;
  for (const TiedProblem::Row& row : problem.rows) nonzeros += row.var.size();
  if (nonzeros > kMaxCbcNonzeros) {
    greedy.solver = "greedy (program too large for cbc)";
    return greedy;
  }

  // CBC accepts rows short by its primal tolerance (~1e-7 of the scaled need), more than the
  // byte tolerance; if rounding lands there, solve once more with that margin added.
  constexpr double kRetryMargin = 1e-6;
  for (int attempt = 0; attempt < 2; ++attempt) {
    const double row_lower = attempt == 0 ? 1.0 : 1.0 + kRetryMargin;
    const CbcOutcome outcome = run_cbc(problem, row_lower, time_limit_s, greedy.values);
    if (!outcome.has_solution) {
      greedy.solver = "greedy (cbc timeout)";
      return greedy;
    }
    if (!solution_feasible(problem, outcome.values)) continue;
    TiedSolution solution;
    solution.feasible = true;
    solution.values = outcome.values;
    solution.objective = solution_objective(problem, solution.values);
    solution.optimal = outcome.proven_optimal && attempt == 0;
    solution.solver = outcome.proven_optimal ? "cbc" : "cbc (time limit)";
    // Only when CBC dropped the warm start and ran out of time (the margin ignores rounding).
    if (greedy.objective < solution.objective * (1 - 1e-12)) {
      greedy.solver = "greedy (better than cbc's incumbent)";
      return greedy;
    }
    return solution;
  }
  greedy.solver = "greedy (cbc answer failed the byte check)";
  return greedy;
}

}  // namespace infinipipe
