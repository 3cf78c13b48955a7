#include "infinipipe/schedule/placement.h"

#include <algorithm>

#include "dry_run.h"
#include "infinipipe/core/error.h"

namespace infinipipe {

std::vector<int> v_shape(int num_ranks) {
  check(num_ranks >= 1, "v_shape: " + std::to_string(num_ranks) + " ranks; need at least 1");
  std::vector<int> rank(2 * static_cast<size_t>(num_ranks));
  for (int s = 0; s < 2 * num_ranks; ++s) rank[s] = s < num_ranks ? s : 2 * num_ranks - 1 - s;
  return rank;
}

namespace {

// Lower runs first among a rank's ready computes.
int priority(ActionType type) {
  switch (type) {
    case ActionType::kBackward:
      return 0;
    case ActionType::kHead:  // the loss: its gradient is what every B waits for
      return 1;
    case ActionType::kForward:
      return 2;
    default:  // kWeight
      return 3;
  }
}

}  // namespace

Schedule place_on_ranks(const Schedule& schedule, const std::vector<int>& rank_of_stage,
                        int num_chunks) {
  const int d = schedule.num_stages();
  check(schedule.ranks.empty(), "place_on_ranks: the schedule's stages are placed already");
  check(static_cast<int>(rank_of_stage.size()) == d,
        "place_on_ranks: " + std::to_string(rank_of_stage.size()) + " ranks given for " +
            std::to_string(d) + " stages; give one per stage");
  const int num_ranks =
      rank_of_stage.empty() ? 0 : *std::max_element(rank_of_stage.begin(), rank_of_stage.end()) + 1;
  std::vector<std::vector<int>> stages_of(num_ranks);
  for (int s = 0; s < d; ++s) {
    check(rank_of_stage[s] >= 0, "place_on_ranks: stage " + std::to_string(s) + " has rank " +
                                     std::to_string(rank_of_stage[s]) + "; ranks start at 0");
    stages_of[rank_of_stage[s]].push_back(s);
  }
  for (int r = 0; r < num_ranks; ++r)
    check(!stages_of[r].empty(), "place_on_ranks: no stage is placed on rank " + std::to_string(r) +
                                     "; ranks are numbered 0.." + std::to_string(num_ranks - 1) +
                                     " without gaps");

  Schedule out = schedule;
  out.ranks.assign(num_ranks, {});
  DryRun run(schedule, num_chunks);
  std::vector<size_t> next(d, 0);
  size_t left = 0;
  for (const auto& list : schedule.stages) left += list.size();
  auto take = [&](int r, int s) {
    run.run(s, static_cast<int>(next[s]++));
    out.ranks[r].push_back(s);
    --left;
  };
  while (left > 0) {
    bool moved = false;
    for (int r = 0; r < num_ranks; ++r) {
      // Messages first: they take no time, and a posted RECV or a made SEND may free a peer.
      for (bool again = true; again;) {
        again = false;
        for (int s : stages_of[r])
          while (next[s] < schedule.stages[s].size() && !schedule.stages[s][next[s]].is_compute() &&
                 run.ready(s, static_cast<int>(next[s]))) {
            take(r, s);
            again = moved = true;
          }
      }
      int best = -1;
      for (int s : stages_of[r]) {
        if (next[s] == schedule.stages[s].size()) continue;
        const Action& a = schedule.stages[s][next[s]];
        if (!a.is_compute() || !run.ready(s, static_cast<int>(next[s]))) continue;
        if (best == -1 || priority(a.type) < priority(schedule.stages[best][next[best]].type) ||
            (priority(a.type) == priority(schedule.stages[best][next[best]].type) && s > best))
          best = s;
      }
      if (best != -1) {
        take(r, best);
        moved = true;
      }
    }
    if (!moved) {
      std::string waits;
      for (int s = 0; s < d; ++s)
        if (next[s] < schedule.stages[s].size())
          waits += (waits.empty() ? "" : "; ") + std::string("stage ") + std::to_string(s) + " " +
                   schedule.stages[s][next[s]].text() + " waits for " +
                   run.waits_for(s, static_cast<int>(next[s]));
      throw Error("place_on_ranks: the stages deadlock before they are placed: " + waits +
                  "; validate the schedule first (validate_schedule)");
    }
  }
  return out;
}

}  // namespace infinipipe
