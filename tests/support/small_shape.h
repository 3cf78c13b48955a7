#pragma once
// A tiny decoder shape for tests whose cost model is hand-made: only its parameter count (the
// model state) reaches the code under test.
#include <string>

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

}  // namespace infinipipe::test_support
