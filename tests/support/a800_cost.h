#pragma once
// The analytic cost model of a built-in model shape on A800s: the realistic costs of the
// chunking, scheduling and planning tests.
#include <string>

#include "infinipipe/cost/cost_model.h"
#include "infinipipe/cost/hardware.h"
#include "infinipipe/cost/model_shape.h"

namespace infinipipe::test_support {

// The A800 priced flat, as before it had size curves: 52% of peak for every GEMM, 50% for every
// attention, no element-wise term; for tests of the formulas that size curves would blur.
inline Hardware flat_a800() {
  Hardware hw = Hardware::builtin("a800");
  hw.matmul_efficiency_by_rows = hw.weight_grad_efficiency_by_rows = {};
  hw.attention_efficiency_by_length = {};
  hw.memory_bandwidth = 0;
  hw.matmul_efficiency = 0.52, hw.attention_efficiency = 0.5;
  return hw;
}

inline CostModel a800_cost(const std::string& model, int stages) {
  return CostModel::analytic(ModelShape::builtin(model), Hardware::builtin("a800"), stages);
}

}  // namespace infinipipe::test_support
