#pragma once
// The plan tool (infinipipe-plan) as a function of its command line and output streams, so that
// the binary and the fuzzer (fuzz/plan_tool_fuzzer.cc) run the same code.
#include <cstdint>
#include <functional>
#include <ostream>
#include <string>
#include <vector>

namespace infinipipe::tools {

// Exit codes, also listed by --help and in README.md, "The plan tool".
constexpr int kExitPlanned = 0;     // at least one requested method found a feasible plan
constexpr int kExitError = 2;       // bad command line or input file; nothing was planned
constexpr int kExitInfeasible = 3;  // every requested method is infeasible (output still printed)

constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;

struct PlanToolArgs {
  std::string lengths_file;       // --lengths: a corpus to sample each step's lengths from
  std::string step_lengths_file;  // --step-lengths: the lengths of one whole step
  std::string lengths_field;      // --lengths-field: a JSON Lines file's length field
  std::string distribution;
  int batch = 512;
  int64_t context = 98304;
  uint64_t seed = 0;
  int steps = 1;
  std::string model = "llama-13b";
  std::string hardware = "a800";
  int stages = 8;             // d_p
  int sp = 1;                 // --sp: d_s, Ulysses ranks per stage
  int dp = 1;                 // --dp: d_r, data-parallel replicas
  int zero = 1;               // --zero: ZeRO level over each stage's gradient group
  int gpus_per_node = 8;      // --gpus-per-node
  bool layout_given = false;  // any of the four above on the command line
  bool memory_given = false;  // without --memory-gib, the hardware's device memory
  double memory_gib = 0;
  std::vector<int> layers_per_stage;  // empty: even, unless balanced
  bool balanced = false;              // --layers-per-stage balanced (planner/stage_balance.h)
  std::string method = "all";
  int max_k = 0;            // set from PlannerOptions
  int64_t search_work = 0;  // set from PlannerOptions
  bool waves_back_to_back = false;
  bool spread_head = false;         // --spread-head (PlannerOptions::spread_head)
  std::string zero_bubble = "off";  // --zero-bubble (PlannerOptions::zero_bubble)
  bool ideal_even_head = false;     // --ideal-even-head (CostModel::with_ideal_even_head)
  bool v_shape = false;             // --v-shape (planner/v_shape_plan.h)
  double offload_from_gib = 0;      // --offload-from (planner/offload_plan.h); 0: off
  bool lean_layer = false;          // --lean-layer (ModelShape::lean_layer)
  double recompute_seconds = 0;     // set from PlannerOptions
  bool json = false;
  std::string plan_out;
  std::string trace_out;
};

// Runs the tool on argv (argv[0] the program name) and returns its exit code; errors go to
// `err`, never out as exceptions. `admit`, when given, sees the parsed and checked arguments
// before anything is planned and may stop the run (exit 0): the fuzzer bounds its work per input
// with it.
int plan_tool(int argc, const char* const* argv, std::ostream& out, std::ostream& err,
              const std::function<bool(const PlanToolArgs&)>& admit = {});

}  // namespace infinipipe::tools
