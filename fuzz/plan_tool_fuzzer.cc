// The plan tool's command line (src/tools/plan_tool.cc): the input is its arguments, one per
// line. The tool must exit 0, 2 or 3 and never throw or crash. Each input's planning is bounded
// through the tool's `admit` hook (small steps, no CBC); the planner's own bounds on large steps
// are issue 15's item 0, not this fuzzer's.
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <sstream>
#include <string>
#include <vector>

#include "fuzz_support.h"
#include "tools/plan_tool.h"

namespace {

namespace tools = infinipipe::tools;

bool small_enough(const tools::PlanToolArgs& a) {
  return a.batch <= 8 && a.context <= 2048 && a.steps <= 2 && a.stages <= 4 && a.max_k <= 4 &&
         a.recompute_seconds == 0 && a.layers_per_stage.size() <= 4;
}

}  // namespace

// Files the tool reads or writes (--lengths, --step-lengths, --model, --plan, --trace) live in an
// empty directory of this process's own, and no argument may name a path elsewhere.
extern "C" int LLVMFuzzerInitialize(int*, char***) {
  const std::string dir = infinipipe::fuzz::scratch_path("plan_tool_dir");
  std::system(("mkdir -p " + dir).c_str());
  if (chdir(dir.c_str()) != 0) std::abort();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  if (text.find('/') != std::string::npos || text.find('\0') != std::string::npos) return 0;
  std::vector<std::string> args = {"infinipipe-plan"};
  std::istringstream lines(text);
  for (std::string line; std::getline(lines, line);) args.push_back(line);
  if (args.size() > 40) return 0;
  std::vector<const char*> argv;
  for (const std::string& a : args) argv.push_back(a.c_str());
  std::ostringstream out, err;
  const int code =
      tools::plan_tool(static_cast<int>(argv.size()), argv.data(), out, err, small_enough);
  infinipipe::fuzz::expect(
      code == tools::kExitPlanned || code == tools::kExitError || code == tools::kExitInfeasible,
      "the plan tool returned an exit code it does not document");
  infinipipe::fuzz::expect(code != tools::kExitError || !err.str().empty(),
                           "the plan tool failed without saying why");
  return 0;
}
