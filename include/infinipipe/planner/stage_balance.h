#pragma once
// Layers per pipeline stage chosen from per-stage costs (docs/cluster_study.md, "Balanced
// stages"). The first stage also embeds and the last runs the final norm, the LM head and the
// loss, so with an even split every other stage waits on the last one. Layers are identical, so a
// stage's compute over a workload is l_p * t_p + e_p: t_p one layer's forward and backward over
// the workload (the same on every stage unless the layout gives stages different all-to-all
// links), e_p the embedding (first stage) and the head (last). Minimising the busiest stage,
// max_p (l_p t_p + e_p) with every l_p >= 1 and sum l_p = layers, is solved exactly by water
// filling: start at one layer each and give each further layer to the stage it leaves least
// busy (the k-th layer given is the k-th smallest marginal load, the threshold argument for
// min-max of non-decreasing separable costs).
//
// That minimises compute, not memory: under 1F1B the first stage holds the most chunks in flight,
// so a split with fewer layers there can recompute less. choose_layer_split plans the sample
// steps on a few candidate splits (the even one, the balanced one, and the balanced one with a
// layer moved off the first or the last stage) and keeps the fastest predicted; deterministic.
#include <cstdint>
#include <string>
#include <vector>

#include "infinipipe/cost/cost_model.h"
#include "infinipipe/planner/planner.h"

namespace infinipipe {

// One workload's compute per stage, without recompute, in seconds of one rank.
struct StageWork {
  std::vector<double> layer_s;  // per stage: one layer's forward and backward over the workload
  std::vector<double> fixed_s;  // per stage: embedding (first stage), head and loss (last)
  // Stage p's compute under `split`: split[p] * layer_s[p] + fixed_s[p].
  std::vector<double> stage_s(const std::vector<int>& split) const;
  double busiest_s(const std::vector<int>& split) const;  // the largest of stage_s
};

// The compute of `steps` (each a step's sequence lengths, whole sequences) on every stage of a
// pipeline with `cost`'s shape, coefficients, layout and stage count (its layer split is not
// used): per layer and sequence, the cost model's layer forward and backward with all-to-alls;
// per token the embedding and the head, forward and backward (g times the forward). One chunk
// per step, so the per-chunk overhead b counts once per step: a lower bound on any plan's.
StageWork stage_work(const std::vector<std::vector<int64_t>>& steps, const CostModel& cost);

// Layers per stage minimising work.busiest_s, every stage at least one layer (water filling,
// exact). Ties go to the later stage: under 1F1B an earlier stage holds more chunks in flight.
// Error when layers < stages or the work is malformed.
std::vector<int> balanced_layer_split(const StageWork& work, int layers);
// The same for `cost`'s model and stage count over `steps`.
std::vector<int> balanced_layer_split(const std::vector<std::vector<int64_t>>& steps,
                                      const CostModel& cost);

// `cost` with another layer split (shape, coefficients and layout kept).
CostModel with_layer_split(const CostModel& cost, const std::vector<int>& split);

struct LayerSplitCandidate {
  std::string name;  // "even", "balanced", "balanced, first stage -1", "balanced, last stage -1"
  std::vector<int> split;
  double bound_s = 0;      // mean over steps of the busiest stage's compute (stage_work)
  bool planned = false;    // false: skipped, its bound already no better than the best plan
  int feasible_steps = 0;  // steps EPP found a plan for
  double mean_step_s = 0;  // over the steps, when all were feasible
  std::string reason;      // the first infeasible step's, when one was
};

struct LayerSplitChoice {
  std::vector<int> split;  // the chosen candidate's
  std::string name;
  std::vector<LayerSplitCandidate> candidates;  // in the order listed below
  std::vector<PlanResult> plans;                // EPP's plan of every step on the chosen split
};

// The candidates of choose_layer_split, deduplicated (the first name kept), in this order:
// balanced, even, balanced with one layer moved from the first stage to the second, balanced
// with one layer moved from the last stage to the one before it.
std::vector<LayerSplitCandidate> layer_split_candidates(
    const std::vector<std::vector<int64_t>>& steps, const CostModel& cost);

// Plans every step with EPP (plan_epp, `options`) on each candidate split, in order of their
// bounds (ties: the order above), skipping a candidate whose bound is no less than the best mean
// step time found (no plan can beat its bound; with options.spread_head none is skipped, since
// the bound keeps the head on the last stage); keeps the candidate feasible on the most steps,
// then the least mean step time, then the earlier in the order above. Deterministic when
// `options` is (PlannerOptions::for_training). Error when `steps` is empty.
LayerSplitChoice choose_layer_split(const std::vector<std::vector<int64_t>>& steps,
                                    const CostModel& cost, const PlannerOptions& options);

}  // namespace infinipipe
