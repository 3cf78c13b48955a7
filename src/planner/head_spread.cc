// The spread-head schedule: a 1F1B over d + 1 stages whose virtual last stage's actions move to
// each chunk's head stage (head_spread.h).
#include "infinipipe/planner/head_spread.h"

#include <algorithm>

#include "infinipipe/core/error.h"
#include "infinipipe/sim/simulator.h"

namespace infinipipe {

namespace {

// An action with the simulated time it started, and which list it came from, for the merge.
struct Timed {
  Action action;
  double start = 0;
  int source = 0;  // 0: the stage's own list, 1: the virtual stage's
  int index = 0;   // in its source list
};

// The virtual stage's action for a chunk whose head runs on another stage, or a compute's type
// with chunk -1 when it has none there (its B, which the H already did).
Action moved_to_head_stage(const Action& a, int last) {
  switch (a.type) {
    case ActionType::kRecvForward:
      return {ActionType::kRecvHead, a.chunk, last};
    case ActionType::kForward:
      return {ActionType::kHead, a.chunk};
    case ActionType::kSendBackward:
      return {ActionType::kSendHeadGrad, a.chunk, last};
    default:
      return {ActionType::kBackward, -1};
  }
}

// The last stage's own list: sends and receives to the virtual stage go to the head stage, or
// vanish where the head is its own, whose H follows F.
std::vector<Action> last_stage_list(const std::vector<Action>& built,
                                    const std::vector<int>& head_stages, int last) {
  std::vector<Action> out;
  out.reserve(built.size() + head_stages.size());
  for (const Action& a : built) {
    const int o = head_stages[a.chunk];
    if (a.type == ActionType::kSendForward || a.type == ActionType::kRecvBackward) {
      if (o == last) continue;
      out.push_back(
          {a.type == ActionType::kSendForward ? ActionType::kSendHead : ActionType::kRecvHeadGrad,
           a.chunk, o});
      continue;
    }
    out.push_back(a);
    if (a.type == ActionType::kForward && o == last) out.push_back({ActionType::kHead, a.chunk});
  }
  return out;
}

// Stage p's own list merged with the virtual stage's actions for the chunks whose head it runs,
// by time: its own actions' and the receives' simulated starts, an H at its chunk's `head_time`,
// its SEND_HG at the later of its own start and the H's; at equal times receives first (posting
// earlier never blocks anyone), then the stage's own actions, each list keeping its order.
std::vector<Action> merged_list(const std::vector<Action>& own,
                                const std::vector<double>& own_start,
                                const std::vector<Action>& virtual_list,
                                const std::vector<double>& virtual_start,
                                const std::vector<double>& head_time,
                                const std::vector<int>& head_stages, int p, int last) {
  std::vector<Timed> timed;
  timed.reserve(own.size() + virtual_list.size());
  for (size_t i = 0; i < own.size(); ++i)
    timed.push_back({own[i], own_start[i], 0, static_cast<int>(i)});
  for (size_t i = 0; i < virtual_list.size(); ++i) {
    if (head_stages[virtual_list[i].chunk] != p) continue;
    const Action moved = moved_to_head_stage(virtual_list[i], last);
    if (moved.chunk < 0) continue;
    const double at = moved.type == ActionType::kHead ? head_time[moved.chunk]
                      : moved.type == ActionType::kSendHeadGrad
                          ? std::max(virtual_start[i], head_time[moved.chunk])
                          : virtual_start[i];
    timed.push_back({moved, at, 1, static_cast<int>(i)});
  }
  std::stable_sort(timed.begin(), timed.end(), [](const Timed& a, const Timed& b) {
    if (a.start != b.start) return a.start < b.start;
    if (a.action.is_recv() != b.action.is_recv()) return a.action.is_recv();
    if (a.source != b.source) return a.source < b.source;
    return a.index < b.index;
  });
  std::vector<Action> out;
  out.reserve(timed.size());
  for (const Timed& t : timed) out.push_back(t.action);
  return out;
}

// When each H goes in its stage's list: halfway through its window, from when the virtual stage
// ran it (its hidden state just arrived) to the latest start that still returns its gradient
// before the last stage's B needs it (both from the d + 1 stage simulation). At the window's
// start a head lands on its stage in a lump right behind the chunk's own forward through the
// stages; at its end it holds up the last stage's backward. Measured on LLaMA-3-8B, 8 stages,
// wikipedia batch 512 at 96K (EPP's step 0, heads dealt as assign_head_stages does): 27.16 s at
// the start, 24.79 / 24.21 / 23.22 / 24.01 / 24.89 s at 0.3 / 0.4 / 0.5 / 0.6 / 0.7 of the
// window (30.60 s without spreading); LLaMA-13B the same way, 0.5 best (38.39 s at the start,
// 37.22 s at 0.5).
constexpr double kHeadWindowPoint = 0.5;

std::vector<double> head_times(const Schedule& built, const SimResult& sim,
                               const std::vector<Chunk>& chunks,
                               const std::vector<int>& head_stages, const CostModel& cost) {
  const int d = built.num_stages() - 1, last = d - 1;
  std::vector<double> earliest(chunks.size(), 0.0), needed(chunks.size(), 0.0);
  for (size_t i = 0; i < built.stages[d].size(); ++i)
    if (built.stages[d][i].type == ActionType::kForward)
      earliest[built.stages[d][i].chunk] = sim.start_s[d][i];
  for (size_t i = 0; i < built.stages[last].size(); ++i)
    if (built.stages[last][i].type == ActionType::kBackward)
      needed[built.stages[last][i].chunk] = sim.start_s[last][i];
  std::vector<double> at(chunks.size(), 0.0);
  for (size_t c = 0; c < chunks.size(); ++c) {
    if (head_stages[c] == last) continue;
    const double latest = needed[c] - cost.head_time(chunks[c]) -
                          2 * cost.head_transfer_time(chunks[c], head_stages[c]);
    at[c] = earliest[c] + kHeadWindowPoint * std::max(0.0, latest - earliest[c]);
  }
  return at;
}

}  // namespace

Schedule spread_head_schedule(const std::vector<Chunk>& chunks, const std::vector<Wave>& waves,
                              const ScheduleOptions& options, const std::vector<int>& head_stages,
                              const CostModel& cost, const Recompute& recompute) {
  const int d = options.num_stages, last = d - 1;
  check(d == cost.num_stages(), "spread_head_schedule: " + std::to_string(d) +
                                    " stages, but the cost model has " +
                                    std::to_string(cost.num_stages()));
  check(head_stages.size() == chunks.size(),
        "spread_head_schedule: " + std::to_string(head_stages.size()) + " head stages for " +
            std::to_string(chunks.size()) + " chunks");
  for (size_t c = 0; c < head_stages.size(); ++c)
    check(head_stages[c] >= 0 && head_stages[c] < d,
          "spread_head_schedule: chunk " + std::to_string(c) + "'s head stage " +
              std::to_string(head_stages[c]) + " is not one of the " + std::to_string(d) +
              " stages");
  const bool spread =
      std::any_of(head_stages.begin(), head_stages.end(), [&](int o) { return o != last; });
  if (!spread) {
    Schedule schedule = build_schedule(chunks, waves, options);
    schedule.stages[last] = last_stage_list(schedule.stages[last], head_stages, last);
    return schedule;
  }
  ScheduleOptions with_virtual = options;
  with_virtual.num_stages = d + 1;
  with_virtual.zero_bubble = ZeroBubble::kOff;  // W actions go onto the merged lists below
  // The real stages' warm-up: the virtual last stage would otherwise count as one more.
  if (options.zero_bubble == ZeroBubble::kH2 && options.extra_warmup == 0)
    with_virtual.extra_warmup = h2_extra_warmup(d);
  const Schedule built = build_schedule(chunks, waves, with_virtual);
  SimOptions timing;
  timing.record_events = false;
  timing.record_starts = true;
  timing.virtual_head_stage = true;
  const SimResult sim = simulate(built, chunks, cost, recompute, timing);
  const std::vector<double> at = head_times(built, sim, chunks, head_stages, cost);
  Schedule schedule;
  schedule.stages.resize(d);
  for (int p = 0; p < last; ++p)
    schedule.stages[p] = merged_list(built.stages[p], sim.start_s[p], built.stages[d],
                                     sim.start_s[d], at, head_stages, p, last);
  schedule.stages[last] = last_stage_list(built.stages[last], head_stages, last);
  return with_weight_actions(schedule, options.zero_bubble);
}

}  // namespace infinipipe
