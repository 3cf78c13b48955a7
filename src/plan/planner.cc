#include "infinipipe/plan/planner.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>
#include <map>

#include "infinipipe/checkpoint/checkpoint_planner.h"
#include "infinipipe/chunking/sequence_processor.h"
#include "infinipipe/common/error.h"
#include "infinipipe/schedule/grouping.h"
#include "infinipipe/schedule/scheduler.h"
#include "infinipipe/sim/simulator.h"

namespace infinipipe {

namespace {

constexpr double kInfinity = std::numeric_limits<double>::infinity();

double elapsed_ms(std::chrono::steady_clock::time_point since) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - since)
      .count();
}

void check_inputs(const std::vector<int64_t>& lengths, const CostModel& cost,
                  const PlannerOptions& options) {
  check_lengths(lengths);
  check(options.num_stages >= 1, "the number of stages must be at least 1, got " +
                                     std::to_string(options.num_stages));
  check(options.num_stages == cost.num_stages(),
        "the planner was asked for " + std::to_string(options.num_stages) +
            " stages but the cost model splits the layers over " +
            std::to_string(cost.num_stages()) + "; build the cost model for the same stages");
  check(options.memory_budget_bytes > 0, "the memory budget must be positive, got " +
                                             std::to_string(options.memory_budget_bytes) +
                                             " bytes");
  check(options.max_k >= 1, "max_k must be at least 1, got " + std::to_string(options.max_k));
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
  plan.step_time_s = sim.step_time_s;
  plan.recompute_s = sim.total_recompute_s();
  plan.stage_recompute_s = sim.recompute_s;
  plan.busy_s = sim.busy_s;
  plan.bubble_fraction = sim.mean_bubble_fraction();
  plan.peak_memory_bytes = sim.peak_memory_bytes;
  plan.checkpoint_solver = std::move(solver);
  return plan;
}

SimResult predict(const Schedule& schedule, const std::vector<Chunk>& chunks,
                  const CostModel& cost, const Recompute& recompute, double budget) {
  SimOptions sim_options;
  sim_options.memory_budget_bytes = budget;
  sim_options.record_events = false;
  return simulate(schedule, chunks, cost, recompute, sim_options);
}

// Shortest slice of a K-way split of the longest sequence; short slices under-use the device,
// so the sweep stops before them.
int64_t shortest_slice(const SplitMesh& mesh) {
  int64_t shortest = mesh.boundaries.back();
  for (size_t i = 1; i < mesh.boundaries.size(); ++i)
    shortest = std::min(shortest, mesh.boundaries[i] - mesh.boundaries[i - 1]);
  return shortest;
}

struct Candidate {
  EppChunkingOptions chunking;
  std::vector<Chunk> chunks;
  std::vector<Wave> waves;
  Schedule schedule;
  CheckpointResult checkpoint;
  SimResult sim;
};

std::string label(const EppChunkingOptions& chunking) {
  std::string out = "K=" + std::to_string(chunking.k);
  if (chunking.max_chunk_tokens > 0) out += " cap=" + std::to_string(chunking.max_chunk_tokens);
  return out;
}

Wave all_chunks(size_t count) {
  Wave everything(count);
  for (size_t c = 0; c < count; ++c) everything[c] = static_cast<int>(c);
  return everything;
}

// The candidate's chunks in one wave, no recompute: its exact plan when the simulator finds it
// within the budget, else (recompute and extra waves only add work and fill/drain) the
// optimistic time the sweep ranks candidates by.
void one_wave_without_recompute(Candidate& cand, const CostModel& cost, const PlannerOptions& options) {
  ScheduleOptions schedule_options;
  schedule_options.num_stages = options.num_stages;
  cand.waves = {all_chunks(cand.chunks.size())};
  cand.schedule = build_schedule(cand.chunks, cand.waves, schedule_options);
  cand.checkpoint = CheckpointResult{};
  cand.checkpoint.feasible = true;
  cand.checkpoint.solver = "none needed";
  cand.checkpoint.recompute.assign(cost.num_stages(), std::vector<int>(cand.chunks.size(), 0));
  cand.sim = predict(cand.schedule, cand.chunks, cost, cand.checkpoint.recompute,
                     options.memory_budget_bytes);
}

// Recompute (tied greedy), and waves by the grouping DP when one wave with recompute is not the
// best: what the sweep does for a candidate that does not fit as it is. False, with the reason,
// when nothing fits.
bool plan_with_recompute(Candidate& cand, const CostModel& cost, const PlannerOptions& options,
                         std::string& reason) {
  ScheduleOptions schedule_options;
  schedule_options.num_stages = options.num_stages;
  CheckpointOptions greedy;
  greedy.method = CheckpointMethod::kStageAwareGreedy;
  greedy.memory_budget_bytes = options.memory_budget_bytes;

  // A wave costs its simulated time alone, with the recompute it needs to fit: the DP's sum then
  // tracks the step time, fill/drain bubbles and recompute delays weighed as the pipeline feels
  // them (a stage's recompute delays the others, but no more than once).
  std::map<Wave, double> memo;
  std::string wave_reason;
  size_t wave_reason_size = 0;
  const WaveCost wave_cost = [&](const Wave& wave) {
    Wave key = wave;
    std::sort(key.begin(), key.end());
    auto it = memo.find(key);
    if (it != memo.end()) return it->second;
    // A schedule covers all of its chunks, so the wave is planned as a step of its own.
    std::vector<Chunk> alone;
    Wave renumbered;
    for (int c : key) {
      renumbered.push_back(static_cast<int>(alone.size()));
      alone.push_back(cand.chunks[c]);
    }
    const Schedule one = build_schedule(alone, {renumbered}, schedule_options);
    const CheckpointResult ck = plan_checkpointing(one, alone, cost, greedy);
    double value = kInfinity;
    if (ck.feasible) {
      value = predict(one, alone, cost, ck.recompute, options.memory_budget_bytes).step_time_s;
    } else if (wave_reason.empty() || wave.size() < wave_reason_size) {
      // The smallest wave that does not fit explains a failure best.
      wave_reason = ck.reason;
      wave_reason_size = wave.size();
    }
    memo.emplace(std::move(key), value);
    return value;
  };
  try {
    cand.waves = group_into_waves(cand.chunks, wave_cost);
  } catch (const Error& e) {
    reason = label(cand.chunking) + ": " + (wave_reason.empty() ? e.what() : wave_reason);
    return false;
  }
  cand.schedule = build_schedule(cand.chunks, cand.waves, schedule_options);
  cand.checkpoint = plan_checkpointing(cand.schedule, cand.chunks, cost, greedy);
  if (!cand.checkpoint.feasible) {
    reason = label(cand.chunking) + ": " + cand.checkpoint.reason;
    return false;
  }
  cand.sim = predict(cand.schedule, cand.chunks, cost, cand.checkpoint.recompute,
                     options.memory_budget_bytes);
  return true;
}

// The diagonal-tied program charges every recomputed layer as a full delay to the pipeline, but
// a backward with slack after it absorbs its recompute, so the untied greedy (or the tied greedy
// instead of the exact tied solve) can give the faster step. Solve all three and keep what the
// simulator finds fastest; the solver field records which won.
void choose_checkpointing(Candidate& cand, const CostModel& cost, const PlannerOptions& options) {
  if (cand.checkpoint.recompute_s == 0) return;  // nothing to recompute, nothing to choose
  const CheckpointMethod methods[] = {CheckpointMethod::kStageAware,
                                      CheckpointMethod::kStageAwareGreedy,
                                      CheckpointMethod::kUntiedGreedy};
  for (CheckpointMethod method : methods) {
    CheckpointOptions ck_options;
    ck_options.method = method;
    ck_options.memory_budget_bytes = options.memory_budget_bytes;
    ck_options.time_limit_s = options.checkpoint_time_limit_s;
    CheckpointResult solved = plan_checkpointing(cand.schedule, cand.chunks, cost, ck_options);
    if (!solved.feasible) continue;
    SimResult sim = predict(cand.schedule, cand.chunks, cost, solved.recompute,
                            options.memory_budget_bytes);
    if (sim.over_budget || sim.step_time_s >= cand.sim.step_time_s) continue;
    if (method == CheckpointMethod::kStageAware && solved.solver == "cbc") solved.solver = "tied cbc";
    if (method == CheckpointMethod::kStageAwareGreedy && solved.solver == "greedy")
      solved.solver = "tied greedy";
    cand.checkpoint = std::move(solved);
    cand.sim = std::move(sim);
  }
}

PlanResult finish_epp(Candidate best, const std::vector<int64_t>& lengths, const CostModel& cost,
                      std::chrono::steady_clock::time_point started) {
  Setting setting;
  setting.k = best.chunking.k;
  setting.token_cap = best.chunking.max_chunk_tokens;
  PlanResult result;
  result.feasible = true;
  result.plan = make_plan(Method::kEpp, setting, lengths, std::move(best.chunks),
                          std::move(best.waves), std::move(best.schedule),
                          std::move(best.checkpoint.recompute), cost, best.sim,
                          best.checkpoint.solver);
  result.plan.plan_ms = elapsed_ms(started);
  return result;
}

}  // namespace

PlanResult plan_epp_at(const std::vector<int64_t>& lengths, const EppChunkingOptions& chunking,
                       const CostModel& cost, const PlannerOptions& options) {
  const auto started = std::chrono::steady_clock::now();
  check_inputs(lengths, cost, options);
  Candidate cand;
  cand.chunking = chunking;
  try {
    cand.chunks = epp_chunks(lengths, chunking, cost);
  } catch (const Error& e) {
    return infeasible(label(chunking) + ": " + e.what());
  }
  one_wave_without_recompute(cand, cost, options);
  if (cand.sim.over_budget) {
    std::string reason;
    if (!plan_with_recompute(cand, cost, options, reason)) return infeasible(reason);
    choose_checkpointing(cand, cost, options);
  }
  return finish_epp(std::move(cand), lengths, cost, started);
}

PlanResult plan_epp(const std::vector<int64_t>& lengths, const CostModel& cost,
                    const PlannerOptions& options) {
  const auto started = std::chrono::steady_clock::now();
  check_inputs(lengths, cost, options);
  const int64_t longest = *std::max_element(lengths.begin(), lengths.end());

  // Phase 1: every (K, cap) in one wave without recompute. That is exact for the candidates that
  // fit as they are, and a bound (by the simulator's monotonicity: recompute only lengthens
  // actions) on what the others can reach in one wave.
  bool have_best = false;
  Candidate best;
  std::string reason;  // of the last candidate that failed
  std::vector<Candidate> need_recompute;
  for (int k = 1; k <= options.max_k && k <= longest; ++k) {
    const SplitMesh mesh = cost_balanced_mesh(longest, k, cost);
    if (k > 1 && shortest_slice(mesh) < kMinSliceTokens) break;
    for (int64_t cap : options.chunk_token_caps) {
      check(cap >= 0, "chunk token caps must be 0 (none) or positive, got " + std::to_string(cap));
      if (cap >= mesh.token_cap) continue;  // TODO dedupe
      Candidate cand;
      cand.chunking.k = k;
      cand.chunking.max_chunk_tokens = cap;
      try {
        cand.chunks = epp_chunks(lengths, cand.chunking, cost);
      } catch (const Error& e) {
        reason = label(cand.chunking) + ": " + e.what();
        continue;
      }
      one_wave_without_recompute(cand, cost, options);
      if (!cand.sim.over_budget) {
        if (!have_best || cand.sim.step_time_s < best.sim.step_time_s) {
          best = std::move(cand);
          have_best = true;
        }
      } else {
        need_recompute.push_back(std::move(cand));
      }
    }
  }
  for (Candidate& cand : need_recompute) {
    if (!plan_with_recompute(cand, cost, options, reason)) continue;
    if (!have_best || cand.sim.step_time_s < best.sim.step_time_s) {
      best = std::move(cand);
      have_best = true;
    }
  }
  if (!have_best)
    return infeasible(reason.empty() ? "no slice count K fits the memory budget" : reason);
  choose_checkpointing(best, cost, options);
  return finish_epp(std::move(best), lengths, cost, started);
}

PlanResult plan_with_setting(Method method, const std::vector<int64_t>& lengths,
                             const Setting& setting, const CostModel& cost,
                             const PlannerOptions& options) {
  const auto started = std::chrono::steady_clock::now();
  check_inputs(lengths, cost, options);
  check(method != Method::kEpp, "plan_with_setting is for the baselines; plan EPP with plan_epp");

  std::vector<Chunk> chunks;
  try {
    switch (method) {
      case Method::kBatch: chunks = batch_chunks(lengths, setting.token_cap); break;
      case Method::kSeq1F1B: chunks = seq1f1b_chunks(lengths, setting.token_cap, setting.k, cost); break;
      case Method::kChunkFlow: chunks = fixed_size_chunks(lengths, setting.chunk_tokens); break;
      case Method::kEpp: break;
    }
  } catch (const Error& e) {
    return infeasible(std::string(to_string(method)) + " " + describe(method, setting) + ": " +
                      e.what());
  }
  std::vector<Wave> waves(1);
  for (int c = 0; c < static_cast<int>(chunks.size()); ++c) waves[0].push_back(c);
  ScheduleOptions schedule_options;
  schedule_options.num_stages = options.num_stages;
  Schedule schedule = build_schedule(chunks, waves, schedule_options);

  Setting chosen = setting;
  Recompute recompute;
  std::string solver;
  if (setting.uniform_recompute >= 0) {
    recompute.assign(cost.num_stages(), std::vector<int>(chunks.size(), 0));
    for (int p = 0; p < cost.num_stages(); ++p)
      std::fill(recompute[p].begin(), recompute[p].end(),
                std::min(setting.uniform_recompute, cost.layers(p)));
    solver = "fixed";
  } else {
    CheckpointOptions uniform;
    uniform.method = CheckpointMethod::kUniform;
    uniform.memory_budget_bytes = options.memory_budget_bytes;
    CheckpointResult ck = plan_checkpointing(schedule, chunks, cost, uniform);
    if (!ck.feasible)
      return infeasible(std::string(to_string(method)) + " " + describe(method, setting) + ": " +
                        ck.reason);
    recompute = std::move(ck.recompute);
    chosen.uniform_recompute = 0;
    for (const auto& stage : recompute)
      for (int layers : stage) chosen.uniform_recompute = std::max(chosen.uniform_recompute, layers);
    solver = ck.solver;
  }
  const SimResult sim = predict(schedule, chunks, cost, recompute, options.memory_budget_bytes);
  if (setting.uniform_recompute >= 0 && sim.over_budget)
    return infeasible(std::string(to_string(method)) + " " + describe(method, setting) + ": " +
                      sim.over_budget_message);

  PlanResult result;
  result.feasible = true;
  result.plan = make_plan(method, chosen, lengths, std::move(chunks), std::move(waves),
                          std::move(schedule), std::move(recompute), cost, sim, solver);
  result.plan.plan_ms = elapsed_ms(started);
  return result;
}

}  // namespace infinipipe
