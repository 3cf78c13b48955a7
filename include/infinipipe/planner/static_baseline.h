#pragma once
// Baselines as their users run them: one setting (cap, k, chunk size, recompute count) for the
// whole run, the one with the least total predicted time that fits every step of the evaluated
// set, so the recompute count is what the worst step needs. Also each step's own best setting,
// a more generous comparison.
#include <cstdint>
#include <string>
#include <vector>

#include "infinipipe/cost/cost_model.h"
#include "infinipipe/planner/planner.h"

namespace infinipipe {

// Candidate settings of a baseline method (uniform_recompute left at -1):
//   batch:     token_cap in {1, 1.25, 1.5, 2, 3, 4} x longest, rounded up to a multiple of 1024
//   seq1f1b:   the same caps x k in {1, 2, 4, 8, 16, 32}
//   chunkflow: chunk_tokens in {1024, 2048, ..., 65536}
// `longest` is the longest sequence over all evaluated steps.
std::vector<Setting> candidate_settings(Method method, int64_t longest);

struct BaselineComparison {
  Method method = Method::kBatch;
  // Static: one setting for every step.
  bool static_feasible = false;
  std::string static_reason;             // when no candidate fits every step
  Setting static_setting;                // uniform_recompute = the worst step's need
  std::vector<PlanResult> static_plans;  // per step
  double static_total_s = 0;
  // Per step: each step's best candidate with its own smallest recompute count, among the
  // static candidates and those sized from the step's own longest sequence.
  std::vector<PlanResult> per_step_best;  // infeasible entries when no candidate fits the step
  int candidates_tried = 0;               // static candidates
};

BaselineComparison compare_baseline(Method method, const std::vector<std::vector<int64_t>>& steps,
                                    const CostModel& cost, const PlannerOptions& options);

}  // namespace infinipipe
