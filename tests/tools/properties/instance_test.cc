// properties/instance.cc: random plans are a function of (seed, index) alone, spread over what
// the benchmark claims (models, stages 1..16, budgets below and above the need, every method),
// and the plan tool's command line carries the budget exactly.
#include "properties/instance.h"

#include <cstdlib>
#include <set>
#include <string>

#include <gtest/gtest.h>

namespace infinipipe::properties {
namespace {

TEST(Instance, TheSameSeedAndIndexGiveTheSameInstance) {
  for (int64_t index : {0, 7, 123456}) {
    const Instance a = draw_instance(5, index), b = draw_instance(5, index);
    EXPECT_EQ(a.lengths, b.lengths);
    EXPECT_EQ(a.layers_per_stage, b.layers_per_stage);
    EXPECT_EQ(a.memory_gib, b.memory_gib);
    EXPECT_EQ(a.mode, b.mode);
    EXPECT_TRUE(a.setting == b.setting);
  }
  EXPECT_NE(draw_instance(5, 1).lengths, draw_instance(6, 1).lengths);
}

TEST(Instance, DrawsSpanModelsStagesMethodsAndBudgets) {
  std::set<std::string> models;
  std::set<int> stages;
  std::set<int> modes;
  std::set<Method> methods;
  int below_state = 0;
  for (int64_t i = 0; i < 3000; ++i) {
    const Instance in = draw_instance(0, i);
    const CostModel cost = in.cost();
    models.insert(in.model);
    stages.insert(in.stages());
    modes.insert(static_cast<int>(in.mode));
    methods.insert(in.method);
    int layers = 0;
    for (int l : in.layers_per_stage) layers += l;
    ASSERT_EQ(layers, cost.shape().layers);
    ASSERT_GE(in.lengths.size(), 1u);
    if (in.options.memory_budget_bytes < cost.model_state_bytes(0)) ++below_state;
  }
  EXPECT_EQ(models, (std::set<std::string>{"tiny", "llama-7b", "llama-13b"}));
  EXPECT_EQ(*stages.begin(), 1);
  EXPECT_EQ(*stages.rbegin(), 16);
  EXPECT_EQ(modes.size(), 3u);
  EXPECT_EQ(methods.size(), 4u);
  EXPECT_GT(below_state, 0);  // some budgets cannot hold even the model state
}

TEST(Instance, ThePlanToolCommandCarriesTheExactBudget) {
  const Instance in = draw_instance(0, 3);
  const std::string command = plan_tool_command(in, "/tmp/instance_test.lengths");
  const size_t at = command.find("--memory-gib ");
  ASSERT_NE(at, std::string::npos);
  EXPECT_EQ(std::strtod(command.c_str() + at + 13, nullptr), in.memory_gib);
  EXPECT_NE(command.find("--stages " + std::to_string(in.stages())), std::string::npos);
}

}  // namespace
}  // namespace infinipipe::properties
