#include "infinipipe/plan/planner.h"

#include <algorithm>
#include <cstdio>
#include <chrono>
#include <cmath>
#include <limits>
#include <functional>
#include <map>
#include <queue>

#include "infinipipe/checkpoint/checkpoint_planner.h"
#include "infinipipe/chunking/sequence_processor.h"
#include "infinipipe/common/error.h"
#include "infinipipe/plan/static_baseline.h"
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

// Shortest slice of a mesh; short slices under-use the device, so the search stops before them.
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

struct Candidate {
  Setting setting;  // an EPP setting (Setting::chunker says whose chunking)
  std::vector<Chunk> chunks;
  // From pipeline_bound, per stage: the stage's compute, the first chunk's forward through the
  // stages before it, the last chunk's backward through them, and how many bytes one second of
  // recompute can save there at most.
  std::vector<double> busy, fill, drain, saving_rate;
  double bound = 0;       // no one-wave plan of these chunks without recompute is faster
  double optimistic = 0;  // one wave without recompute, simulated with memory ignored (or the bound)
  std::vector<double> excess;  // bytes over the budget per stage, at least (0 when it may fit)
  std::vector<double> recompute_floor;  // seconds of recompute per stage that one wave needs at least
  double key = 0;         // what the search ranks by: see search_key
  bool simulated = false;
  // The plan, once evaluated.
  std::vector<Wave> waves;
  Schedule schedule;
  CheckpointResult checkpoint;
  SimResult sim;
};

// The bound of pipeline_bound with `extra` seconds of compute per stage.
double bound_with(const Candidate& cand, const std::vector<double>& extra) {
  double bound = 0;
  for (size_t p = 0; p < cand.busy.size(); ++p)
    bound = std::max(bound, cand.fill[p] + cand.busy[p] + extra[p] + cand.drain[p]);
  return bound;
}

bool over_budget(const Candidate& cand) {
  return std::any_of(cand.excess.begin(), cand.excess.end(), [](double e) { return e > 0; });
}

// One wave with recompute: the optimistic time, and the bound with each stage's least recompute.
double one_wave_key(const Candidate& cand) {
  return std::max(cand.optimistic, bound_with(cand, cand.recompute_floor));
}

// Several waves: the optimistic time plus one more fill and drain (a second wave repeats them).
// An estimate, not a bound.
double waves_key(const Candidate& cand) {
  const size_t last = cand.busy.size() - 1;
  return cand.optimistic + cand.fill[last] + cand.drain[last];
}

// The time the search expects at best from a candidate. While it may fit: its bound. Once known
// not to fit: the lesser of one wave with recompute and several waves.
double search_key(const Candidate& cand) {
  if (!over_budget(cand)) return std::max(cand.bound, cand.optimistic);
  return std::min(one_wave_key(cand), waves_key(cand));
}

// A bound the simulator can only meet, for the chunks in one wave without recompute: stage p
// computes busy_p in all; it cannot start before the first chunk has gone forward through
// stages 0..p-1, and after its last backward (the last chunk's) that chunk still goes backward
// through them. Point-to-point time counts on every hop. Cheap (no simulation), and exact when
// the pipeline never stalls in its steady state, so it ranks candidates well.
// Also the memory the simulator must find at least: after each forward, the activations of the
// chunks in flight under 1F1B (stage p runs w_p = (d-1-p) + (k_max-1) warm-up forwards, k_max
// the first chain's length, then one forward one backward); K/V buffers and backward
// workspaces only add to that.
void pipeline_bound(Candidate& cand, const CostModel& cost, int num_stages, double budget_bytes) {
  ScheduleOptions schedule_options;
  schedule_options.num_stages = num_stages;
  const WaveOrder order = order_wave(cand.chunks, all_chunks(cand.chunks.size()), schedule_options);
  const Chunk& first = cand.chunks[order.forward.front()];
  const Chunk& last = cand.chunks[order.backward.back()];
  cand.busy.assign(num_stages, 0);
  cand.fill.assign(num_stages, 0);
  cand.drain.assign(num_stages, 0);
  cand.saving_rate.assign(num_stages, 0);
  for (int p = 0; p < num_stages; ++p) {
    for (const Chunk& c : cand.chunks) {
      cand.busy[p] += cost.forward_time(c, p) + cost.backward_time(c, p, 0);
      cand.saving_rate[p] = std::max(cand.saving_rate[p],
                                     cost.checkpoint_saving_bytes(c, p) / cost.layer_forward_time(c));
    }
    if (p + 1 < num_stages) {
      cand.fill[p + 1] = cand.fill[p] + cost.forward_time(first, p) + cost.p2p_time(first);
      cand.drain[p + 1] = cand.drain[p] + cost.backward_time(last, p, 0) + cost.p2p_time(last);
    }
  }
  cand.bound = bound_with(cand, std::vector<double>(num_stages, 0));
  cand.optimistic = cand.bound;

  int split_seq = -1;
  for (const Slice& s : first.slices)
    if (!s.whole()) split_seq = s.seq;
  int k_max = 1;
  if (split_seq >= 0) {
    k_max = 0;
    for (const Chunk& c : cand.chunks)
      for (const Slice& s : c.slices) k_max += s.seq == split_seq;
  }
  const int n = static_cast<int>(cand.chunks.size());
  cand.excess.assign(num_stages, 0);
  // Recompute of l layers of chunk c saves l * saving(c) bytes at every moment c is in flight
  // and costs l * time(c). Moments whose in-flight sets share no chunk each need their excess
  // saved by different chunks, so the recompute is at least the sum of their excesses over the
  // best saving rate (a feasible dual of the covering program). The walk picks each moment
  // over the budget whose set shares nothing with the last one picked.
  cand.recompute_floor.assign(num_stages, 0);
  std::vector<double> activation(n);
  std::vector<char> flying(n, 0), marked(n, 0);
  for (int p = 0; p < num_stages; ++p) {
    for (int c = 0; c < n; ++c) activation[c] = cost.activation_bytes(cand.chunks[c], p, 0);
    const int warmup = std::min(n, (num_stages - 1 - p) + (k_max - 1));
    const double fixed = cost.model_state_bytes(p);
    std::fill(flying.begin(), flying.end(), 0);
    std::fill(marked.begin(), marked.end(), 0);
    double in_flight = 0, most = 0, disjoint_excess = 0;
    int marked_left = 0;
    for (int i = 0; i < n; ++i) {
      const int added = order.forward[i];
      in_flight += activation[added];
      flying[added] = 1;
      if (i > warmup) {
        const int removed = order.backward[i - warmup - 1];
        in_flight -= activation[removed];
        flying[removed] = 0;
        if (marked[removed]) {
          marked[removed] = 0;
          --marked_left;
        }
      }
      most = std::max(most, in_flight);
      const double over = fixed + in_flight - budget_bytes;
      if (over > 0 && marked_left == 0) {
        disjoint_excess += over;
        for (int c = 0; c < n; ++c)
          if (flying[c]) {
            marked[c] = 1;
            ++marked_left;
          }
      }
    }
    cand.excess[p] = std::max(0.0, fixed + most - budget_bytes);
    const double rate = cand.saving_rate[p];
    cand.recompute_floor[p] =
        rate > 0 ? std::max(disjoint_excess, cand.excess[p]) / rate : (cand.excess[p] > 0 ? kInfinity : 0);
  }
  cand.key = search_key(cand);
}

// The candidate's chunks in one wave without recompute: its exact plan when the simulator finds
// it within the budget; else the optimistic time, which recompute can only lengthen.
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
  cand.optimistic = cand.sim.step_time_s;
  cand.simulated = true;
  // The simulated peaks count buffers and workspaces too.
  for (size_t p = 0; p < cand.excess.size(); ++p) {
    cand.excess[p] = std::max(cand.excess[p], cand.sim.peak_memory_bytes[p] - options.memory_budget_bytes);
    if (cand.excess[p] > 0 && cand.saving_rate[p] > 0)
      cand.recompute_floor[p] = std::max(cand.recompute_floor[p], cand.excess[p] / cand.saving_rate[p]);
  }
  cand.key = search_key(cand);
}

CheckpointOptions checkpoint_options(CheckpointMethod method, const PlannerOptions& options) {
  CheckpointOptions ck;
  ck.method = method;
  ck.memory_budget_bytes = options.memory_budget_bytes;
  ck.time_limit_s = options.checkpoint_time_limit_s;
  return ck;
}

// Recompute on `schedule` by each method, kept by simulated step time (ties: the earlier
// method). The diagonal-tied program charges every recomputed layer as a full delay to the
// pipeline, but a backward with slack after it absorbs its recompute, so the untied greedy (or
// the tied greedy instead of the exact tied solve) can give the faster step. False, with the
// first method's reason, when none fits.
bool best_checkpointing(const Schedule& schedule, const std::vector<Chunk>& chunks,
                        const std::vector<CheckpointMethod>& methods, const CostModel& cost,
                        const PlannerOptions& options, CheckpointResult& checkpoint, SimResult& sim,
                        std::string& reason) {
  bool found = false;
  for (CheckpointMethod method : methods) {
    CheckpointResult solved = plan_checkpointing(schedule, chunks, cost, checkpoint_options(method, options));
    if (!solved.feasible) {
      if (reason.empty()) reason = solved.reason;
      continue;
    }
    SimResult simulated = predict(schedule, chunks, cost, solved.recompute, options.memory_budget_bytes);
    if (simulated.over_budget) {
      if (reason.empty()) reason = simulated.over_budget_message;
      continue;
    }
    if (found && simulated.step_time_s >= sim.step_time_s) continue;
    // Name which program won, tied or not: the solvers' own names do not say.
    if (method == CheckpointMethod::kStageAware || method == CheckpointMethod::kStageAwareGreedy) {
      if (solved.solver.rfind("untied", 0) != 0 && solved.solver != "none needed")
        solved.solver = "tied " + solved.solver;
    }
    checkpoint = std::move(solved);
    sim = std::move(simulated);
    found = true;
  }
  return found;
}

// Recompute during the search: the tied greedy, and the untied greedy too when the tied answer
// is within kUntiedWithin of the time to beat (the untied one can be faster by a few percent, see
// best_checkpointing; far behind, it cannot catch up, and on big steps each solve costs tens of
// milliseconds). The winner also gets the exact tied program (choose_checkpointing).
constexpr double kUntiedWithin = 0.03;

bool search_checkpointing(Candidate& cand, double time_to_beat, const CostModel& cost,
                          const PlannerOptions& options, std::string& why) {
  if (!best_checkpointing(cand.schedule, cand.chunks, {CheckpointMethod::kStageAwareGreedy}, cost,
                          options, cand.checkpoint, cand.sim, why))
    return best_checkpointing(cand.schedule, cand.chunks, {CheckpointMethod::kUntiedGreedy}, cost,
                              options, cand.checkpoint, cand.sim, why);
  if (cand.checkpoint.recompute_s > 0 && cand.sim.step_time_s < time_to_beat * (1 + kUntiedWithin)) {
    CheckpointResult untied;
    SimResult sim;
    std::string ignored;
    if (best_checkpointing(cand.schedule, cand.chunks, {CheckpointMethod::kUntiedGreedy}, cost, options,
                           untied, sim, ignored) &&
        sim.step_time_s < cand.sim.step_time_s) {
      cand.checkpoint = std::move(untied);
      cand.sim = std::move(sim);
    }
  }
  return true;
}

// The candidate in one wave with recompute (search_checkpointing). False when it does not fit.
bool one_wave_with_recompute(Candidate& cand, double time_to_beat, const CostModel& cost,
                             const PlannerOptions& options, std::string& reason) {
  ScheduleOptions schedule_options;
  schedule_options.num_stages = options.num_stages;
  cand.waves = {all_chunks(cand.chunks.size())};
  cand.schedule = build_schedule(cand.chunks, cand.waves, schedule_options);
  std::string why;
  if (search_checkpointing(cand, time_to_beat, cost, options, why)) return true;
  reason = label(cand.setting) + ": " + why;
  return false;
}

// Waves by the grouping DP, then recompute on the whole step (search_checkpointing). False,
// with the reason, when nothing fits.
// The DP may cut between any two chain lengths, and every wave it weighs costs a checkpoint
// solve and a simulation, so with many lengths it dominates planning. With `coarse`, cuts are
// allowed only at about kCoarseWaveCuts places that split the chunks into near-equal parts
// (waves of other bounds cost +infinity, which the DP rejects at once).
constexpr int kCoarseWaveCuts = 6;

bool grouped_waves(Candidate& cand, double time_to_beat, const CostModel& cost,
                   const PlannerOptions& options, std::string& reason, bool coarse = true) {
  ScheduleOptions schedule_options;
  schedule_options.num_stages = options.num_stages;
  const CheckpointOptions greedy = checkpoint_options(CheckpointMethod::kStageAwareGreedy, options);

  // group_of[c]: rank of chunk c's chain length among the distinct lengths, longest first (the
  // DP's groups); cut_allowed[g]: a wave may start at group g (and end before it).
  const int n = static_cast<int>(cand.chunks.size());
  std::vector<int> chain_length(n, 0);
  for (const std::vector<int>& chain : chains(cand.chunks))
    for (int c : chain) chain_length[c] = static_cast<int>(chain.size());
  std::vector<int> lengths(chain_length.begin(), chain_length.end());
  std::sort(lengths.begin(), lengths.end(), std::greater<int>());
  lengths.erase(std::unique(lengths.begin(), lengths.end()), lengths.end());
  const int groups = static_cast<int>(lengths.size());
  std::vector<int> group_of(n), group_chunks(groups, 0);
  for (int c = 0; c < n; ++c) {
    group_of[c] = static_cast<int>(std::find(lengths.begin(), lengths.end(), chain_length[c]) - lengths.begin());
    ++group_chunks[group_of[c]];
  }
  std::vector<char> cut_allowed(groups + 1, 1);
  if (coarse && groups > kCoarseWaveCuts + 1) {
    int before = 0, next_cut = 1;
    for (int g = 1; g < groups; ++g) {
      before += group_chunks[g - 1];
      cut_allowed[g] = before * (kCoarseWaveCuts + 1) >= next_cut * n;
      if (cut_allowed[g]) next_cut = before * (kCoarseWaveCuts + 1) / n + 1;
    }
  }

  // A wave costs its simulated time alone, with the recompute it needs to fit: the DP's sum then
  // tracks the step time, fill/drain bubbles and recompute delays weighed as the pipeline feels
  // them (a stage's recompute delays the others, but no more than once).
  std::map<Wave, double> memo;
  std::string wave_reason;
  size_t wave_reason_size = 0;
  const WaveCost wave_cost = [&](const Wave& wave) {
    int first_group = groups, last_group = -1;
    for (int c : wave) {
      first_group = std::min(first_group, group_of[c]);
      last_group = std::max(last_group, group_of[c]);
    }
    if (!cut_allowed[first_group] || !cut_allowed[last_group + 1]) return kInfinity;
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
    // A wave that alone cannot beat the time to beat, even with its least recompute, makes every
    // grouping with it lose too: its bound is enough for the DP, and far cheaper than a solve.
    if (time_to_beat < kInfinity) {
      Candidate wave_only;
      wave_only.chunks = alone;
      pipeline_bound(wave_only, cost, options.num_stages, options.memory_budget_bytes);
      const double least = one_wave_key(wave_only);
      if (least >= time_to_beat) {
        memo.emplace(std::move(key), least);
        return least;
      }
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
    // Finer waves may fit where the coarse ones do not; the full DP also explains a failure.
    if (coarse && groups > kCoarseWaveCuts + 1)
      return grouped_waves(cand, time_to_beat, cost, options, reason, false);
    reason = label(cand.setting) + ": " + (wave_reason.empty() ? e.what() : wave_reason);
    return false;
  }
  cand.schedule = build_schedule(cand.chunks, cand.waves, schedule_options);
  std::string why;
  const bool fits = search_checkpointing(cand, time_to_beat, cost, options, why);
  // Overlapped waves save a fill and a drain per wave, but where the waves meet a stage holds
  // chunks of both, which may need more recompute (or not fit): keep whichever is faster.
  if (options.overlap_waves && cand.waves.size() > 1) {
    Candidate overlapped = cand;
    schedule_options.overlap_waves = true;
    overlapped.schedule = build_schedule(cand.chunks, cand.waves, schedule_options);
    std::string ignored;
    if (search_checkpointing(overlapped, time_to_beat, cost, options, ignored) &&
        (!fits || overlapped.sim.step_time_s < cand.sim.step_time_s)) {
      cand = std::move(overlapped);
      return true;
    }
  }
  if (fits) return true;
  reason = label(cand.setting) + ": " + why;
  return false;
}

// A candidate that does not fit as it is: one wave with recompute, and waves when those can
// still win (a second wave adds about one more fill and drain to the optimistic time) or when
// one wave does not fit at all. Keeps the faster; false when neither fits.
bool plan_with_recompute(Candidate& cand, double time_to_beat, bool may_group, const CostModel& cost,
                         const PlannerOptions& options, std::string& reason, bool& grouped) {
  Candidate one = cand;
  const bool one_fits = one_wave_key(cand) < time_to_beat &&
                        one_wave_with_recompute(one, time_to_beat, cost, options, reason);
  const double goal = one_fits ? std::min(time_to_beat, one.sim.step_time_s) : time_to_beat;
  Candidate waves = cand;
  grouped = may_group && (!one_fits || waves_key(cand) < goal);
  const bool waves_fit = grouped && grouped_waves(waves, goal, cost, options, reason);
  if (!one_fits && !waves_fit) return false;
  cand = (waves_fit && (!one_fits || waves.sim.step_time_s < one.sim.step_time_s)) ? std::move(waves)
                                                                                   : std::move(one);
  return true;
}

// Other recompute programs for a plan that recomputes (with the tied greedy's so far), kept
// only if the simulator finds them faster.
void choose_checkpointing(Candidate& cand, const std::vector<CheckpointMethod>& methods,
                          const CostModel& cost, const PlannerOptions& options) {
  if (cand.checkpoint.recompute_s == 0) return;  // nothing to recompute, nothing to choose
  std::vector<CheckpointMethod> allowed;
  for (CheckpointMethod m : methods)  // CBC's time limit makes its answer load-dependent
    if (m != CheckpointMethod::kStageAware || options.checkpoint_time_limit_s > 0) allowed.push_back(m);
  if (allowed.empty()) return;
  CheckpointResult checkpoint;
  SimResult sim;
  std::string reason;
  if (!best_checkpointing(cand.schedule, cand.chunks, allowed, cost, options, checkpoint, sim, reason))
    return;
  if (sim.step_time_s < cand.sim.step_time_s) {
    cand.checkpoint = std::move(checkpoint);
    cand.sim = std::move(sim);
  }
}

PlanResult finish_epp(Candidate best, const std::vector<int64_t>& lengths, const CostModel& cost,
                      std::chrono::steady_clock::time_point started) {
  PlanResult result;
  result.feasible = true;
  result.plan = make_plan(Method::kEpp, best.setting, lengths, std::move(best.chunks),
                          std::move(best.waves), std::move(best.schedule),
                          std::move(best.checkpoint.recompute), cost, best.sim,
                          best.checkpoint.solver);
  result.plan.plan_ms = elapsed_ms(started);
  return result;
}

}  // namespace

EppChunkingOptions epp_chunking(const Setting& setting) {
  EppChunkingOptions chunking;
  chunking.k = setting.k;
  chunking.max_chunk_tokens = setting.token_cap;
  chunking.relax_time_target = !setting.strict_packing;
  chunking.packed_light_first = true;
  chunking.drain_chunks = setting.drain_chunks;
  chunking.drain_split = setting.drain_split;
  return chunking;
}

std::vector<Chunk> setting_chunks(Method method, const std::vector<int64_t>& lengths,
                                  const Setting& setting, const CostModel& cost) {
  if (method == Method::kEpp && setting.chunker != Method::kEpp) method = setting.chunker;
  switch (method) {
    case Method::kEpp: return epp_chunks(lengths, epp_chunking(setting), cost);
    case Method::kBatch: return batch_chunks(lengths, setting.token_cap);
    case Method::kSeq1F1B: return seq1f1b_chunks(lengths, setting.token_cap, setting.k, cost);
    case Method::kChunkFlow: return fixed_size_chunks(lengths, setting.chunk_tokens);
  }
  throw Error("unknown method");
}

PlanResult plan_epp_at(const std::vector<int64_t>& lengths, const Setting& setting,
                       const CostModel& cost, const PlannerOptions& options) {
  const auto started = std::chrono::steady_clock::now();
  check_inputs(lengths, cost, options);
  Candidate cand;
  cand.setting = setting;
  try {
    cand.chunks = setting_chunks(Method::kEpp, lengths, setting, cost);
  } catch (const Error& e) {
    return infeasible(label(setting) + ": " + e.what());
  }
  pipeline_bound(cand, cost, options.num_stages, options.memory_budget_bytes);
  one_wave_without_recompute(cand, cost, options);
  if (cand.sim.over_budget) {
    std::string reason;
    bool grouped = false;
    if (!plan_with_recompute(cand, kInfinity, true, cost, options, reason, grouped)) return infeasible(reason);
    choose_checkpointing(cand, {CheckpointMethod::kUntiedGreedy, CheckpointMethod::kStageAware}, cost,
                         options);
  }
  return finish_epp(std::move(cand), lengths, cost, started);
}

PlanResult plan_epp(const std::vector<int64_t>& lengths, const CostModel& cost,
                    const PlannerOptions& options) {
  const auto started = std::chrono::steady_clock::now();
  check_inputs(lengths, cost, options);
  for (int64_t cap : options.chunk_token_caps)
    check(cap >= 0, "chunk token caps must be 0 (none) or positive, got " + std::to_string(cap));
  const int64_t longest = *std::max_element(lengths.begin(), lengths.end());
  // However finely it is sliced and checkpointed, a split sequence keeps its whole K/V buffer and,
  // during its backward, their gradients on every stage: fail at once (the sweep would grow with
  // the sequence for nothing).
  auto gib = [](double bytes) {
    char text[32];
    std::snprintf(text, sizeof text, "%.2f GiB", bytes / (1024.0 * 1024.0 * 1024.0));
    return std::string(text);
  };
  const int64_t longest_index = std::max_element(lengths.begin(), lengths.end()) - lengths.begin();
  for (int p = 0; p < cost.num_stages(); ++p) {
    const double floor = cost.model_state_bytes(p) + 2 * cost.kv_buffer_bytes(longest, p);
    if (floor > options.memory_budget_bytes)
      return infeasible("sequence " + std::to_string(longest_index) + " (" + std::to_string(longest) +
                        " tokens) cannot fit on stage " + std::to_string(p) + " however it is sliced: its K/V "
                        "buffers and their gradients take " + gib(2 * cost.kv_buffer_bytes(longest, p)) +
                        " on top of " + gib(cost.model_state_bytes(p)) + " of model state, against a budget of " +
                        gib(options.memory_budget_bytes) + ". Use more pipeline stages (fewer layers per "
                        "stage), a larger memory budget, or a shorter context.");
  }

  // Every knob setting: slice count K, chunk token cap, and packing that relaxes T_t (the
  // paper's) or not; packed chunks always lightest first. Settings that give the same chunks are
  // tried once.
  std::vector<Candidate> candidates;
  std::string reason;  // of the last candidate that failed
  // The candidate of `setting`: false, with the reason, when the setting cannot chunk the step.
  auto chunked = [&](const Setting& setting, Candidate& cand) {
    cand.setting = setting;
    try {
      cand.chunks = setting_chunks(Method::kEpp, lengths, setting, cost);
      return true;
    } catch (const Error& e) {
      reason = label(setting) + ": " + e.what();
      return false;
    }
  };
  auto add = [&](Candidate cand) {
    pipeline_bound(cand, cost, options.num_stages, options.memory_budget_bytes);
    candidates.push_back(std::move(cand));
  };
  for (int k = 1; k <= options.max_k && k <= longest; ++k) {
    // Neighbouring large K differ by a few percent of slice length: every other K above 16,
    // every fourth above 32.
    if ((k > 16 && k % 2 != 0) || (k > 32 && k % 4 != 0)) continue;
    const SplitMesh mesh = cost_balanced_mesh(longest, k, cost);
    if (k > 1 && shortest_slice(mesh) < kMinSliceTokens) break;
    std::vector<int64_t> caps;
    for (int64_t cap : options.chunk_token_caps) {
      // A cap the mesh already respects changes nothing. Where it binds, K only moves the cuts
      // of the long sequences' late (short, uncapped) slices, so coarser steps of K do.
      const int64_t effective = cap >= mesh.token_cap ? 0 : cap;
      if (effective > 0 && !(k <= 6 || (k <= 16 && k % 2 == 0) || k % 4 == 0)) continue;
      if (std::find(caps.begin(), caps.end(), effective) == caps.end()) caps.push_back(effective);
    }
    for (int64_t cap : caps) {
      for (bool relax : {true, false}) {
        Setting setting;
        setting.k = k;
        setting.token_cap = cap;
        setting.strict_packing = !relax;
        Candidate cand;
        if (!chunked(setting, cand)) continue;
        // Strict packing only differs when relaxing T_t would have helped some sequence.
        if (!relax && !candidates.empty() && candidates.back().setting.k == k &&
            candidates.back().setting.token_cap == cap &&
            same_chunks(candidates.back().chunks, cand.chunks))
          continue;
        add(std::move(cand));
      }
    }
  }

  // The baselines' chunkings too, as their static search would try them for this step: EPP's
  // waves and stage-aware recompute on them can only do better than the baseline does. Where
  // memory is plentiful, finely sliced micro-batches (Seq1F1B) can beat the sequence
  // processor's chunks, whose packing serves memory first.
  for (Method baseline : {Method::kSeq1F1B, Method::kChunkFlow}) {
    if (!options.baseline_chunkings) break;
    for (Setting setting : candidate_settings(baseline, longest)) {
      if (setting.k > options.max_k) continue;
      setting.chunker = baseline;
      Candidate cand;
      if (!chunked(setting, cand)) continue;
      if (std::none_of(candidates.begin(), candidates.end(),
                       [&](const Candidate& other) { return same_chunks(other.chunks, cand.chunks); }))
        add(std::move(cand));
    }
  }

  // Best first by search_key, which only grows as a candidate is looked at more closely: first
  // one wave without recompute is simulated (exact if it fits; otherwise the simulated peaks add
  // to the excess bytes), then recompute, and waves if they can win. The search ends when no
  // candidate's key is below the best time found. Recompute and grouping are the expensive
  // steps; they are limited to max_recompute_candidates and max_wave_groupings candidates
  // (without limit while nothing fits) for the sequence processor's chunks, and as many again for
  // the baselines' (whose bounds are often tight but whose recompute is heavy: sharing one limit,
  // they would crowd out the chunks that fit memory better).
  auto later = [&](int a, int b) {
    return candidates[a].key > candidates[b].key || (candidates[a].key == candidates[b].key && a > b);
  };
  std::priority_queue<int, std::vector<int>, decltype(later)> queue(later);
  for (int i = 0; i < static_cast<int>(candidates.size()); ++i) queue.push(i);
  bool have_best = false, have_own = false;
  Candidate best, best_own;  // best_own: the best of the sequence processor's chunks
  int evaluated[2] = {0, 0}, groupings[2] = {0, 0};  // sequence processor's chunks, baselines'
  auto keep = [&](Candidate& cand) {
    if (cand.setting.chunker == Method::kEpp && (!have_own || cand.sim.step_time_s < best_own.sim.step_time_s)) {
      best_own = cand;
      have_own = true;
    }
    if (!have_best || cand.sim.step_time_s < best.sim.step_time_s) {
      best = std::move(cand);
      have_best = true;
    }
  };

  while (!queue.empty()) {
    Candidate& cand = candidates[queue.top()];
    const int index = queue.top();
    queue.pop();
    if (have_best && cand.key >= best.sim.step_time_s) break;
    if (!cand.simulated) {
      one_wave_without_recompute(cand, cost, options);
      if (!cand.sim.over_budget) {
        keep(cand);
      } else {
        queue.push(index);
      }
      continue;
    }
    const int family = cand.setting.chunker == Method::kEpp ? 0 : 1;
    if (have_best && evaluated[family] >= options.max_recompute_candidates) continue;
    ++evaluated[family];
    const bool may_group = !have_best || groupings[family] < options.max_wave_groupings;
    bool grouped = false;
    const bool fits = plan_with_recompute(cand, have_best ? best.sim.step_time_s : kInfinity, may_group,
                                          cost, options, reason, grouped);
    groupings[family] += grouped;
    if (fits) keep(cand);
  }
  candidates.clear();
  if (!have_best)
    return infeasible("no EPP setting (slice count K up to " + std::to_string(options.max_k) +
                      ", chunk token caps, packing, the baselines' chunkings) fits the memory budget" +
                      (reason.empty() ? std::string() : "; the last one tried: " + reason));

  // Drain tapers of the best of the sequence processor's chunks (the winner, or close behind a
  // baseline's chunking) when it runs as one wave without recompute; a tapered plan is kept if
  // it still does and is faster than the winner.
  if (have_own && best_own.waves.size() == 1 && best_own.checkpoint.recompute_s == 0) {
    const Setting untapered = best_own.setting;
    for (int drain : options.drain_taper_chunks)
    for (int split : options.drain_taper_splits) {
      Candidate tapered;
      tapered.setting = untapered;
      tapered.setting.drain_chunks = drain;
      tapered.setting.drain_split = split;
      tapered.chunks = setting_chunks(Method::kEpp, lengths, tapered.setting, cost);
      if (same_chunks(tapered.chunks, best_own.chunks)) continue;
      pipeline_bound(tapered, cost, options.num_stages, options.memory_budget_bytes);
      if (tapered.bound >= best.sim.step_time_s) continue;
      one_wave_without_recompute(tapered, cost, options);
      if (!tapered.sim.over_budget && tapered.sim.step_time_s < best.sim.step_time_s) best = std::move(tapered);
    }
  }
  choose_checkpointing(best, {CheckpointMethod::kStageAware}, cost, options);
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
    chunks = setting_chunks(method, lengths, setting, cost);
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
