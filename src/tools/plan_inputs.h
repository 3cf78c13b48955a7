#pragma once
// The plan tool's inputs (private to the tool): the cost model --model, --hardware, --sp, --dp,
// --zero and --layers-per-stage describe, the default budget, and the steps to plan.
#include <cstdint>
#include <string>
#include <vector>

#include "infinipipe/cost/cost_model.h"
#include "infinipipe/cost/hardware.h"
#include "plan_tool.h"

namespace infinipipe::tools {

// --model is a built-in name, a model shape JSON, or a whole cost model JSON (measured
// coefficients), in which case --hardware is not used for the coefficients.
CostModel build_cost_model(const PlanToolArgs& args);
// --hardware, and its device memory in GiB. Only called after build_cost_model has accepted it.
Hardware named_hardware(const PlanToolArgs& args);
double default_memory_gib(const PlanToolArgs& args);
// The steps to plan. --step-lengths is one step, as given. --lengths is a distribution like the
// built-in ones: both give --steps steps of --batch lengths, truncated to --context, step i
// drawn with seed + i, and the static baselines are then chosen over all of them.
std::vector<std::vector<int64_t>> load_steps(const PlanToolArgs& args);
// "a, b, c": the names a message lists.
std::string join(const std::vector<std::string>& names);

}  // namespace infinipipe::tools
