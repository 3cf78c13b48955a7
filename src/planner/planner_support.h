#pragma once
// Small pieces every planning path shares (internal to the plan part): input checks, clocks, the
// plan record of a simulated schedule, and chunk-list helpers.
#include <chrono>
#include <limits>
#include <string>
#include <vector>

#include "infinipipe/planner/planner.h"
#include "infinipipe/recompute/recompute_planner.h"
#include "infinipipe/sim/simulator.h"

namespace infinipipe::planning {

constexpr double kInfinity = std::numeric_limits<double>::infinity();

double elapsed_ms(std::chrono::steady_clock::time_point since);
// CPU time of the calling thread so far (PlannerReport::cpu_ms says why this clock).
double thread_cpu_ms();

// One planning call's report: its clocks start when it is made, the planner counts into
// `report`, and finish() writes it all into the call's plan.
struct PlanningCall {
  std::chrono::steady_clock::time_point wall_start = std::chrono::steady_clock::now();
  double cpu_start_ms = thread_cpu_ms();
  PlannerReport report;
  // The plan's planning time (wall clock) and report: the counts, the CPU time until now, and
  // the step time's lower bound.
  void finish(Plan& plan, const CostModel& cost) const;
};
// Error unless the lengths, the options and the cost model agree.
void check_inputs(const std::vector<int64_t>& lengths, const CostModel& cost,
                  const PlannerOptions& options);
PlanResult infeasible(std::string reason);
// Error when options.cancelled is set: called between the search's candidates.
void check_not_cancelled(const PlannerOptions& options);
Plan make_plan(Method method, const Setting& setting, const std::vector<int64_t>& lengths,
               std::vector<Chunk> chunks, std::vector<Wave> waves, Schedule schedule,
               Recompute recompute, const CostModel& cost, const SimResult& sim,
               std::string solver);
// The search's work on this thread so far, in chunk-stages (PlannerOptions::search_work_limit):
// every simulation and every checkpoint program adds its chunks x stages. Per thread, since a
// trainer plans ahead on another one; plan_epp starts it at 0.
int64_t& search_work();
bool search_work_exhausted(const PlannerOptions& options);
// Whether plan_epp leaves unsimulated the candidates over the budget for sure that get no
// recompute search (epp_search.cc): true unless a test turns it off to see the same plans
// without it. Per thread, as search_work.
bool& skip_hopeless_simulations();
// Whether plan_epp leaves unchunked the capped settings that cannot give a plan (epp_search.cc:
// nothing fits without recompute, and their cap gives more chunks than recompute is tried on):
// true unless a test turns it off to see the same plans without it. Per thread.
bool& skip_unplannable_settings();
// Whether plan_epp drops unsimulated the candidates that cannot give a plan (epp_search.cc: over
// the budget as they are, and with every layer recomputed in one wave and in every wave holding
// their longest chains): true unless a test turns it off to compare. Per thread.
bool& drop_unplannable_candidates();
// The simulator without events, checking `budget`; counts its work.
// With `stop_above`, it may stop once the step is known to take longer (SimResult::stopped_early).
SimResult predict(const Schedule& schedule, const std::vector<Chunk>& chunks, const CostModel& cost,
                  const Recompute& recompute, double budget,
                  double stop_above = std::numeric_limits<double>::infinity(),
                  std::vector<double> stop_floor = {});
// predict for a recompute the checkpoint planner has just returned on this schedule: its byte
// check measured the stages' peaks with the simulator's sums (RecomputeResult::peaks), so the
// simulation takes them instead of measuring again.
SimResult predict_checked(const Schedule& schedule, const std::vector<Chunk>& chunks,
                          const CostModel& cost, const RecomputeResult& checked, double budget);
// Shortest slice of a mesh; short slices under-use the device, so the search stops before them.
int64_t shortest_slice(const SplitMesh& mesh);
std::string label(const Setting& setting);  // an EPP setting's text
Wave all_chunks(size_t count);              // one wave of chunks 0 .. count-1
bool same_chunks(const std::vector<Chunk>& a, const std::vector<Chunk>& b);

}  // namespace infinipipe::planning
