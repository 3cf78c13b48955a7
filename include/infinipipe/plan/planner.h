#pragma once
// Plans one step: EPP (sweep the slice count K, group chains into waves, stage-aware
// checkpointing, keep what the simulator predicts fastest) and the baselines at a given setting.
// A method that cannot fit memory is reported infeasible with the reason, never thrown, so a
// comparison of several methods always completes; malformed input (empty batch, bad lengths,
// options that contradict the cost model) throws Error.
#include <cstdint>
#include <string>
#include <vector>

#include "infinipipe/chunking/sequence_processor.h"
#include "infinipipe/cost/cost_model.h"
#include "infinipipe/plan/plan.h"

namespace infinipipe {

struct PlannerOptions {
  int num_stages = 1;                 // must equal the cost model's
  double memory_budget_bytes = 0;     // per stage, model state included
  int max_k = 32;                     // EPP: largest slice count tried
  double checkpoint_time_limit_s = 0.2;  // EPP: CBC time limit for the winner's checkpointing
  // EPP: chunk token caps swept jointly with K (0 = only the mesh's own cap T_m); see
  // EppChunkingOptions::max_chunk_tokens. Caps at or above a K's T_m are that K's plan again.
  std::vector<int64_t> chunk_token_caps = {0, 16384, 8192, 4096, 2048, 1024};
};

struct PlanResult {
  bool feasible = false;
  std::string reason;  // when infeasible
  Plan plan;           // when feasible
};

// EPP. Slice counts whose slices would be shorter than kMinSliceTokens are not tried.
constexpr int64_t kMinSliceTokens = 128;
PlanResult plan_epp(const std::vector<int64_t>& lengths, const CostModel& cost,
                    const PlannerOptions& options);

// EPP at one chunking setting, without the sweep: the same waves, scheduling and checkpoint
// choice as plan_epp gives its winner. For tests and benchmarks that compare settings.
PlanResult plan_epp_at(const std::vector<int64_t>& lengths, const EppChunkingOptions& chunking,
                       const CostModel& cost, const PlannerOptions& options);

// A baseline (kBatch, kSeq1F1B, kChunkFlow) at one setting: its chunking, one wave, 1F1B,
// uniform recompute (setting.uniform_recompute layers on every stage and chunk, capped at the
// stage's layers, or the smallest count that fits when it is -1).
PlanResult plan_with_setting(Method method, const std::vector<int64_t>& lengths,
                             const Setting& setting, const CostModel& cost,
                             const PlannerOptions& options);

}  // namespace infinipipe
