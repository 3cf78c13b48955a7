#pragma once
// Shared by the checkpoint solvers and the planner (internal to the checkpoint part): one
// definition of when a row counts as satisfied, so every solver and every check agree, and the
// untied variant of the problem used for comparison.
#include <vector>

#include "infinipipe/recompute/recompute_planner.h"
#include "infinipipe/sim/memory_timeline.h"

namespace infinipipe {

// Rows are sums of doubles in bytes (up to ~1e11), so exact comparison would turn rounding noise
// into infeasibility. A relative slack of 1e-9 is far below one byte per GiB needed and far above
// double rounding (~1e-16 per operation).
constexpr double kRelativeByteTolerance = 1e-9;

inline double row_tolerance(double need) { return kRelativeByteTolerance * (need > 1 ? need : 1); }
inline bool row_satisfied(double lhs, double need) { return lhs >= need - row_tolerance(need); }

// The delay a diagonal adds is its slowest layer, but assignments with equal delay can differ
// a lot in total recompute (a diagonal at the pipeline's edge crosses one stage, a middle one
// every stage). cost[j] = max layer time + kWorkTieBreak * summed layer time on the diagonal,
// small enough to change the delay objective by at most d * 1e-6 of itself, breaks such ties
// toward less work.
constexpr double kWorkTieBreak = 1e-6;

double row_lhs(const TiedProblem::Row& row, const std::vector<int>& values);
// Within bounds and every row satisfied.
bool solution_feasible(const TiedProblem& problem, const std::vector<int>& values);
double solution_objective(const TiedProblem& problem, const std::vector<int>& values);
// The first row that stays unsatisfied with every variable at its upper bound, or -1.
int first_unsatisfiable_row(const TiedProblem& problem);
// The greedy answer must be valid input for the other solvers; throws Error when sizes disagree.
void check_problem_shape(const TiedProblem& problem);
// Its parts, for a solver that checks each row while it reads it (the greedy solver, which runs
// on every wave the planner weighs): the variables' bounds and costs; a row entry's variable and
// coefficient; the error for row r (its sizes differ, or an entry is out of shape).
void check_variable_shape(const TiedProblem& problem);
inline bool entry_in_shape(int var, double coef, int num_vars) {
  return var >= 0 && var < num_vars && coef > 0;
}
[[noreturn]] void throw_bad_row(size_t r, bool sizes_differ);

// The tied problem from memory moments already computed ([stage], as binding_moments gives them).
TiedProblem build_tied_problem(const Schedule& schedule, const std::vector<Chunk>& chunks,
                               const CostModel& cost, double memory_budget_bytes,
                               const std::vector<std::vector<MemoryMoment>>& moments);

// One variable per (stage, chunk): variable p * n + k, upper = layers(p), cost = the chunk's
// per-layer forward time. The same rows as the tied problem, for the untied comparison.
TiedProblem build_untied_problem(const Schedule& schedule, const std::vector<Chunk>& chunks,
                                 const CostModel& cost, double memory_budget_bytes,
                                 const std::vector<std::vector<MemoryMoment>>& moments);

}  // namespace infinipipe
