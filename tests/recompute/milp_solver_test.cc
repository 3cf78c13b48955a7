// milp_solver.cc: the checkpointing program solved exactly by CBC, warm-started from greedy.
// On small random problems CBC must equal exhaustive search; on medium ones it is never worse
// than greedy; with a tiny time limit it still answers feasibly; and its answer says whether it
// is proven optimal.
#include <chrono>
#include <random>
#include <vector>

#include <gtest/gtest.h>

#include "infinipipe/core/error.h"
#include "infinipipe/recompute/recompute_planner.h"
#include "problem_tools.h"
#include "recompute/solver_problems.h"

namespace infinipipe {
namespace {

using namespace checkpoint_test;

TEST(MilpSolver, MilpEqualsExhaustiveAndGreedyIsFeasibleOnSmallRandomProblems) {
  std::mt19937_64 rng(20240611);
  int feasible = 0, infeasible = 0, greedy_suboptimal = 0;
  for (int trial = 0; trial < 400; ++trial) {
    const int num_vars = std::uniform_int_distribution<int>(2, 6)(rng);
    const int num_rows = std::uniform_int_distribution<int>(1, 6)(rng);
    const TiedProblem problem =
        random_problem(rng, num_vars, num_rows, 4, 4, 1.1);  // sometimes infeasible
    const TiedSolution exact = solve_exhaustive(problem);
    const TiedSolution milp = solve_milp(problem, 5.0);
    const TiedSolution greedy = solve_greedy(problem);
    SCOPED_TRACE("trial " + std::to_string(trial));
    ASSERT_EQ(milp.feasible, exact.feasible);
    ASSERT_EQ(greedy.feasible, exact.feasible);
    ASSERT_EQ(exact.feasible, first_unsatisfiable_row(problem) < 0);
    if (!exact.feasible) {
      ++infeasible;
      continue;
    }
    ++feasible;
    EXPECT_TRUE(solution_feasible(problem, milp.values));
    EXPECT_TRUE(solution_feasible(problem, greedy.values));
    EXPECT_TRUE(near(milp.objective, exact.objective))
        << milp.objective << " vs " << exact.objective;
    EXPECT_TRUE(near(milp.objective, solution_objective(problem, milp.values)));
    EXPECT_GE(greedy.objective, exact.objective * (1 - 1e-9));
    if (greedy.objective > exact.objective * (1 + 1e-9)) ++greedy_suboptimal;
  }
  // The comparison must have exercised both outcomes, and greedy must not be exact by accident
  // of the instances, or equality with exhaustive search would prove little about CBC.
  EXPECT_GT(feasible, 100);
  EXPECT_GT(infeasible, 10);
  EXPECT_GT(greedy_suboptimal, 0);
}

TEST(MilpSolver, ReportInfeasibleWhenARowCannotBeCoveredAtUpperBounds) {
  EXPECT_EQ(first_unsatisfiable_row(uncoverable_problem()), 1);
  EXPECT_FALSE(solve_milp(uncoverable_problem(), 1.0).feasible);
  // Lowering the need to exactly what the upper bounds reach makes it feasible (boundary counts).
  const TiedProblem problem = just_coverable_problem();
  EXPECT_EQ(first_unsatisfiable_row(problem), -1);
  const TiedSolution milp = solve_milp(problem, 1.0);
  ASSERT_TRUE(milp.feasible);
  EXPECT_EQ(milp.values[1], 2);
  EXPECT_EQ(milp.values[2], 4);
  EXPECT_TRUE(near(milp.objective, solve_exhaustive(problem).objective));
}

TEST(MilpSolver, NoRowsMeansNoRecompute) {
  const TiedSolution s = solve_milp(no_rows_problem(), 1.0);
  expect_no_recompute(s);
  EXPECT_TRUE(s.optimal) << "nothing to cover: all zeros is optimal";
}

TEST(MilpSolver, MalformedProblemsAreRejected) {
  EXPECT_THROW(solve_milp(malformed_problem(), 1.0), Error);
}

TEST(MilpSolver, MilpNeverWorseThanGreedyOnMediumProblems) {
  std::mt19937_64 rng(7);
  int strictly_better = 0;
  for (int trial = 0; trial < 8; ++trial) {
    const TiedProblem problem = random_problem(rng, 40, 120, 6, 8, 0.7);
    const TiedSolution greedy = solve_greedy(problem);
    const TiedSolution milp = solve_milp(problem, 2.0);
    ASSERT_EQ(milp.feasible, greedy.feasible);
    if (!greedy.feasible) continue;
    EXPECT_TRUE(solution_feasible(problem, milp.values));
    EXPECT_LE(milp.objective, greedy.objective * (1 + 1e-12));
    if (milp.objective < greedy.objective * (1 - 1e-9)) ++strictly_better;
  }
  EXPECT_GT(strictly_better, 0);
}

TEST(MilpSolver, TinyTimeLimitStillGivesAFeasibleAnswer) {
  std::mt19937_64 rng(11);
  const TiedProblem problem = random_problem(rng, 300, 1500, 8, 20, 0.7);
  const TiedSolution greedy = solve_greedy(problem);
  ASSERT_TRUE(greedy.feasible) << "instance meant to be feasible; pick another seed";
  const TiedSolution milp = solve_milp(problem, 1e-3);
  EXPECT_TRUE(milp.feasible);
  EXPECT_TRUE(solution_feasible(problem, milp.values));
  EXPECT_LE(milp.objective, greedy.objective * (1 + 1e-12));
}

TEST(MilpSolver, FindsTheOptimumWhereGreedyDoesNotAndSaysSo) {
  const TiedProblem problem = set_cover_problem();
  const TiedSolution milp = solve_milp(problem, 5.0);
  ASSERT_TRUE(milp.feasible);
  EXPECT_EQ(milp.values, (std::vector<int>{1, 1, 0}));
  EXPECT_TRUE(near(milp.objective, 2e-3)) << milp.objective;
  EXPECT_TRUE(milp.optimal);
  EXPECT_EQ(milp.solver, "cbc");
  EXPECT_LT(milp.objective, solve_greedy(problem).objective * (1 - 1e-9));
}

TEST(MilpSolver, FreeRecomputeNeedsNoSolve) {
  // Every variable costs nothing: any feasible answer is optimal, greedy's is returned as is.
  TiedProblem problem = set_cover_problem();
  problem.cost = {0, 0, 0};
  const TiedSolution milp = solve_milp(problem, 5.0);
  ASSERT_TRUE(milp.feasible);
  EXPECT_TRUE(milp.optimal);
  EXPECT_EQ(milp.objective, 0);
  EXPECT_EQ(milp.solver, "greedy");
  EXPECT_TRUE(solution_feasible(problem, milp.values));
}

TEST(MilpSolver, InfeasibleAnswerIsTheUpperBounds) {
  const TiedProblem problem = uncoverable_problem();
  const TiedSolution milp = solve_milp(problem, 1.0);
  expect_infeasible_at_upper_bounds(milp, problem);
  EXPECT_FALSE(milp.optimal);
}

// Issue 15: CBC checks its time limit between phases, and the root LP of a program of millions of
// nonzeros ran 21 s and more at a 0.05 s limit. Past a million nonzeros the greedy answer stands,
// whatever the time limit: a bound in work, the same on every machine.
TEST(MilpSolver, ProgramsTooLargeKeepTheGreedyAnswer) {
  TiedProblem problem;
  const int num_vars = 1000, num_rows = 1001;  // 1,001,000 nonzeros
  for (int j = 0; j < num_vars; ++j) {
    problem.cost.push_back(1e-3 * (1 + j % 7));
    problem.upper.push_back(2);
  }
  for (int r = 0; r < num_rows; ++r) {
    TiedProblem::Row row;
    for (int j = 0; j < num_vars; ++j) {
      row.var.push_back(j);
      row.coef.push_back(kGiB * (1 + (j + r) % 5));
    }
    row.need = 3 * kGiB;
    row.stage = r % 4;
    row.action_index = r;
    problem.rows.push_back(std::move(row));
  }
  const auto started = std::chrono::steady_clock::now();
  const TiedSolution milp = solve_milp(problem, 600.0);
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  const TiedSolution greedy = solve_greedy(problem);
  EXPECT_EQ(milp.solver, "greedy (program too large for cbc)");
  EXPECT_TRUE(milp.feasible);
  EXPECT_EQ(milp.values, greedy.values);
  EXPECT_LT(seconds, 30);  // the greedy solve alone: 29 ms in a release build
}

}  // namespace
}  // namespace infinipipe
