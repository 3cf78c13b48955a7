#pragma once
// Checkpointing programs for the solver tests (milp_solver, greedy_solver, exhaustive_solver):
// random ones in GiB-scale bytes like the real rows, small ones whose answers are known, and the
// checks of what every solver answers to those.
#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

#include <gtest/gtest.h>

#include "infinipipe/recompute/recompute_planner.h"

namespace infinipipe::checkpoint_test {

constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;

// Rows in GiB-scale bytes like the real ones; needs drawn so that some instances are infeasible.
// need_fraction: the largest need as a fraction of what the row reaches at the upper bounds.
inline TiedProblem random_problem(std::mt19937_64& rng, int num_vars, int num_rows, int max_upper,
                                  int max_row_vars, double need_fraction) {
  std::uniform_int_distribution<int> upper_dist(0, max_upper);
  std::uniform_real_distribution<double> cost_dist(0.1e-3, 2e-3);
  std::uniform_real_distribution<double> coef_dist(0.05 * kGiB, 1.5 * kGiB);
  std::uniform_int_distribution<int> var_dist(0, num_vars - 1);
  std::uniform_int_distribution<int> row_len_dist(1, std::min(max_row_vars, num_vars));
  TiedProblem problem;
  for (int j = 0; j < num_vars; ++j) {
    problem.upper.push_back(upper_dist(rng));
    problem.cost.push_back(cost_dist(rng));
  }
  for (int r = 0; r < num_rows; ++r) {
    TiedProblem::Row row;
    std::vector<bool> used(num_vars, false);
    const int len = row_len_dist(rng);
    double reachable = 0;
    for (int i = 0; i < len; ++i) {
      const int j = var_dist(rng);
      if (used[j]) continue;
      used[j] = true;
      row.var.push_back(j);
      row.coef.push_back(coef_dist(rng));
      reachable += row.coef.back() * problem.upper[j];
    }
    // A row no variable can help is infeasible by construction: only wanted when asked for.
    if (reachable == 0 && need_fraction <= 1) continue;
    row.need = std::uniform_real_distribution<double>(0.01, need_fraction)(rng) *
               std::max(reachable, 0.1 * kGiB);
    row.stage = r % 3;
    row.action_index = r;
    problem.rows.push_back(row);
  }
  return problem;
}

inline bool near(double a, double b) {
  return std::abs(a - b) <= 1e-9 * std::max({1e-12, std::abs(a), std::abs(b)});
}

// Row 0 is coverable; row 1 reaches only 2 * 1 GiB + 4 * 0.25 GiB = 3 GiB of the 3.5 GiB it
// needs at the upper bounds.
inline TiedProblem uncoverable_problem() {
  TiedProblem problem;
  problem.cost = {1e-3, 2e-3, 1e-3};
  problem.upper = {3, 2, 4};
  problem.rows.push_back({{0, 1}, {1 * kGiB, 1 * kGiB}, 2 * kGiB, 0, 4});
  problem.rows.push_back({{1, 2}, {1 * kGiB, 0.25 * kGiB}, 3.5 * kGiB, 1, 7});
  return problem;
}

// uncoverable_problem with row 1 needing exactly what the upper bounds reach: feasible (the
// boundary counts), with x1 and x2 at their upper bounds.
inline TiedProblem just_coverable_problem() {
  TiedProblem problem = uncoverable_problem();
  problem.rows[1].need = 3 * kGiB;
  return problem;
}

// Two variables (1 ms a layer, up to 4) and no row to cover.
inline TiedProblem no_rows_problem() {
  TiedProblem problem;
  problem.cost = {1e-3, 1e-3};
  problem.upper = {4, 4};
  return problem;
}

// One variable and a row on variable 1, which does not exist.
inline TiedProblem malformed_problem() {
  TiedProblem problem;
  problem.cost = {1e-3};
  problem.upper = {2};
  problem.rows.push_back({{1}, {kGiB}, kGiB, 0, 0});
  return problem;
}

// Every solver's answer to a problem that a row makes infeasible: every variable at its upper
// bound.
inline void expect_infeasible_at_upper_bounds(const TiedSolution& s, const TiedProblem& problem) {
  EXPECT_FALSE(s.feasible);
  EXPECT_EQ(s.values, problem.upper);
}

// Every solver's answer to no_rows_problem: nothing recomputed, at no cost.
inline void expect_no_recompute(const TiedSolution& s) {
  EXPECT_TRUE(s.feasible);
  EXPECT_EQ(s.values, std::vector<int>({0, 0}));
  EXPECT_EQ(s.objective, 0);
}

// Set cover where greedy goes wrong: rows a, b, c, d each need 1 GiB; x0 covers a and b (1 ms),
// x1 covers c and d (1 ms), x2 covers a, b and c (1.4 ms). Greedy takes x2 first (3 GiB per
// 1.4 ms beats 2 GiB per ms), then x1 for d: 2.4 ms. The optimum is x0 + x1: 2 ms.
inline TiedProblem set_cover_problem() {
  TiedProblem problem;
  problem.cost = {1e-3, 1e-3, 1.4e-3};
  problem.upper = {1, 1, 1};
  problem.rows.push_back({{0, 2}, {kGiB, kGiB}, kGiB, 0, 0});  // a
  problem.rows.push_back({{0, 2}, {kGiB, kGiB}, kGiB, 0, 1});  // b
  problem.rows.push_back({{1, 2}, {kGiB, kGiB}, kGiB, 0, 2});  // c
  problem.rows.push_back({{1}, {kGiB}, kGiB, 0, 3});           // d
  return problem;
}

}  // namespace infinipipe::checkpoint_test
