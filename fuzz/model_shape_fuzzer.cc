// A model shape JSON (cost/model_shape.cc from_json), then what the planner derives from an
// accepted shape: parameter counts, layer splits and the analytic coefficients, where integer
// overflow on a huge but valid shape would be undefined behaviour (UBSan aborts on it).
#include <cstdint>

#include "fuzz_support.h"
#include "infinipipe/core/error.h"
#include "infinipipe/cost/cost_model.h"
#include "infinipipe/cost/hardware.h"
#include "infinipipe/cost/model_shape.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  namespace ip = infinipipe;
  namespace fz = infinipipe::fuzz;
  const auto read =
      fz::read_json_as<ip::ModelShape>(data, size, "a model shape changed on a JSON round trip");
  if (!read) return 0;
  const ip::ModelShape& shape = *read;
  try {
    (void)shape.params_per_layer();
    (void)shape.embedding_params();
    const int stages = 1 + static_cast<int>(size % 8);
    const auto split = ip::even_layer_split(shape.layers, stages);
    fz::expect(static_cast<int>(split.size()) == stages, "even_layer_split: wrong stage count");
    for (const auto& hw : ip::Hardware::builtin_names())
      (void)ip::CostModel::analytic(shape, ip::Hardware::builtin(hw), stages);
  } catch (const ip::Error&) {
  }
  return 0;
}
