#include "planner_support.h"

#include <algorithm>
#include <cmath>
#include <ctime>

#include "infinipipe/core/error.h"
#include "zero_bubble_plan.h"

namespace infinipipe::planning {

double elapsed_ms(std::chrono::steady_clock::time_point since) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - since)
      .count();
}

double thread_cpu_ms() {
  timespec now{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &now);
  return 1e3 * static_cast<double>(now.tv_sec) + 1e-6 * static_cast<double>(now.tv_nsec);
}

void PlanningCall::finish(Plan& plan, const CostModel& cost) const {
  plan.plan_ms = elapsed_ms(wall_start);
  plan.planner = report;
  plan.planner.cpu_ms = thread_cpu_ms() - cpu_start_ms;
  const std::vector<int> heads = plan.schedule.head_stages(static_cast<int>(plan.chunks.size()));
  const bool spread = std::any_of(heads.begin(), heads.end(), [](int o) { return o != -1; });
  set_bound(plan.planner, plan.lengths, cost, plan.step_time_s, spread);
}

void check_inputs(const std::vector<int64_t>& lengths, const CostModel& cost,
                  const PlannerOptions& options) {
  check_lengths(lengths);
  check(options.num_stages >= 1,
        "the number of stages must be at least 1, got " + std::to_string(options.num_stages));
  check(options.num_stages == cost.num_stages(),
        "the planner was asked for " + std::to_string(options.num_stages) +
            " stages but the cost model splits the layers over " +
            std::to_string(cost.num_stages()) + "; build the cost model for the same stages");
  check(options.memory_budget_bytes > 0 && std::isfinite(options.memory_budget_bytes),
        "the memory budget must be a finite positive number of bytes, got " +
            std::to_string(options.memory_budget_bytes));
  check(options.max_k >= 1, "max_k must be at least 1, got " + std::to_string(options.max_k));
  zero_bubble_choice(options);  // Error on an unknown mode
}

void check_not_cancelled(const PlannerOptions& options) {
  check(options.cancelled == nullptr || !options.cancelled->load(std::memory_order_relaxed),
        "planning was interrupted");
}

PlanResult infeasible(std::string reason) {
  PlanResult r;
  r.feasible = false;
  r.reason = std::move(reason);
  return r;
}

Plan make_plan(Method method, const Setting& setting, const std::vector<int64_t>& lengths,
               std::vector<Chunk> chunks, std::vector<Wave> waves, Schedule schedule,
               Recompute recompute, const CostModel& cost, const SimResult& sim,
               std::string solver) {
  Plan plan;
  plan.method = method;
  plan.setting = setting;
  plan.lengths = lengths;
  plan.chunks = std::move(chunks);
  plan.waves = std::move(waves);
  plan.schedule = std::move(schedule);
  plan.recompute = std::move(recompute);
  plan.layers_per_stage = cost.layers_per_stage();
  plan.set_prediction(sim);
  plan.checkpoint_solver = std::move(solver);
  return plan;
}

int64_t& search_work() {
  thread_local int64_t work = 0;
  return work;
}

bool& skip_hopeless_simulations() {
  thread_local bool skip = true;
  return skip;
}

bool& skip_unplannable_settings() {
  thread_local bool skip = true;
  return skip;
}

bool& drop_unplannable_candidates() {
  thread_local bool drop = true;
  return drop;
}

bool search_work_exhausted(const PlannerOptions& options) {
  return options.search_work_limit > 0 && search_work() >= options.search_work_limit;
}

namespace {

SimResult counted_simulation(const Schedule& schedule, const std::vector<Chunk>& chunks,
                             const CostModel& cost, const Recompute& recompute, double budget,
                             double stop_above, std::vector<double> stop_floor,
                             const MemoryPeaks* known_peaks) {
  search_work() += static_cast<int64_t>(chunks.size()) * schedule.num_stages();
  SimOptions sim_options;
  sim_options.memory_budget_bytes = budget;
  sim_options.stop_above = stop_above;
  sim_options.stop_floor = std::move(stop_floor);
  sim_options.record_events = false;
  sim_options.known_peaks = known_peaks;
  return simulate(schedule, chunks, cost, recompute, sim_options);
}

}  // namespace

SimResult predict(const Schedule& schedule, const std::vector<Chunk>& chunks, const CostModel& cost,
                  const Recompute& recompute, double budget, double stop_above,
                  std::vector<double> stop_floor) {
  return counted_simulation(schedule, chunks, cost, recompute, budget, stop_above,
                            std::move(stop_floor), nullptr);
}

SimResult predict_checked(const Schedule& schedule, const std::vector<Chunk>& chunks,
                          const CostModel& cost, const RecomputeResult& checked, double budget) {
  return counted_simulation(schedule, chunks, cost, checked.recompute, budget, kInfinity, {},
                            checked.peaks.bytes.empty() ? nullptr : &checked.peaks);
}

int64_t shortest_slice(const SplitMesh& mesh) {
  int64_t shortest = mesh.boundaries.back();
  for (size_t i = 1; i < mesh.boundaries.size(); ++i)
    shortest = std::min(shortest, mesh.boundaries[i] - mesh.boundaries[i - 1]);
  return shortest;
}

std::string label(const Setting& setting) { return describe(Method::kEpp, setting); }

Wave all_chunks(size_t count) {
  Wave everything(count);
  for (size_t c = 0; c < count; ++c) everything[c] = static_cast<int>(c);
  return everything;
}

bool same_chunks(const std::vector<Chunk>& a, const std::vector<Chunk>& b) {
  if (a.size() != b.size()) return false;
  for (size_t c = 0; c < a.size(); ++c) {
    if (a[c].slices.size() != b[c].slices.size()) return false;
    for (size_t i = 0; i < a[c].slices.size(); ++i) {
      const Slice& x = a[c].slices[i];
      const Slice& y = b[c].slices[i];
      if (x.seq != y.seq || x.start != y.start || x.end != y.end) return false;
    }
  }
  return true;
}

}  // namespace infinipipe::planning
