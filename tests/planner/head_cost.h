#pragma once
// A hand-made cost model with a head, for the spread-head tests: the simulator tests' (F = layers
// x tokens x 1 ms, B = 2 F, sends p2p_s_per_token a token) with a head costing `head_layers`
// layers' forward on the last stage. Test inputs, not a model of any hardware.
#include <utility>
#include <vector>

#include "sim/sim_fixtures.h"

namespace infinipipe::test {

inline CostModel head_cost(std::vector<int> layers, double head_layers,
                           double p2p_s_per_token = 0) {
  CostCoefficients c = simple_coefficients(p2p_s_per_token);
  c.head_s_per_token = head_layers * 1e-3;
  c.logits_bytes = 50;
  return cost_with(c, std::move(layers));
}

}  // namespace infinipipe::test
