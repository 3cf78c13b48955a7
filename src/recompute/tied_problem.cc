// The checkpointing integer program from a schedule: variables, bounds, costs and one row per
// memory moment that exceeds the budget without recompute.
#include <algorithm>
#include <string>
#include <vector>

#include "infinipipe/core/error.h"
#include "infinipipe/recompute/recompute_planner.h"
#include "infinipipe/sim/memory_timeline.h"
#include "problem_tools.h"

namespace infinipipe {
namespace {

void check_inputs(const Schedule& schedule, const std::vector<Chunk>& chunks,
                  const CostModel& cost) {
  check(schedule.num_stages() > 0, "checkpoint planning: the schedule has no stages");
  check(cost.num_stages() == schedule.num_stages(),
        "checkpoint planning: the schedule has " + std::to_string(schedule.num_stages()) +
            " stages but the cost model " + std::to_string(cost.num_stages()) +
            "; build both for the same pipeline");
  for (const auto& actions : schedule.stages)
    for (const Action& a : actions)
      if (a.chunk < 0 ||
          a.chunk >= static_cast<int>(chunks.size()))  // message built only on failure
        throw Error("checkpoint planning: action " + a.text() + " names a chunk outside the " +
                    std::to_string(chunks.size()) + " chunks given");
}

void check_inputs(const Schedule& schedule, const std::vector<Chunk>& chunks, const CostModel& cost,
                  const std::vector<std::vector<MemoryMoment>>& moments) {
  check_inputs(schedule, chunks, cost);
  check(static_cast<int>(moments.size()) == schedule.num_stages(),
        "checkpoint planning: memory moments for " + std::to_string(moments.size()) +
            " stages, schedule has " + std::to_string(schedule.num_stages()));
}

std::vector<int> backward_order(const std::vector<Action>& actions) {
  std::vector<int> order;
  for (const Action& a : actions)
    if (a.type == ActionType::kBackward) order.push_back(a.chunk);
  return order;
}

std::string join(const std::vector<int>& values) {
  std::string out;
  for (size_t i = 0; i < values.size() && i < 16; ++i)
    out += (i ? " " : "") + std::to_string(values[i]);
  if (values.size() > 16) out += " ...";
  return out;
}

// Position of every chunk in the backward order, which diagonal tying needs to be the same on
// every stage (1F1B and GPipe both guarantee it).
std::vector<int> backward_positions(const Schedule& schedule, int num_chunks) {
  const std::vector<int> order = backward_order(schedule.stages[0]);
  std::vector<int> position(num_chunks, -1);
  for (size_t i = 0; i < order.size(); ++i) {
    if (position[order[i]] >= 0)
      throw Error("checkpoint planning: chunk " + std::to_string(order[i]) +
                  " goes backward twice on stage 0; validate the schedule first");
    position[order[i]] = static_cast<int>(i);
  }
  for (int k = 0; k < num_chunks; ++k)
    if (position[k] < 0)
      throw Error("checkpoint planning: chunk " + std::to_string(k) +
                  " never goes backward on stage 0; validate the schedule first");
  for (int p = 1; p < schedule.num_stages(); ++p) {
    const std::vector<int> other = backward_order(schedule.stages[p]);
    if (other != order)
      throw Error("checkpoint planning: stage " + std::to_string(p) +
                  " runs backwards in a different order than stage 0 (" + join(other) + " vs " +
                  join(order) + "); diagonal tying needs one backward order on every stage");
  }
  return position;
}

std::vector<std::vector<MemoryMoment>> all_moments(const Schedule& schedule,
                                                   const std::vector<Chunk>& chunks,
                                                   const CostModel& cost) {
  std::vector<std::vector<MemoryMoment>> moments;
  for (int p = 0; p < schedule.num_stages(); ++p)
    moments.push_back(binding_moments(schedule, p, chunks, cost));
  return moments;
}

// Rows for every moment over budget, with the variables already in problem.var_of. Both
// programs give a stage's chunks distinct variables (a diagonal crosses a stage once; untied,
// one each), so a row holds each chunk's saving as its coefficient, in the moment's order.
void add_rows(const std::vector<std::vector<MemoryMoment>>& moments,
              const std::vector<Chunk>& chunks, const CostModel& cost, double budget,
              TiedProblem& problem) {
  for (int p = 0; p < static_cast<int>(moments.size()); ++p) {
    std::vector<double> unrecomputed(chunks.size()), saving(chunks.size());
    for (size_t k = 0; k < chunks.size(); ++k) {
      unrecomputed[k] = cost.activation_bytes(chunks[k], p, 0);
      saving[k] = cost.checkpoint_saving_bytes(chunks[k], p);
    }
    for (const MemoryMoment& moment : moments[p]) {
      double base = moment.fixed_bytes;
      for (int k : moment.in_flight) base += unrecomputed[k];
      if (base <= budget) continue;
      TiedProblem::Row row;
      row.need = base - budget;
      row.stage = p;
      row.action_index = moment.action_index;
      // At most one entry per chunk in flight: sized once, not grown (rows of dozens of chunks,
      // thousands of rows per program), and written through pointers held here (a push_back
      // per entry checked the capacity and, storing a pointer, made the compiler load every
      // array anew), then cut to the entries written.
      const size_t most = moment.in_flight.size();
      row.var.resize(most);
      row.coef.resize(most);
      int* row_var = row.var.data();
      double* row_coef = row.coef.data();
      const int* var_of = problem.var_of[p].data();
      const double* save = saving.data();
      size_t count = 0;
      for (int k : moment.in_flight) {
        if (save[k] <= 0) continue;
        row_var[count] = var_of[k];
        row_coef[count] = save[k];
        ++count;
      }
      row.var.resize(count);
      row.coef.resize(count);
      problem.rows.push_back(std::move(row));
    }
  }
}

}  // namespace

TiedProblem build_tied_problem(const Schedule& schedule, const std::vector<Chunk>& chunks,
                               const CostModel& cost, double memory_budget_bytes) {
  check_inputs(schedule, chunks, cost);
  return build_tied_problem(schedule, chunks, cost, memory_budget_bytes,
                            all_moments(schedule, chunks, cost));
}

TiedProblem build_tied_problem(const Schedule& schedule, const std::vector<Chunk>& chunks,
                               const CostModel& cost, double memory_budget_bytes,
                               const std::vector<std::vector<MemoryMoment>>& moments) {
  check_inputs(schedule, chunks, cost, moments);
  const int d = schedule.num_stages();
  const int n = static_cast<int>(chunks.size());
  const std::vector<int> position = backward_positions(schedule, n);

  TiedProblem problem;
  const int num_vars = n + d - 1;
  problem.cost.assign(num_vars, 0);
  // A diagonal no (stage, chunk) touches (only when there are no chunks) must stay at zero.
  std::vector<int> upper(num_vars, -1);
  std::vector<double> work(num_vars, 0);
  problem.var_of.assign(d, std::vector<int>(n));
  for (int k = 0; k < n; ++k) {
    const double layer_compute = cost.layer_recompute_time(chunks[k]);
    for (int p = 0; p < d; ++p) {
      // A recomputed layer's forward with its all-to-alls (layer_compute exactly with d_s = 1).
      const double layer_time = layer_compute + cost.layer_alltoall_time(chunks[k], p);
      const int j = position[k] + d - 1 - p;
      problem.var_of[p][k] = j;
      upper[j] = upper[j] < 0 ? cost.layers(p) : std::min(upper[j], cost.layers(p));
      problem.cost[j] = std::max(problem.cost[j], layer_time);
      work[j] += layer_time;
    }
  }
  for (int j = 0; j < num_vars; ++j) problem.cost[j] += kWorkTieBreak * work[j];
  for (int& u : upper) u = std::max(u, 0);
  problem.upper = std::move(upper);
  add_rows(moments, chunks, cost, memory_budget_bytes, problem);
  return problem;
}

TiedProblem build_untied_problem(const Schedule& schedule, const std::vector<Chunk>& chunks,
                                 const CostModel& cost, double memory_budget_bytes,
                                 const std::vector<std::vector<MemoryMoment>>& moments) {
  check_inputs(schedule, chunks, cost, moments);
  const int d = schedule.num_stages();
  const int n = static_cast<int>(chunks.size());
  TiedProblem problem;
  problem.cost.resize(static_cast<size_t>(n) * d);
  problem.upper.resize(static_cast<size_t>(n) * d);
  problem.var_of.assign(d, std::vector<int>(n));
  for (int p = 0; p < d; ++p)
    for (int k = 0; k < n; ++k) {
      const int j = p * n + k;
      problem.var_of[p][k] = j;
      problem.cost[j] =
          cost.layer_recompute_time(chunks[k]) + cost.layer_alltoall_time(chunks[k], p);
      problem.upper[j] = cost.layers(p);
    }
  add_rows(moments, chunks, cost, memory_budget_bytes, problem);
  return problem;
}

double row_lhs(const TiedProblem::Row& row, const std::vector<int>& values) {
  double lhs = 0;
  for (size_t i = 0; i < row.var.size(); ++i) lhs += row.coef[i] * values[row.var[i]];
  return lhs;
}

bool solution_feasible(const TiedProblem& problem, const std::vector<int>& values) {
  if (values.size() != problem.upper.size()) return false;
  for (size_t j = 0; j < values.size(); ++j)
    if (values[j] < 0 || values[j] > problem.upper[j]) return false;
  for (const TiedProblem::Row& row : problem.rows)
    if (!row_satisfied(row_lhs(row, values), row.need)) return false;
  return true;
}

double solution_objective(const TiedProblem& problem, const std::vector<int>& values) {
  double total = 0;
  for (size_t j = 0; j < values.size(); ++j) total += problem.cost[j] * values[j];
  return total;
}

int first_unsatisfiable_row(const TiedProblem& problem) {
  for (size_t r = 0; r < problem.rows.size(); ++r)
    if (!row_satisfied(row_lhs(problem.rows[r], problem.upper), problem.rows[r].need))
      return static_cast<int>(r);
  return -1;
}

void check_variable_shape(const TiedProblem& problem) {
  // Messages are built only on failure: this runs on every solve inside the planner's sweep.
  if (problem.cost.size() != problem.upper.size())
    throw Error("checkpoint problem: " + std::to_string(problem.cost.size()) + " costs but " +
                std::to_string(problem.upper.size()) +
                " upper bounds; give one of each per variable");
  const int num_vars = static_cast<int>(problem.upper.size());
  for (int j = 0; j < num_vars; ++j)
    if (problem.upper[j] < 0 || !(problem.cost[j] >= 0))
      throw Error("checkpoint problem: variable " + std::to_string(j) +
                  " has a negative bound or cost; bounds and costs must be >= 0");
}

void throw_bad_row(size_t r, bool sizes_differ) {
  if (sizes_differ)
    throw Error("checkpoint problem: row " + std::to_string(r) +
                " has different numbers of variables and coefficients");
  throw Error("checkpoint problem: row " + std::to_string(r) +
              " names a variable out of range or has a coefficient <= 0");
}

void check_problem_shape(const TiedProblem& problem) {
  check_variable_shape(problem);
  const int num_vars = static_cast<int>(problem.upper.size());
  for (size_t r = 0; r < problem.rows.size(); ++r) {
    const TiedProblem::Row& row = problem.rows[r];
    if (row.var.size() != row.coef.size()) throw_bad_row(r, true);
    for (size_t i = 0; i < row.var.size(); ++i)
      if (!entry_in_shape(row.var[i], row.coef[i], num_vars)) throw_bad_row(r, false);
  }
}

}  // namespace infinipipe
