#pragma once
// Random small planning instances shared by the plan tests: a skewed length mix (mostly short,
// sometimes a few long) and a memory budget between "barely above the model state" and "the
// whole step's activations fit", so that no recompute, some and infeasible all occur.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "infinipipe/cost/cost_model.h"
#include "infinipipe/planner/planner.h"
#include "support/a800_cost.h"
#include "support/random_lengths.h"

namespace infinipipe::testing {

struct Instance {
  std::vector<int64_t> lengths;
  CostModel cost;
  PlannerOptions options;
  std::string description;
};

using test_support::a800_cost;
using test_support::longest_of;
using test_support::random_lengths;

// The largest model state (weights, gradients, optimizer state) of any stage: a budget below it
// fits nothing.
inline double largest_model_state(const CostModel& cost) {
  double state = 0;
  for (int p = 0; p < cost.num_stages(); ++p) state = std::max(state, cost.model_state_bytes(p));
  return state;
}

// Memory of the whole step held at once on the busiest stage, without recompute: an upper end
// for budgets that still make the planner work.
inline double all_activations_bytes(const std::vector<int64_t>& lengths, const CostModel& cost) {
  Chunk all;
  for (size_t i = 0; i < lengths.size(); ++i)
    all.slices.push_back({static_cast<int>(i), 0, lengths[i], lengths[i]});
  double most = 0;
  for (int p = 0; p < cost.num_stages(); ++p)
    most = std::max(most, cost.model_state_bytes(p) + cost.activation_bytes(all, p, 0) +
                              cost.backward_workspace_bytes(all, p));
  return most;
}

// The cost model with a recomputed layer costing `ratio` forwards, as calibrations on CPUs give
// (CostCoefficients::checkpointed_forward_ratio, 0.88-0.99): a second of recompute then saves
// more than a forward's second of layers.
inline CostModel with_recompute_ratio(const CostModel& cost, double ratio) {
  CostCoefficients coefficients = cost.coefficients();
  coefficients.checkpointed_forward_ratio = ratio;
  return CostModel(cost.shape(), cost.layers_per_stage(), coefficients, cost.layout());
}

inline Instance random_instance(std::mt19937_64& rng) {
  Instance inst;
  const bool tiny = std::bernoulli_distribution(0.5)(rng);
  const std::string model = tiny ? "tiny" : "llama-13b";
  const int stages = std::uniform_int_distribution<int>(2, 8)(rng);
  inst.cost = a800_cost(model, stages);
  inst.lengths = random_lengths(rng, 20, tiny ? 8192 : 32768);
  const double state = largest_model_state(inst.cost);
  const double full = all_activations_bytes(inst.lengths, inst.cost);
  const double fraction = std::uniform_real_distribution<double>(0.05, 1.2)(rng);
  inst.options.num_stages = stages;
  inst.options.memory_budget_bytes = state + fraction * (full - state);
  inst.options.max_k = 8;
  inst.options.recompute_time_limit_s = 0.05;
  inst.description = model + ", " + std::to_string(stages) + " stages, " +
                     std::to_string(inst.lengths.size()) + " sequences, budget fraction " +
                     std::to_string(fraction) + ", lengths";
  for (int64_t n : inst.lengths) inst.description += " " + std::to_string(n);
  return inst;
}

}  // namespace infinipipe::testing
