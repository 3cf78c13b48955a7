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
  ModelShape shape;
  shape.name = name;
  shape.layers = layers;
  shape.hidden = 8;
  shape.heads = 2;
  shape.kv_heads = 2;
  shape.ffn = 16;
  shape.vocab = 32;
  shape.bytes_per_element = 2;
  return shape;
}

// A cost model with hand-made coefficients over small_shape(name, all the stages' layers).
inline CostModel hand_made_cost(const std::string& name, std::vector<int> layers_per_stage,
                                const CostCoefficients& coefficients) {
  int total = 0;
  for (int l : layers_per_stage) total += l;
  return CostModel(small_shape(name, total), std::move(layers_per_stage), coefficients);
}

}  // namespace infinipipe::test_support
