// Plans one step of LLaMA-13B on 8 A800 stages with EPP, from an installed InfiniPipe: 512
// sequences drawn from the built-in Wikipedia distribution, 96K context, 80 GiB per stage.
#include <cstdio>
#include <vector>

#include "infinipipe/cost/cost_model.h"
#include "infinipipe/cost/hardware.h"
#include "infinipipe/cost/model_shape.h"
#include "infinipipe/data/length_sampler.h"
#include "infinipipe/planner/planner.h"

int main() {
  using namespace infinipipe;
  const int stages = 8;
  CostModel cost =
      CostModel::analytic(ModelShape::builtin("llama-13b"), Hardware::builtin("a800"), stages);
  PlannerOptions options;
  options.num_stages = stages;
  options.memory_budget_bytes = 80.0 * (1ull << 30);
  std::vector<int64_t> lengths = sample_lengths("wikipedia", 512, 98304, /*seed=*/0);
  Plan plan = plan_step(Method::kEpp, lengths, cost, options);
  std::printf("EPP: %zu chunks in %zu waves, step %.3f s (simulated), bubble %.1f%%, plan %s\n",
              plan.chunks.size(), plan.waves.size(), plan.step_time_s, 100 * plan.bubble_fraction,
              plan.hash().c_str());
  return 0;
}
