#include "candidate_plans.h"

#include <algorithm>
#include <map>
#include <set>
#include <string>

#include "infinipipe/core/memory_text.h"
#include "infinipipe/schedule/scheduler.h"
#include "planner_support.h"
#include "recompute_choice.h"
#include "wave_grouping.h"

namespace infinipipe::planning {

void one_wave_without_recompute(Candidate& cand, const CostModel& cost,
                                const PlannerOptions& options, double stop_above) {
  ScheduleOptions schedule_options;
  schedule_options.num_stages = options.num_stages;
  cand.waves = {all_chunks(cand.chunks.size())};
  cand.schedule = build_schedule(cand.chunks, cand.waves, schedule_options);
  cand.checkpoint = RecomputeResult{};
  cand.checkpoint.feasible = true;
  cand.checkpoint.solver = "none needed";
  cand.checkpoint.recompute.assign(cost.num_stages(), std::vector<int>(cand.chunks.size(), 0));
  // Each stage's compute without recompute (pipeline_bound's busy, the simulator's durations
  // summed in another order) and the last chunk's backward through the stages before it: a
  // relative margin far above their rounding keeps the stop sure.
  std::vector<double> floor;
  if (stop_above < kInfinity && cand.busy.size() == static_cast<size_t>(cost.num_stages()))
    for (size_t p = 0; p < cand.busy.size(); ++p)
      floor.push_back((cand.busy[p] + cand.drain[p]) * (1 - 1e-9));
  cand.sim = predict(cand.schedule, cand.chunks, cost, cand.checkpoint.recompute,
                     options.memory_budget_bytes, stop_above, std::move(floor));
  cand.optimistic = cand.sim.step_time_s;
  cand.simulated = true;
  if (cand.sim.stopped_early) return;
  // The simulated peaks count buffers and workspaces too.
  for (size_t p = 0; p < cand.excess.size(); ++p) {
    cand.excess[p] =
        std::max(cand.excess[p], cand.sim.peak_memory_bytes[p] - options.memory_budget_bytes);
    if (cand.excess[p] > 0 && cand.saving_rate[p] > 0)
      cand.recompute_floor[p] =
          std::max(cand.recompute_floor[p], cand.excess[p] / cand.saving_rate[p]);
  }
  cand.key = search_key(cand);
}

bool one_wave_with_recompute(Candidate& cand, double time_to_beat, const CostModel& cost,
                             const PlannerOptions& options, std::string& reason) {
  ScheduleOptions schedule_options;
  schedule_options.num_stages = options.num_stages;
  cand.waves = {all_chunks(cand.chunks.size())};
  cand.schedule = build_schedule(cand.chunks, cand.waves, schedule_options);
  std::string why;
  if (search_recompute(cand, time_to_beat, cost, options, why)) return true;
  reason = label(cand.setting) + ": " + why;
  return false;
}

bool several_chain_lengths(const std::vector<Chunk>& chunks) {
  size_t first = 0;
  for (const std::vector<int>& chain : chains(chunks)) {
    if (first == 0) first = chain.size();
    if (chain.size() != first) return true;
  }
  return false;
}

namespace {

// Floors that no waves, order or recompute can lower. When the backward of a split sequence's
// last slice starts on a stage, every chunk holding one of its slices is in flight there (a
// sequence's slices go backward in reverse), with every layer's input kept at the least, the
// K/V buffers of every split sequence in those chunks still open (none of their first slices
// has gone backward), the dK/dV buffers of those in the last chunk just opened, and that
// chunk's backward workspace: memory_timeline.h counts the same terms at that moment, plus
// whatever else is in flight.
bool chunk_floor_exceeds(const std::vector<Chunk>& chunks, const CostModel& cost, double budget,
                         std::string& why) {
  std::map<int, std::vector<int>> chunks_of;  // split sequence -> chunks, in slice order
  std::map<int, int64_t> length_of;
  for (int c = 0; c < static_cast<int>(chunks.size()); ++c)
    for (const Slice& s : chunks[c].slices)
      if (!s.whole()) {
        chunks_of[s.seq].push_back(c);
        length_of[s.seq] = s.seq_length;
      }
  auto slice_start = [&](int c, int seq) {
    for (const Slice& s : chunks[c].slices)
      if (s.seq == seq) return s.start;
    return int64_t{0};
  };
  // Summed in another order than the walk's: a margin keeps rounding from calling a fit a miss.
  const double limit = budget * (1 + 1e-6);
  for (int p = 0; p < cost.num_stages(); ++p) {
    const int full = cost.layers(p);
    for (auto& [split_seq, held] : chunks_of) {
      const int seq = split_seq;  // a structured binding cannot be captured before C++20
      std::sort(held.begin(), held.end(),
                [&](int a, int b) { return slice_start(a, seq) < slice_start(b, seq); });
      const int last = held.back();
      std::set<int> open;
      double bytes = cost.model_state_bytes(p) + cost.backward_workspace_bytes(chunks[last], p);
      for (int c : held) {
        bytes += cost.activation_bytes(chunks[c], p, full);
        for (const Slice& s : chunks[c].slices)
          if (!s.whole() && open.insert(s.seq).second)
            bytes += cost.kv_buffer_bytes(length_of[s.seq], p);
      }
      for (const Slice& s : chunks[last].slices)
        if (!s.whole()) bytes += cost.kv_buffer_bytes(length_of[s.seq], p);
      if (bytes > limit) {
        why = "sequence " + std::to_string(seq) + " (" + std::to_string(length_of[seq]) +
              " tokens) needs " + gib_text(bytes) + " on stage " + std::to_string(p) +
              " at the backward of its last slice even with every layer recomputed (its " +
              std::to_string(held.size()) +
              " chunks in flight and their K/V buffers), over the budget of " + gib_text(budget);
        return true;
      }
    }
  }
  return false;
}

}  // namespace

bool recompute_cannot_fit(const Candidate& cand, const CostModel& cost,
                          const PlannerOptions& options, std::string& reason) {
  std::string why;
  if (chunk_floor_exceeds(cand.chunks, cost, options.memory_budget_bytes, why)) {
    reason = label(cand.setting) + ": " + why;
    return true;
  }
  if (chains(cand.chunks).size() != 1) return false;
  for (int p = 0; p < cost.num_stages(); ++p)
    for (const Chunk& chunk : cand.chunks)
      if (cost.checkpoint_saving_bytes(chunk, p) <= 0) return false;
  // The one wave's schedule, built again: the search drops it from candidates over the budget
  // (epp_search.cc keeps a hundred waiting candidates, each schedule megabytes at 32 stages).
  ScheduleOptions schedule_options;
  schedule_options.num_stages = options.num_stages;
  const Schedule one =
      build_schedule(cand.chunks, {all_chunks(cand.chunks.size())}, schedule_options);
  const RecomputeResult full =
      plan_recompute(one, cand.chunks, cost, recompute_options(RecomputeMethod::kFull, options));
  if (full.feasible) return false;
  reason = label(cand.setting) + ": " + full.reason;
  return true;
}

bool plan_with_recompute(Candidate& cand, double time_to_beat, bool may_group,
                         const CostModel& cost, const PlannerOptions& options, std::string& reason,
                         bool& grouped) {
  Candidate one = cand;
  // pipeline_bound's floor with every layer recomputed is over the budget: the recompute search
  // would fail (most of uniform's failed candidates).
  if (cand.never_fits_recomputed)
    reason = label(cand.setting) + ": one wave does not fit on stage " +
             std::to_string(cand.never_fits_stage) +
             " even with every layer recomputed (pipeline_bound's floor)";
  const bool one_fits = one_wave_key(cand) < time_to_beat && !cand.never_fits_recomputed &&
                        one_wave_with_recompute(one, time_to_beat, cost, options, reason);
  const double goal = one_fits ? std::min(time_to_beat, one.sim.step_time_s) : time_to_beat;
  Candidate waves = cand;
  // The DP groups chains by length: with one length it can only make the one wave again (the
  // same schedule and solvers), which costs as much as the whole step's recompute choice. One
  // 2M-token sequence (`infinipipe-plan --model tiny --hardware cpu --stages 2 --memory-gib 64
  // --method epp`) spent 73 s in its first candidate, mostly there (issue 15).
  grouped =
      may_group && several_chain_lengths(cand.chunks) && (!one_fits || waves_key(cand) < goal);
  const bool waves_fit = grouped && grouped_waves(waves, goal, cost, options, reason);
  if (!one_fits && !waves_fit) return false;
  cand = (waves_fit && (!one_fits || waves.sim.step_time_s < one.sim.step_time_s))
             ? std::move(waves)
             : std::move(one);
  return true;
}

}  // namespace infinipipe::planning
