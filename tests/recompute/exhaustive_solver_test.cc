// exhaustive_solver.cc: every assignment of a tiny checkpointing program, the oracle the other
// solvers are tested against; it refuses problems too large to enumerate.
#include <vector>

#include <gtest/gtest.h>

#include "infinipipe/core/error.h"
#include "infinipipe/recompute/recompute_planner.h"
#include "problem_tools.h"
#include "recompute/solver_problems.h"

namespace infinipipe {
namespace {

using namespace checkpoint_test;

TEST(ExhaustiveSolver, ReportInfeasibleWhenARowCannotBeCoveredAtUpperBounds) {
  const TiedProblem problem = uncoverable_problem();
  const TiedSolution none = solve_exhaustive(problem);
  expect_infeasible_at_upper_bounds(none, problem);
  EXPECT_FALSE(none.optimal);
  EXPECT_TRUE(near(none.objective, solution_objective(problem, problem.upper)));
  // Exactly what the upper bounds reach is enough (boundary counts): x1 and x2 at their bounds,
  // x0 free to stay 0 because x1 covers row 0 alone.
  const TiedSolution exact = solve_exhaustive(just_coverable_problem());
  ASSERT_TRUE(exact.feasible);
  EXPECT_EQ(exact.values, (std::vector<int>{0, 2, 4}));
  EXPECT_TRUE(near(exact.objective, 2 * 2e-3 + 4 * 1e-3));
}

TEST(ExhaustiveSolver, NoRowsMeansNoRecompute) {
  expect_no_recompute(solve_exhaustive(no_rows_problem()));
}

TEST(ExhaustiveSolver, ExhaustiveRefusesLargeProblems) {
  TiedProblem problem;
  problem.cost.assign(10, 1e-3);
  problem.upper.assign(10, 8);  // 9^10 ~ 3.5e9 assignments
  EXPECT_THROW(solve_exhaustive(problem), Error);
}

TEST(ExhaustiveSolver, FindsTheCheapestAssignment) {
  const TiedSolution cover = solve_exhaustive(set_cover_problem());
  ASSERT_TRUE(cover.feasible);
  EXPECT_TRUE(cover.optimal);
  EXPECT_EQ(cover.solver, "exhaustive");
  EXPECT_EQ(cover.values, (std::vector<int>{1, 1, 0}));
  EXPECT_TRUE(near(cover.objective, 2e-3));
  // Several layers of one variable against one of another: 2.5 GiB from x0 (1 GiB a layer,
  // 1 ms, up to 3) and x1 (2 GiB, 1.5 ms, up to 1). x0 alone costs 3 ms, x1 alone is short;
  // one of each (3 GiB, 2.5 ms) is the cheapest.
  TiedProblem layers;
  layers.cost = {1e-3, 1.5e-3};
  layers.upper = {3, 1};
  layers.rows.push_back({{0, 1}, {kGiB, 2 * kGiB}, 2.5 * kGiB, 0, 0});
  const TiedSolution exact = solve_exhaustive(layers);
  ASSERT_TRUE(exact.feasible);
  EXPECT_EQ(exact.values, (std::vector<int>{1, 1}));
  EXPECT_TRUE(near(exact.objective, 2.5e-3));
}

TEST(ExhaustiveSolver, MalformedProblemsAreRejected) {
  EXPECT_THROW(solve_exhaustive(malformed_problem()), Error);
}

}  // namespace
}  // namespace infinipipe
