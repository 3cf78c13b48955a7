// A plan file (plan/plan.cc load_plan and from_json), then what a rank does with a plan it is
// handed: Plan::validate, the hash it compares, and for a plan that validates, a simulation of it
// on the tiny model split as the plan says (an executable plan must run to its end).
#include <cstdint>
#include <numeric>
#include <string>
#include <vector>

#include "fuzz_support.h"
#include "infinipipe/core/error.h"
#include "infinipipe/cost/cost_model.h"
#include "infinipipe/cost/hardware.h"
#include "infinipipe/cost/model_shape.h"
#include "infinipipe/plan/plan.h"
#include "infinipipe/sim/simulator.h"

namespace {

// The simulator's work grows with layers and actions; larger plans are the parser's and the
// validator's to handle, and the run's time limit would only report them as slow.
constexpr int kMaxSimulatedLayers = 256;
constexpr size_t kMaxSimulatedActions = 4096;

void simulate_valid(const infinipipe::Plan& plan) {
  namespace ip = infinipipe;
  int64_t layers = 0;
  for (int l : plan.layers_per_stage) layers += l;
  size_t actions = 0;
  for (const auto& list : plan.schedule.stages) actions += list.size();
  if (plan.layers_per_stage.empty() || layers > kMaxSimulatedLayers ||
      actions > kMaxSimulatedActions)
    return;
  ip::ModelShape shape = ip::ModelShape::builtin("tiny");
  shape.layers = static_cast<int>(layers);
  const ip::CostModel cost(shape, plan.layers_per_stage,
                           ip::CostCoefficients::analytic(shape, ip::Hardware::builtin("cpu")));
  ip::SimOptions options;
  options.record_events = false;
  (void)ip::simulate(plan.schedule, plan.chunks, cost, plan.recompute, options);
}

// The plan as load_plan reads it; and, for a plan that carries a hash, also without it, since
// almost every mutation of a hashed plan stops at the hash check and would never reach the
// validator and the simulator.
std::vector<infinipipe::Plan> plans_of(const uint8_t* data, size_t size) {
  namespace ip = infinipipe;
  namespace fz = infinipipe::fuzz;
  static const std::string path = fz::scratch_path("plan");
  fz::write_file(path, data, size);
  std::vector<ip::Plan> plans;
  try {
    plans.push_back(ip::load_plan(path));
  } catch (const ip::Error&) {
  }
  auto j = fz::parse_json(data, size);
  if (j && j->is_object() && j->erase("hash") == 1) {
    try {
      plans.push_back(j->get<ip::Plan>());
    } catch (const ip::Error&) {
    }
  }
  return plans;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  namespace ip = infinipipe;
  namespace fz = infinipipe::fuzz;
  for (const ip::Plan& plan : plans_of(data, size)) {
    fz::expect(nlohmann::json(plan).get<ip::Plan>().hash() == plan.hash(),
               "a plan's hash changed on a JSON round trip");
    try {
      plan.validate();
    } catch (const ip::Error&) {
      continue;
    }
    try {
      simulate_valid(plan);
    } catch (const ip::Error&) {
    }
  }
  return 0;
}
