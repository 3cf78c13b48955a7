#pragma once
// The planning-time sweep of the property benchmark: one sequence per step, from 1K tokens up to
// the longest whose K/V buffers fit the budget, at several budgets, models and stage counts,
// planned by EPP with the plan tool's defaults. Planning any of these must take seconds.
#include <cstdint>
#include <string>
#include <vector>

namespace infinipipe::properties {

struct SweepCase {
  std::string model;
  std::string hardware;
  int stages = 1;
  double memory_gib = 0;
  int64_t length = 0;
  bool reported = false;  // a slow case an issue reported, swept on purpose
};

// smoke: the tiny model only, up to 16K tokens (CI).
std::vector<SweepCase> sweep_cases(bool smoke);

// The longest single sequence whose K/V buffers and their gradients fit on every stage beside
// the model state (the planner rejects longer ones at once); 0 when the state alone does not fit.
int64_t longest_fitting(const std::string& model, const std::string& hardware, int stages,
                        double memory_gib);

// Plans the case and checks the plan (plan_checks.h); a JSON line: seconds, feasible, reason or
// violations.
std::string evaluate_sweep_case(const SweepCase& c);

std::string plan_tool_command(const SweepCase& c, const std::string& lengths_path);

}  // namespace infinipipe::properties
