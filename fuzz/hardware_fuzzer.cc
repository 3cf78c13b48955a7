// A hardware JSON (cost/hardware.cc from_json), then the analytic coefficients of every
// built-in model on the accepted hardware.
#include <cstdint>

#include "fuzz_support.h"
#include "infinipipe/core/error.h"
#include "infinipipe/cost/cost_model.h"
#include "infinipipe/cost/hardware.h"
#include "infinipipe/cost/model_shape.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  namespace ip = infinipipe;
  namespace fz = infinipipe::fuzz;
  const auto hw = fz::read_json_as<ip::Hardware>(
      data, size, "a hardware description changed on a JSON round trip");
  if (!hw) return 0;
  try {
    for (const auto& model : ip::ModelShape::builtin_names())
      (void)ip::CostModel::analytic(ip::ModelShape::builtin(model), *hw, 2);
  } catch (const ip::Error&) {
  }
  return 0;
}
