#pragma once
// Stage-aware, chunk-level checkpointing: how many layers each (stage, chunk) recomputes, so
// every stage fits its memory budget at every moment at the least recompute.
//
// Diagonal tying: chunk k at position k' of the (stage-independent) backward order gets
//   recompute(p, k) = C[k' + d - 1 - p]
// so recompute on one stage lines up with the delay it causes on the others. That leaves
// n + d - 1 integer variables. The integer program:
//   minimise    sum_j cost[j] * C[j]
//   subject to  fixed(p, t) + sum_{k in flight at t} (act(p, k) - saving(p, k) * C[j(p, k)]) <=
//   budget
//               0 <= C[j] <= upper[j]  (the fewest layers of the stages the diagonal touches)
// where cost[j] is the largest per-layer forward time on diagonal j (its delay to the pipeline),
// plus 1e-6 of the diagonal's summed layer time to break ties toward less total recompute.
#include <string>
#include <vector>

#include "infinipipe/core/chunk.h"
#include "infinipipe/core/recompute.h"
#include "infinipipe/cost/cost_model.h"
#include "infinipipe/schedule/action.h"
#include "infinipipe/sim/memory_timeline.h"

namespace infinipipe {

// The integer program above in plain numbers, so solvers can be tested against each other.
struct TiedProblem {
  struct Row {  // sum_i coef[i] * C[var[i]] >= need
    std::vector<int> var;
    std::vector<double> coef;  // saving bytes, > 0
    double need = 0;           // bytes over budget without recompute
    int stage = 0;
    int action_index = 0;  // the moment, for error messages
  };
  std::vector<double> cost;  // per variable, seconds per layer
  std::vector<int> upper;    // per variable
  std::vector<Row> rows;     // only moments that exceed the budget without recompute
  // Map back: variable of (stage, chunk).
  std::vector<std::vector<int>> var_of;  // [stage][chunk]
};

TiedProblem build_tied_problem(const Schedule& schedule, const std::vector<Chunk>& chunks,
                               const CostModel& cost, double memory_budget_bytes);

struct TiedSolution {
  bool feasible = false;
  bool optimal = false;     // proven optimal by the solver
  std::vector<int> values;  // C[j]
  double objective = 0;
  std::string solver;  // "cbc", "exhaustive", "greedy"
};

// CBC, warm-started from solve_greedy, within the time limit and limits in work: programs of
// more than a million nonzeros keep the greedy answer, and CBC explores at most 500 nodes
// (milp_solver.cc says where both come from).
TiedSolution solve_milp(const TiedProblem& problem, double time_limit_s);
TiedSolution solve_exhaustive(const TiedProblem& problem);  // tests only: tiny instances
TiedSolution solve_greedy(const TiedProblem& problem);      // fast, feasible when any is

enum class RecomputeMethod {
  kNone,              // no recompute
  kFull,              // every layer of every chunk
  kUniform,           // the same count on every stage and chunk, the smallest that fits
  kStageAware,        // diagonal-tied integer program (CBC, greedy fallback)
  kStageAwareGreedy,  // the same problem, greedy only (fast, for sweeps)
  kUntiedGreedy,      // per (stage, chunk) greedy without tying (the paper's comparison)
};

struct RecomputeOptions {
  RecomputeMethod method = RecomputeMethod::kStageAware;
  double memory_budget_bytes = 0;
  double time_limit_s = 0.5;
};

struct RecomputeResult {
  bool feasible = false;
  Recompute recompute;     // [stage][chunk]
  double recompute_s = 0;  // the objective: sum over stages and chunks of recompute time
  std::string solver;
  std::string reason;  // when infeasible: names the sequence, the stage and the bytes
  // Each stage's largest moment with `recompute`, from the byte check every answer gets (empty
  // for an answer that never reached it): a simulation of this recompute on the same schedule
  // can take it (SimOptions::known_peaks) rather than measure it again.
  MemoryPeaks peaks;
};

RecomputeResult plan_recompute(const Schedule& schedule, const std::vector<Chunk>& chunks,
                               const CostModel& cost, const RecomputeOptions& options);

}  // namespace infinipipe
