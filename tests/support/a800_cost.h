#pragma once
// The analytic cost model of a built-in model shape on A800s: the realistic costs of the
// chunking, scheduling and planning tests.
#include <string>

#include "infinipipe/cost/cost_model.h"
#include "infinipipe/cost/hardware.h"
#include "infinipipe/cost/model_shape.h"

namespace infinipipe::test_support {

inline CostModel a800_cost(const std::string& model, int stages) {
  return CostModel::analytic(ModelShape::builtin(model), Hardware::builtin("a800"), stages);
}

}  // namespace infinipipe::test_support
