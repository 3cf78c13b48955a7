#pragma once
// The plan tool's report of each planned step (private to the tool): a row per method and step,
// as a JSON line or in the table, with the layer splits weighed and, for EPP plans that
// recompute, every checkpointing program compared on the plan's schedule.
#include <cstdint>
#include <ostream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "infinipipe/cost/cost_model.h"
#include "infinipipe/planner/offload_plan.h"
#include "infinipipe/planner/planner.h"
#include "infinipipe/planner/stage_balance.h"
#include "infinipipe/planner/v_shape_plan.h"
#include "plan_tool.h"

namespace infinipipe::tools {

struct Row {
  int step = 0;
  Method method = Method::kEpp;
  bool is_static = false;
  const PlanResult* result = nullptr;
};

nlohmann::json row_json(const Row& row, const std::vector<int64_t>& lengths, double budget);
void print_row(std::ostream& out, const Row& row, double budget);

// For an EPP plan that recomputes: each checkpointing program solved again on the plan's own
// schedule and simulated, to show what the choice by simulation is worth.
nlohmann::json checkpoint_comparison(const Plan& plan, const CostModel& cost, double budget,
                                     double time_limit_s);

// --v-shape: a step's V-shaped what-if (planner/v_shape_plan.h) in EPP's JSON line, as a line
// under EPP's row, and its mean over the steps where it fits and beats EPP (EPP's own elsewhere).
nlohmann::json v_shape_json(const VShapePlan& v);
void print_v_shape(std::ostream& out, const VShapePlan& v);
// --offload-from: a step's offload what-if (planner/offload_plan.h), the same three ways.
nlohmann::json offload_json(const OffloadPlan& o);
void print_offload(std::ostream& out, const OffloadPlan& o);
void print_offload_mean(std::ostream& out, const std::vector<OffloadPlan>& o,
                        const std::vector<PlanResult>& epp);
void print_v_shape_mean(std::ostream& out, const std::vector<VShapePlan>& v,
                        const std::vector<PlanResult>& epp);

// The layer splits --layers-per-stage balanced weighed, in JSON and as text.
nlohmann::json candidates_json(const LayerSplitChoice& choice);
void print_candidates(std::ostream& out, const LayerSplitChoice& choice);

// value with `digits` decimals, and a list of them separated by spaces.
std::string fixed(double value, int digits);
std::string list(const std::vector<double>& values, int digits);

}  // namespace infinipipe::tools
