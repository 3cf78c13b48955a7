#pragma once
// A tiny decoder shape for tests whose cost model is hand-made: only its parameter count (the
// model state) reaches the code under test.
#include <string>
#include <utility>
#include <vector>

#include "infinipipe/cost/cost_model.h"
#include "infinipipe/cost/model_shape.h"

namespace infinipipe::test_support {

inline ModelShape small_shape(const std::string& name, int layers) {
  // name, layers, hidden, heads, kv_heads, ffn, vocab, bytes per element
  return {name, layers, 8, 2, 2, 16, 32, 2};
}

// A cost model with hand-made coefficients over small_shape(name, all the stages' layers).
inline CostModel hand_made_cost(const std::string& name, std::vector<int> layers_per_stage,
                                const CostCoefficients& coefficients) {
  int total = 0;
  for (int l : layers_per_stage) total += l;
  return CostModel(small_shape(name, total), std::move(layers_per_stage), coefficients);
}

}  // namespace infinipipe::test_support
