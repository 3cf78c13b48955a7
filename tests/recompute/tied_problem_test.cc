// The integer program built from real schedules: diagonal variables, bounds, costs and rows,
// checked against the memory timeline computed independently here.
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "infinipipe/core/error.h"
#include "infinipipe/recompute/recompute_planner.h"
#include "infinipipe/sim/memory_timeline.h"
#include "problem_tools.h"
#include "recompute/recompute_fixtures.h"

namespace infinipipe {
namespace {

using namespace checkpoint_test;

std::vector<int> backward_order(const std::vector<Action>& actions) {
  std::vector<int> order;
  for (const Action& a : actions)
    if (a.type == ActionType::kBackward) order.push_back(a.chunk);
  return order;
}

TEST(TiedProblem, VariablesFollowTheBackwardDiagonals) {
  std::mt19937_64 rng(5);
  for (int trial = 0; trial < 20; ++trial) {
    const int d = std::uniform_int_distribution<int>(2, 4)(rng);
    std::vector<int> layers(d);
    for (int& l : layers) l = std::uniform_int_distribution<int>(1, 4)(rng);  // uneven on purpose
    const CostModel cost = test_cost(layers);
    const Step step = random_step(rng, d);
    const int n = static_cast<int>(step.chunks.size());
    const double budget = budget_between(step, cost, 0.5);
    const TiedProblem problem = build_tied_problem(step.schedule, step.chunks, cost, budget);

    ASSERT_EQ(static_cast<int>(problem.upper.size()), n + d - 1);
    ASSERT_EQ(problem.cost.size(), problem.upper.size());
    const std::vector<int> order = backward_order(step.schedule.stages[0]);
    std::vector<int> expected_upper(n + d - 1, 1 << 30);
    std::vector<double> expected_cost(n + d - 1, 0), work(n + d - 1, 0);
    for (int pos = 0; pos < n; ++pos)
      for (int p = 0; p < d; ++p) {
        const int k = order[pos];
        const int j = pos + d - 1 - p;
        EXPECT_EQ(problem.var_of[p][k], j);
        expected_upper[j] = std::min(expected_upper[j], layers[p]);
        expected_cost[j] = std::max(expected_cost[j], cost.layer_forward_time(step.chunks[k]));
        work[j] += cost.layer_forward_time(step.chunks[k]);
      }
    for (int j = 0; j < n + d - 1; ++j) {
      EXPECT_EQ(problem.upper[j], expected_upper[j]) << "variable " << j;
      // The slowest layer on the diagonal, ties broken toward less summed work.
      EXPECT_DOUBLE_EQ(problem.cost[j], expected_cost[j] + kWorkTieBreak * work[j])
          << "variable " << j;
    }

    // One row per moment over budget, needing exactly the excess, each chunk in flight saving
    // what one more checkpointed layer saves, to the bit (a stage's chunks have distinct
    // variables, so nothing is summed).
    size_t row = 0;
    for (int p = 0; p < d; ++p)
      for (const MemoryMoment& m : binding_moments(step.schedule, p, step.chunks, cost)) {
        const double bytes = moment_bytes(m, p, step.chunks, cost, Recompute{});
        if (bytes <= budget) continue;
        ASSERT_LT(row, problem.rows.size());
        const TiedProblem::Row& r = problem.rows[row++];
        EXPECT_EQ(r.stage, p);
        EXPECT_EQ(r.action_index, m.action_index);
        EXPECT_NEAR(r.need, bytes - budget, 1e-6 * bytes);
        ASSERT_EQ(r.var.size(), m.in_flight.size());
        for (size_t i = 0; i < r.var.size(); ++i) {
          EXPECT_EQ(r.var[i], problem.var_of[p][m.in_flight[i]]);
          EXPECT_EQ(r.coef[i], cost.checkpoint_saving_bytes(step.chunks[m.in_flight[i]], p));
        }
      }
    EXPECT_EQ(row, problem.rows.size());
  }
}

TEST(TiedProblem, RowsAreLinearInRecompute) {
  // The program's rows must predict the memory timeline's bytes for any assignment, or solving
  // them would prove nothing about memory.
  std::mt19937_64 rng(9);
  for (int trial = 0; trial < 20; ++trial) {
    const int d = std::uniform_int_distribution<int>(2, 4)(rng);
    const CostModel cost = test_cost(std::vector<int>(d, 3));
    const Step step = random_step(rng, d);
    const double budget = budget_between(step, cost, 0.8);
    const TiedProblem problem = build_tied_problem(step.schedule, step.chunks, cost, budget);
    std::vector<int> values(problem.upper.size());
    for (size_t j = 0; j < values.size(); ++j)
      values[j] = std::uniform_int_distribution<int>(0, problem.upper[j])(rng);
    Recompute recompute(d);
    for (int p = 0; p < d; ++p)
      for (size_t k = 0; k < step.chunks.size(); ++k)
        recompute[p].push_back(values[problem.var_of[p][k]]);
    for (const TiedProblem::Row& row : problem.rows) {
      const auto moments = binding_moments(step.schedule, row.stage, step.chunks, cost);
      const MemoryMoment* moment = nullptr;
      for (const MemoryMoment& m : moments)
        if (m.action_index == row.action_index) moment = &m;
      ASSERT_NE(moment, nullptr);
      const double bytes = moment_bytes(*moment, row.stage, step.chunks, cost, recompute);
      EXPECT_NEAR(bytes - budget, row.need - row_lhs(row, values), 1e-9 * bytes);
    }
  }
}

TEST(TiedProblem, DifferentBackwardOrdersAreAnError) {
  const std::vector<Chunk> chunks = {whole(0, 100), whole(1, 100)};
  Schedule schedule;
  schedule.stages = {{{ActionType::kForward, 0},
                      {ActionType::kForward, 1},
                      {ActionType::kBackward, 0},
                      {ActionType::kBackward, 1}},
                     {{ActionType::kForward, 0},
                      {ActionType::kForward, 1},
                      {ActionType::kBackward, 1},
                      {ActionType::kBackward, 0}}};
  const CostModel cost = test_cost({2, 2});
  try {
    build_tied_problem(schedule, chunks, cost, 1e9);
    FAIL() << "expected an Error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("stage 1"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("different order"), std::string::npos) << e.what();
  }
}

TEST(TiedProblem, MissingBackwardAndStageMismatchAreErrors) {
  const std::vector<Chunk> chunks = {whole(0, 100), whole(1, 100)};
  Schedule schedule;
  schedule.stages = {
      {{ActionType::kForward, 0}, {ActionType::kForward, 1}, {ActionType::kBackward, 0}}};
  EXPECT_THROW(build_tied_problem(schedule, chunks, test_cost({2}), 1e9), Error);
  schedule.stages[0].push_back({ActionType::kBackward, 1});
  EXPECT_THROW(build_tied_problem(schedule, chunks, test_cost({2, 2}), 1e9), Error);
  EXPECT_NO_THROW(build_tied_problem(schedule, chunks, test_cost({2}), 1e9));
}

TEST(TiedProblem, MilpEqualsExhaustiveOnRealSchedules) {
  std::mt19937_64 rng(17);
  int compared = 0;
  for (int trial = 0; trial < 200 && compared < 40; ++trial) {
    const int d = std::uniform_int_distribution<int>(2, 3)(rng);
    const CostModel cost = test_cost(std::vector<int>(d, 2));
    const Step step = random_step(rng, d);
    if (step.chunks.size() > 5) continue;  // keep 3^(n + d - 1) small
    const double tightness = std::uniform_real_distribution<double>(0.1, 1.0)(rng);
    const TiedProblem problem =
        build_tied_problem(step.schedule, step.chunks, cost, budget_between(step, cost, tightness));
    if (problem.rows.empty()) continue;
    const TiedSolution exact = solve_exhaustive(problem);
    const TiedSolution milp = solve_milp(problem, 5.0);
    const TiedSolution greedy = solve_greedy(problem);
    ASSERT_EQ(milp.feasible, exact.feasible);
    ASSERT_EQ(greedy.feasible, exact.feasible);
    if (!exact.feasible) continue;
    EXPECT_NEAR(milp.objective, exact.objective, 1e-9 * exact.objective) << "trial " << trial;
    EXPECT_GE(greedy.objective, exact.objective * (1 - 1e-9));
    ++compared;
  }
  EXPECT_GE(compared, 20);
}

}  // namespace
}  // namespace infinipipe
