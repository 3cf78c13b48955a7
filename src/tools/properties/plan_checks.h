#pragma once
// The properties every plan the planner calls feasible must have, checked after the fact: the
// plan's own validation and the schedule validator, then our own walk of the plan (a second
// opinion that shares no code with them), a simulation, and memory against the budget.
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "infinipipe/cost/cost_model.h"
#include "infinipipe/plan/plan.h"

namespace infinipipe::properties {

struct Violation {
  std::string kind;  // one of the kinds below
  std::string detail;
};

// Kinds, so that a summary can count each even when it is zero.
//   validate      Plan::validate threw
//   schedule      validate_schedule threw
//   coverage      a token in no slice or in two, a slice outside its sequence, two slices of one
//                 sequence in one chunk, or a chunk or wave that is not whole
//   slice order   on some stage a later slice of a sequence forwards before, or backwards after,
//                 an earlier one; or a chunk not forwarded and backwarded exactly once
//   deadlock      the simulator threw (it throws on a deadlock)
//   memory        a stage's simulated peak, or the bytes we count ourselves, over the budget
//   accounting    the bytes we count ourselves above the simulator's peak (it misses some)
//   prediction    the plan's predicted step time or peaks differ from its simulation
//   planner threw the planner threw on input it must accept (reported by the caller)
//   timed out     the planner did not return within the per-plan limit (the caller's)
//   crashed       the process planning it died (the caller's)
const std::vector<std::string>& violation_kinds();

// Every violation found in a plan said to be feasible for `lengths` at `budget_bytes`.
std::vector<Violation> check_plan(const Plan& plan, const std::vector<int64_t>& lengths,
                                  const CostModel& cost, double budget_bytes);

// [[kind, detail], ...], details cut to a length a summary can hold.
nlohmann::json violations_json(const std::vector<Violation>& violations);

}  // namespace infinipipe::properties
