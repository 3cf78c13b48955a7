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
                        int num_chunks, const std::vector<std::vector<double>>& start_s) {
  const int d = schedule.num_stages();
  check(schedule.ranks.empty(), "place_on_ranks: the schedule's stages are placed already");
  check(static_cast<int>(rank_of_stage.size()) == d,
        "place_on_ranks: " + std::to_string(rank_of_stage.size()) + " ranks given for " +
            std::to_string(d) + " stages; give one per stage");
  const bool timed = !start_s.empty();
  if (timed) {
    check(static_cast<int>(start_s.size()) == d,
          "place_on_ranks: start times given for " + std::to_string(start_s.size()) +
              " stages, the schedule has " + std::to_string(d));
    for (int s = 0; s < d; ++s)
      check(start_s[s].size() == schedule.stages[s].size(),
            "place_on_ranks: stage " + std::to_string(s) + " has " +
                std::to_string(schedule.stages[s].size()) + " actions but " +
                std::to_string(start_s[s].size()) + " start times");
  }
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
  auto ready = [&](int s) {
    return next[s] < schedule.stages[s].size() && run.ready(s, static_cast<int>(next[s]));
  };
  auto take = [&](int s) {
    run.run(s, static_cast<int>(next[s]++));
    out.ranks[rank_of_stage[s]].push_back(s);
    --left;
  };
  auto stuck = [&] {
    std::string waits;
    for (int s = 0; s < d; ++s)
      if (next[s] < schedule.stages[s].size())
        waits += (waits.empty() ? "" : "; ") + std::string("stage ") + std::to_string(s) + " " +
                 schedule.stages[s][next[s]].text() + " waits for " +
                 run.waits_for(s, static_cast<int>(next[s]));
    throw Error("place_on_ranks: the stages deadlock before they are placed: " + waits +
                "; validate the schedule first (validate_schedule)");
  };
  if (timed) {
    // Messages as soon as they can go, then the ready compute that started first in the timing
    // given, over every rank at once.
    while (left > 0) {
      for (int s = 0; s < d; ++s)
        while (ready(s) && !schedule.stages[s][next[s]].is_compute()) take(s);
      if (left == 0) break;
      int best = -1;
      for (int s = 0; s < d; ++s)
        if (ready(s) && (best == -1 || start_s[s][next[s]] < start_s[best][next[best]])) best = s;
      if (best == -1) stuck();
      take(best);
    }
    return out;
  }
  while (left > 0) {
    bool moved = false;
    for (int r = 0; r < num_ranks; ++r) {
      // Messages first: they take no time, and a posted RECV or a made SEND may free a peer.
      for (bool again = true; again;) {
        again = false;
        for (int s : stages_of[r])
          while (ready(s) && !schedule.stages[s][next[s]].is_compute()) {
            take(s);
            again = moved = true;
          }
      }
      int best = -1;
      for (int s : stages_of[r]) {
        if (!ready(s)) continue;
        const Action& a = schedule.stages[s][next[s]];
        if (best == -1 || priority(a.type) < priority(schedule.stages[best][next[best]].type) ||
            (priority(a.type) == priority(schedule.stages[best][next[best]].type) && s > best))
          best = s;
      }
      if (best != -1) {
        take(best);
        moved = true;
      }
    }
    if (!moved) stuck();
  }
  return out;
}

}  // namespace infinipipe
