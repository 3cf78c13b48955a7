// A cost model file (cost/cost_model.cc load_cost_model: JSON syntax errors with line and
// column, then the fields), then the times and bytes of a few chunks on every stage of an
// accepted model.
#include <cstdint>
#include <string>

#include "fuzz_support.h"
#include "infinipipe/core/chunk.h"
#include "infinipipe/core/error.h"
#include "infinipipe/cost/cost_model.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  namespace ip = infinipipe;
  namespace fz = infinipipe::fuzz;
  static const std::string path = fz::scratch_path("cost_model");
  fz::write_file(path, data, size);
  try {
    const ip::CostModel cost = ip::load_cost_model(path);
    fz::expect(nlohmann::json(nlohmann::json(cost).get<ip::CostModel>()) == nlohmann::json(cost),
               "a cost model changed on a JSON round trip");
    // A whole sequence and the second slice of a split one.
    ip::Chunk whole, split;
    whole.slices.push_back(ip::Slice{0, 0, 4096, 4096});
    split.slices.push_back(ip::Slice{1, 1024, 2048, 8192});
    for (int p = 0; p < cost.num_stages(); ++p) {
      for (const ip::Chunk& c : {whole, split}) {
        (void)cost.forward_time(c, p);
        (void)cost.backward_time(c, p, cost.layers(p));
        (void)cost.activation_bytes(c, p, 0);
        (void)cost.backward_workspace_bytes(c, p);
      }
      (void)cost.model_state_bytes(p);
      (void)cost.kv_buffer_bytes(8192, p);
    }
  } catch (const ip::Error&) {
  }
  return 0;
}
