#include "wave_grouping.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <map>
#include <string>

#include "infinipipe/core/error.h"
#include "infinipipe/schedule/grouping.h"
#include "infinipipe/schedule/scheduler.h"
#include "planner_support.h"
#include "recompute_choice.h"
#include "wave_bounds.h"

namespace infinipipe::planning {

// Cuts allowed in coarse mode (grouped_waves).
constexpr int kCoarseWaveCuts = 6;

namespace {

// A candidate's chains grouped by length, longest first (the grouping DP's groups), and the
// bounds (pipeline_bound) of waves of its chunks alone, costed once for all waves (wave_bounds.h):
// the waves of groups g .. e - 1 are bounded for every e in one walk once one of them is asked for
// (the DP asks for nearly all).
class GroupedChains {
 public:
  GroupedChains(const std::vector<Chunk>& chunks, const CostModel& cost,
                const PlannerOptions& options)
      : n_(static_cast<int>(chunks.size())),
        bounds_(chunks, cost, options.num_stages),
        budget_(options.memory_budget_bytes) {
    std::vector<int> chain_length(n_, 0);
    for (const std::vector<int>& chain : chains(chunks))
      for (int c : chain) chain_length[c] = static_cast<int>(chain.size());
    std::vector<int> lengths(chain_length.begin(), chain_length.end());
    std::sort(lengths.begin(), lengths.end(), std::greater<int>());
    lengths.erase(std::unique(lengths.begin(), lengths.end()), lengths.end());
    groups_ = static_cast<int>(lengths.size());
    group_of_.resize(n_);
    group_chunks_.assign(groups_, 0);
    for (int c = 0; c < n_; ++c) {
      group_of_[c] = static_cast<int>(std::find(lengths.begin(), lengths.end(), chain_length[c]) -
                                      lengths.begin());
      ++group_chunks_[group_of_[c]];
    }
    runs_ = bounds_.length_runs();
    from_group_.resize(groups_);
  }

  int groups() const { return groups_; }
  int size() const { return n_; }
  int group_chunks(int g) const { return group_chunks_[g]; }
  // The first and last group `wave` holds chunks of.
  std::pair<int, int> group_span(const Wave& wave) const {
    int first = groups_, last = -1;
    for (int c : wave) {
      first = std::min(first, group_of_[c]);
      last = std::max(last, group_of_[c]);
    }
    return {first, last};
  }
  // The chunks of groups first .. end - 1, ascending.
  Wave wave(int first, int end) const {
    Wave out;
    for (int c = 0; c < n_; ++c)
      if (group_of_[c] >= first && group_of_[c] < end) out.push_back(c);
    return out;
  }
  // The bounds of `key` (ascending chunk ids of whole chains) alone: kept for a run of whole
  // groups, into `scratch` otherwise.
  const Candidate& bound(const Wave& key, Candidate& scratch) {
    const auto [first, last] = group_span(key);
    int held = 0;
    for (int g = first; g <= last; ++g) held += group_chunks_[g];
    if (static_cast<int>(runs_.size()) != groups_ + 1 || held != static_cast<int>(key.size())) {
      bounds_.bound(key, scratch, budget_);  // not a run of whole groups
      return scratch;
    }
    if (from_group_[first].empty()) {
      std::vector<int> ends(runs_.begin() + first + 1, runs_.end());
      bounds_.bound_runs(runs_[first], ends, from_group_[first], budget_);
    }
    return from_group_[first][last - first];
  }
  // Whether one of the first `checked` groups is in no wave of whole groups that `never_finite`
  // passes: every grouping has a wave holding it, so the DP would fail whatever else it weighs.
  // A group's own wave first, which usually settles it. Group g's waves start at groups 0 .. g,
  // and the waves from one group are bounded in one walk, so group g costs g + 1 walks.
  template <typename NeverFinite>
  bool blocked(NeverFinite never_finite, int checked) const {
    for (int g = 0; g < std::min(checked, groups_); ++g) {
      if (!never_finite(wave(g, g + 1))) continue;
      bool all = true;
      for (int first = g; first >= 0 && all; --first)
        for (int end = g + 1; end <= groups_ && all; ++end)
          if (!never_finite(wave(first, end))) all = false;
      if (all) return true;
    }
    return false;
  }

 private:
  int n_, groups_ = 0;
  std::vector<int> group_of_, group_chunks_;
  WaveBounds bounds_;
  double budget_;
  std::vector<int> runs_;
  std::vector<std::vector<Candidate>> from_group_;  // [g][e - g - 1]: groups g .. e - 1
};

std::string hopeless_wave_reason(size_t chunks, int stage) {
  return "a wave of " + std::to_string(chunks) + " chunks does not fit on stage " +
         std::to_string(stage) + " even with every layer recomputed (pipeline_bound's floor)";
}

}  // namespace

bool no_grouping_fits(const Candidate& cand, const CostModel& cost, const PlannerOptions& options,
                      std::string& reason) {
  // The longest chains' own wave first, bounded alone: when it fits with every layer recomputed,
  // so may a grouping. Its chunks only, not the candidate's every chunk on every stage, which
  // GroupedChains costs: on the heavy mix nearly every candidate asked stops here.
  Candidate longest;
  {
    const std::vector<std::vector<int>> all = chains(cand.chunks);
    size_t most = 0;
    for (const std::vector<int>& chain : all) most = std::max(most, chain.size());
    Wave ids;
    for (const std::vector<int>& chain : all)
      if (chain.size() == most) ids.insert(ids.end(), chain.begin(), chain.end());
    std::sort(ids.begin(), ids.end());
    for (int c : ids) longest.chunks.push_back(cand.chunks[c]);
  }
  pipeline_bound(longest, cost, options.num_stages, options.memory_budget_bytes);
  if (!longest.never_fits_recomputed) return false;
  GroupedChains grouped(cand.chunks, cost, options);
  size_t smallest = 0;
  auto hopeless = [&](const Wave& wave) {
    Candidate scratch;
    const Candidate& bounded = grouped.bound(wave, scratch);
    if (bounded.never_fits_recomputed && (smallest == 0 || wave.size() < smallest)) {
      smallest = wave.size();
      reason =
          label(cand.setting) + ": " + hopeless_wave_reason(wave.size(), bounded.never_fits_stage);
    }
    return bounded.never_fits_recomputed;
  };
  return grouped.blocked(hopeless, 1);
}

bool grouped_waves(Candidate& cand, double time_to_beat, const CostModel& cost,
                   const PlannerOptions& options, std::string& reason, bool coarse) {
  ScheduleOptions schedule_options;
  schedule_options.num_stages = options.num_stages;
  const RecomputeOptions greedy = recompute_options(RecomputeMethod::kStageAwareGreedy, options);

  GroupedChains grouped(cand.chunks, cost, options);
  const int n = grouped.size(), groups = grouped.groups();
  // cut_allowed[g]: a wave may start at group g (and end before it).
  std::vector<char> cut_allowed(groups + 1, 1);
  if (coarse && groups > kCoarseWaveCuts + 1) {
    int before = 0, next_cut = 1;
    for (int g = 1; g < groups; ++g) {
      before += grouped.group_chunks(g - 1);
      cut_allowed[g] = before * (kCoarseWaveCuts + 1) >= next_cut * n;
      if (cut_allowed[g]) next_cut = before * (kCoarseWaveCuts + 1) / n + 1;
    }
  }

  // A wave costs its simulated time alone, with the recompute it needs to fit: the DP's sum then
  // tracks the step time, fill/drain bubbles and recompute delays weighed as the pipeline feels
  // them (a stage's recompute delays the others, but no more than once).
  std::map<Wave, double> memo, least_memo;
  std::string wave_reason;
  size_t wave_reason_size = 0;
  auto allowed = [&](const Wave& wave) {
    const auto [first_group, last_group] = grouped.group_span(wave);
    return cut_allowed[first_group] && cut_allowed[last_group + 1];
  };
  // A schedule covers all of its chunks, so a wave is planned as a step of its own.
  auto alone = [&](const Wave& sorted) {
    std::vector<Chunk> chunks;
    for (int c : sorted) chunks.push_back(cand.chunks[c]);
    return chunks;
  };
  // The value of an allowed wave, computed once from its sorted chunk ids: +infinity for cuts
  // the coarse mode does not allow.
  auto memoized = [&](std::map<Wave, double>& values, const Wave& wave, auto compute) {
    if (!allowed(wave)) return kInfinity;
    Wave key = wave;
    std::sort(key.begin(), key.end());
    auto it = values.find(key);
    if (it != values.end()) return it->second;
    const double value = compute(key);
    values.emplace(std::move(key), value);
    return value;
  };
  // No plan of the wave alone is faster than its bound with its least recompute (pipeline_bound;
  // recompute only adds to a stage's work): the DP's lower bound, far cheaper than a solve.
  // Waves that no recompute makes fit alone (pipeline_bound's floor with every layer
  // recomputed): weighing them would only find that out.
  std::map<Wave, int> hopeless;  // the stage where it is over
  const WaveCost least_time = [&](const Wave& wave) {
    return memoized(least_memo, wave, [&](const Wave& key) {
      Candidate scratch;
      const Candidate& wave_only = grouped.bound(key, scratch);
      if (wave_only.never_fits_recomputed) hopeless.emplace(key, wave_only.never_fits_stage);
      return one_wave_key(wave_only);
    });
  };
  // What weigh gives a wave without a solve (its bound alone decides), or NaN when it needs one.
  auto unsolved_cost = [&](const Wave& key) {
    // A wave that alone cannot beat the time to beat, even with its least recompute, makes every
    // grouping with it lose too: its bound is enough for the DP.
    const double least = least_time(key);
    if (time_to_beat < kInfinity && least >= time_to_beat) return least;
    if (const auto it = hopeless.find(key); it != hopeless.end()) {
      if (wave_reason.empty() || key.size() < wave_reason_size) {
        wave_reason = hopeless_wave_reason(key.size(), it->second);
        wave_reason_size = key.size();
      }
      return kInfinity;
    }
    return std::numeric_limits<double>::quiet_NaN();
  };
  // A wave weighed: its simulated time with the greedy recompute it needs alone.
  auto weigh = [&](const Wave& key) {
    if (const double known = unsolved_cost(key); !std::isnan(known)) return known;
    const std::vector<Chunk> chunks = alone(key);
    check_not_cancelled(options);
    // Out of work with a plan to fall back on: this wave is not weighed (the DP then only
    // combines waves already weighed, or finds nothing and the candidate is dropped).
    if (time_to_beat < kInfinity && search_work_exhausted(options)) return kInfinity;
    const Schedule one = build_schedule(chunks, {all_chunks(chunks.size())}, schedule_options);
    const RecomputeResult ck = plan_recompute(one, chunks, cost, greedy);
    search_work() += static_cast<int64_t>(chunks.size()) * one.num_stages();
    if (ck.feasible)
      return predict_checked(one, chunks, cost, ck, options.memory_budget_bytes).step_time_s;
    if (wave_reason.empty() || key.size() < wave_reason_size) {
      // The smallest wave that does not fit explains a failure best.
      wave_reason = ck.reason;
      wave_reason_size = key.size();
    }
    return kInfinity;
  };
  const WaveCost wave_cost = [&](const Wave& wave) { return memoized(memo, wave, weigh); };
  // A group that every allowed wave holding it gives +infinity without a solve makes the DP fail
  // whatever else it weighs, found from the waves' bounds before any solve. Uniform's failed
  // candidates spent most of their DP solving waves that could never be part of a grouping.
  const bool blocked = grouped.blocked(
      [&](const Wave& wave) { return !allowed(wave) || unsolved_cost(wave) == kInfinity; }, groups);
  try {
    if (blocked) throw Error("a group of chains fits in no wave");
    cand.waves = group_into_waves(cand.chunks, wave_cost, least_time);
  } catch (const Error& e) {
    // Finer waves may fit where the coarse ones do not; the full DP also explains a failure.
    if (coarse && groups > kCoarseWaveCuts + 1)
      return grouped_waves(cand, time_to_beat, cost, options, reason, false);
    reason = label(cand.setting) + ": " + (wave_reason.empty() ? e.what() : wave_reason);
    return false;
  }
  // Overlapped waves save a fill and a drain per wave, but where the waves meet a stage holds
  // chunks of both, which may need more recompute (or not fit): keep whichever is faster. The
  // overlapped schedule is weighed first, as it usually wins: its time is then the one to beat,
  // so the waves one after another get the untied solve only when within reach of it
  // (search_recompute; on a uniform step a solve of 22 ms that could not win).
  Candidate overlapped;
  bool overlapped_fits = false;
  double goal = time_to_beat;
  if (options.overlap_waves && cand.waves.size() > 1) {
    overlapped = cand;
    ScheduleOptions overlap_options = schedule_options;
    overlap_options.overlap_waves = true;
    overlapped.schedule = build_schedule(cand.chunks, cand.waves, overlap_options);
    std::string ignored;
    overlapped_fits = search_recompute(overlapped, time_to_beat, cost, options, ignored);
    if (overlapped_fits) goal = std::min(goal, overlapped.sim.step_time_s);
  }
  cand.schedule = build_schedule(cand.chunks, cand.waves, schedule_options);
  std::string why;
  const bool fits = search_recompute(cand, goal, cost, options, why);
  if (overlapped_fits && (!fits || overlapped.sim.step_time_s < cand.sim.step_time_s)) {
    cand = std::move(overlapped);
    return true;
  }
  if (fits) return true;
  reason = label(cand.setting) + ": " + why;
  return false;
}

}  // namespace infinipipe::planning
