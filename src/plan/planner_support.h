#pragma once
// Small pieces every planning path shares (internal to the plan part): input checks, the plan
// record of a simulated schedule, and chunk-list helpers.
#include <chrono>
#include <limits>
#include <string>
#include <vector>

#include "infinipipe/plan/planner.h"
#include "infinipipe/sim/simulator.h"

namespace infinipipe::planning {

constexpr double kInfinity = std::numeric_limits<double>::infinity();

double elapsed_ms(std::chrono::steady_clock::time_point since);
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
// The simulator without events, checking `budget`.
SimResult predict(const Schedule& schedule, const std::vector<Chunk>& chunks, const CostModel& cost,
                  const Recompute& recompute, double budget);
// Shortest slice of a mesh; short slices under-use the device, so the search stops before them.
int64_t shortest_slice(const SplitMesh& mesh);
std::string label(const Setting& setting);  // an EPP setting's text
Wave all_chunks(size_t count);              // one wave of chunks 0 .. count-1
bool same_chunks(const std::vector<Chunk>& a, const std::vector<Chunk>& b);

}  // namespace infinipipe::planning
