#include "sweep.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>

#include <nlohmann/json.hpp>

#include "infinipipe/cost/hardware.h"
#include "infinipipe/cost/model_shape.h"
#include "infinipipe/planner/planner.h"
#include "plan_checks.h"

namespace infinipipe::properties {

namespace {

constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;

CostModel cost_of(const std::string& model, const std::string& hardware, int stages) {
  return CostModel::analytic(ModelShape::builtin(model), Hardware::builtin(hardware), stages);
}

// 1K, 2K, 4K, ... up to the limit, the midpoints of the top two octaves (where planning gets
// slow) and the limit itself.
std::vector<int64_t> sweep_lengths(int64_t limit, int64_t cap) {
  const int64_t top = std::min(limit, cap);
  std::vector<int64_t> lengths;
  for (int64_t n = 1024; n <= top; n *= 2) lengths.push_back(n);
  const size_t doublings = lengths.size();
  for (size_t k = doublings >= 2 ? doublings - 2 : 0; k < doublings; ++k)
    if (lengths[k] * 3 / 2 <= top) lengths.push_back(lengths[k] * 3 / 2);
  if (limit <= cap && top >= 1024) lengths.push_back(top);
  std::sort(lengths.begin(), lengths.end());
  lengths.erase(std::unique(lengths.begin(), lengths.end()), lengths.end());
  return lengths;
}

}  // namespace

int64_t longest_fitting(const std::string& model, const std::string& hardware, int stages,
                        double memory_gib) {
  const CostModel cost = cost_of(model, hardware, stages);
  const double budget = memory_gib * kGiB;
  constexpr int64_t kProbe = 1 << 20;
  double longest = std::numeric_limits<double>::infinity();
  for (int p = 0; p < stages; ++p) {
    // K/V buffer plus its gradient during the backward, linear in the length.
    const double per_token = 2 * cost.kv_buffer_bytes(kProbe, p) / kProbe;
    longest = std::min(longest, (budget - cost.model_state_bytes(p)) / per_token);
  }
  return longest < 1 ? 0 : static_cast<int64_t>(longest);
}

std::vector<SweepCase> sweep_cases(bool smoke) {
  struct Setup {
    std::string model, hardware;
    std::vector<int> stages;
    std::vector<double> budgets_gib;
  };
  std::vector<Setup> setups;
  if (smoke) {
    setups.push_back({"tiny", "cpu", {2, 4}, {1}});
  } else {
    setups.push_back({"tiny", "cpu", {2, 8}, {1, 12, 64}});
    setups.push_back({"llama-7b", "a800", {2, 4, 8, 16}, {40, 80}});
    setups.push_back({"llama-13b", "a800", {4, 8, 16}, {40, 80}});
  }
  // Past 4M tokens the K/V buffers of even the tiny model take gigabytes per stage: the
  // planner's cost there is its piece counts, already seen at 4M.
  const int64_t cap = smoke ? 16384 : int64_t{4} << 20;
  std::vector<SweepCase> cases;
  for (const Setup& s : setups)
    for (int stages : s.stages)
      for (double gib : s.budgets_gib)
        for (int64_t n : sweep_lengths(longest_fitting(s.model, s.hardware, stages, gib), cap))
          cases.push_back({s.model, s.hardware, stages, gib, n, false});
  if (!smoke) {
    // The slow and never-returning single sequences reported in issue 15.
    cases.push_back({"tiny", "cpu", 2, 64, 960000, true});
    cases.push_back({"tiny", "cpu", 2, 12, 400000, true});
    cases.push_back({"llama-7b", "a800", 16, 80, 256000, true});
  }
  return cases;
}

std::string evaluate_sweep_case(const SweepCase& c) {
  const CostModel cost = cost_of(c.model, c.hardware, c.stages);
  PlannerOptions options;  // the plan tool's defaults
  options.num_stages = c.stages;
  options.memory_budget_bytes = c.memory_gib * kGiB;
  const std::vector<int64_t> lengths = {c.length};
  nlohmann::json j;
  const auto started = std::chrono::steady_clock::now();
  try {
    const PlanResult result = plan_epp(lengths, cost, options);
    j["seconds"] =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
    j["feasible"] = result.feasible;
    if (!result.feasible) {
      j["reason"] = result.reason.substr(0, 300);
    } else {
      j["setting"] = describe(Method::kEpp, result.plan.setting);
      j["chunks"] = result.plan.chunks.size();
      j["violations"] =
          violations_json(check_plan(result.plan, lengths, cost, options.memory_budget_bytes));
    }
  } catch (const std::exception& e) {
    j["seconds"] =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
    j["violations"] = violations_json({{"planner threw", e.what()}});
  }
  return j.dump();
}

std::string plan_tool_command(const SweepCase& c, const std::string& lengths_path) {
  std::ofstream(lengths_path) << c.length << "\n";
  char gib[32];
  std::snprintf(gib, sizeof gib, "%g", c.memory_gib);
  return "build/infinipipe-plan --step-lengths " + lengths_path + " --model " + c.model +
         " --hardware " + c.hardware + " --stages " + std::to_string(c.stages) + " --memory-gib " +
         gib + " --method epp";
}

}  // namespace infinipipe::properties
