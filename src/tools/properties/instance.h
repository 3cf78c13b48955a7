#pragma once
// One random planning problem of the property benchmark (infinipipe-properties): a step's
// lengths, a model on a pipeline, a budget and a method with its knobs. Drawn from (seed, index)
// alone with our own integer arithmetic (no std:: distributions, whose results differ between
// standard libraries), so a reported index reproduces anywhere.
#include <cstdint>
#include <string>
#include <vector>

#include "infinipipe/cost/cost_model.h"
#include "infinipipe/planner/planner.h"

namespace infinipipe::properties {

// splitmix64: tiny, seedable per instance, and the same on every platform.
class Rng {
 public:
  explicit Rng(uint64_t seed) : state_(seed) {}
  uint64_t next();
  int64_t uniform(int64_t lo, int64_t hi);  // in [lo, hi]
  double unit();                            // in [0, 1)
  bool chance(double p) { return unit() < p; }
  // exp(uniform(log lo, log hi)): spreads draws evenly over orders of magnitude.
  double log_uniform(double lo, double hi);

 private:
  uint64_t state_;
};

// How the plan is made: EPP's whole search (reproducible with the plan tool, whose options it
// keeps to), EPP at one setting, or a baseline at one setting.
enum class Mode { kEppSearch, kEppAtSetting, kBaseline };
const char* to_string(Mode mode);

struct Instance {
  uint64_t seed = 0;
  int64_t index = 0;
  std::string model;     // a built-in ModelShape
  std::string hardware;  // a built-in Hardware
  std::vector<int> layers_per_stage;
  std::string lengths_source;  // how the lengths were drawn, for the report
  std::vector<int64_t> lengths;
  double memory_gib = 0;  // the budget as the plan tool takes it: bytes = gib * 2^30
  Mode mode = Mode::kEppSearch;
  Method method = Method::kEpp;
  Setting setting;
  PlannerOptions options;

  int stages() const { return static_cast<int>(layers_per_stage.size()); }
  CostModel cost() const;
};

Instance draw_instance(uint64_t seed, int64_t index);

// The instance's plan from the planner (infeasible results included); throws what it throws.
PlanResult plan_instance(const Instance& instance, const CostModel& cost);

// The command lines that reproduce an instance: this tool's, and for an EPP search the plan
// tool's (its lengths written to `lengths_path`).
std::string reproduce_command(const Instance& instance);
std::string plan_tool_command(const Instance& instance, const std::string& lengths_path);

}  // namespace infinipipe::properties
