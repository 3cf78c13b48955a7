#pragma once
// Which checkpointing program a candidate's schedule gets (internal to the plan part): each
// program is solved and the simulator decides, because the tied program's objective (every
// recomputed layer delays the pipeline) is not the step time (docs/design.md, "Recompute
// planning").
#include <string>
#include <vector>

#include "candidate.h"
#include "infinipipe/planner/planner.h"

namespace infinipipe::planning {

RecomputeOptions recompute_options(RecomputeMethod method, const PlannerOptions& options);

// While one is in scope (a planning call's, on its thread), best_recompute keeps its last
// few answers and gives one again for the same method, schedule, chunks, cost model and options
// instead of solving and simulating anew: plan_with_recompute weighs a candidate's one wave, and
// the grouping DP can choose that one wave again (on the heavy mix's second step in issue 12's
// benchmark, a 576-chunk candidate's). Scoped so that no answer outlives the cost model it used.
class SolveMemo {
 public:
  struct Solved;
  SolveMemo();
  ~SolveMemo();
  SolveMemo(const SolveMemo&) = delete;
  SolveMemo& operator=(const SolveMemo&) = delete;
  // The method's recompute on `schedule`, and its simulation when it fits in bytes.
  static Solved solved(const Schedule& schedule, const std::vector<Chunk>& chunks,
                       RecomputeMethod method, const CostModel& cost,
                       const PlannerOptions& options);

 private:
  struct Entry;
  static Solved solve(const Schedule& schedule, const std::vector<Chunk>& chunks,
                      RecomputeMethod method, const CostModel& cost, const PlannerOptions& options);
  std::vector<Entry> entries_;  // oldest first
  SolveMemo* outer_;
};

// Recompute on `schedule` by each method, kept by simulated step time (ties: the earlier
// method). The diagonal-tied program charges every recomputed layer as a full delay to the
// pipeline, but a backward with slack after it absorbs its recompute, so the untied greedy (or
// the tied greedy instead of the exact tied solve) can give the faster step. False, with the
// first method's reason, when none fits.
bool best_recompute(const Schedule& schedule, const std::vector<Chunk>& chunks,
                    const std::vector<RecomputeMethod>& methods, const CostModel& cost,
                    const PlannerOptions& options, RecomputeResult& checkpoint, SimResult& sim,
                    std::string& reason);

// Recompute during the search: the tied greedy, and the untied greedy too when the tied answer
// is within kUntiedWithin of the time to beat (the untied one can be faster by a few percent, see
// best_recompute; far behind, it cannot catch up, and on big steps each solve costs tens of
// milliseconds). The winner also gets the exact tied program (choose_recompute).
bool search_recompute(Candidate& cand, double time_to_beat, const CostModel& cost,
                      const PlannerOptions& options, std::string& why);

// Other recompute programs for a plan that recomputes (with the tied greedy's so far), kept
// only if the simulator finds them faster.
void choose_recompute(Candidate& cand, const std::vector<RecomputeMethod>& methods,
                      const CostModel& cost, const PlannerOptions& options);

}  // namespace infinipipe::planning
