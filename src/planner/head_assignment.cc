// Which stage runs each chunk's head (head_spread.h: assign_head_stages).
#include <algorithm>
#include <limits>

#include "infinipipe/core/error.h"
#include "infinipipe/planner/head_spread.h"

namespace infinipipe {

namespace {

// Each eligible stage's share of the heads' work: water filling, the least busy stages raised
// together until the heads' work is poured out (shares sum to 1; the busiest may get none).
std::vector<double> head_shares(const std::vector<double>& busy, double heads, int first) {
  const int d = static_cast<int>(busy.size());
  std::vector<double> levels(busy.begin() + first, busy.end());
  std::sort(levels.begin(), levels.end());
  double left = heads, level = levels.front();
  for (size_t k = 1; k <= levels.size(); ++k) {
    const double next = k < levels.size() ? levels[k] : std::numeric_limits<double>::infinity();
    if (left <= (next - level) * double(k)) {
      level += left / double(k);
      break;
    }
    left -= (next - level) * double(k);
    level = next;
  }
  std::vector<double> share(d, 0.0);
  for (int p = first; p < d; ++p)
    share[p] = heads > 0 ? std::max(0.0, level - busy[p]) / heads : 0.0;
  return share;
}

}  // namespace

std::vector<int> forward_order(const Schedule& schedule) {
  std::vector<int> order;
  if (schedule.stages.empty()) return order;
  for (const Action& a : schedule.stages.front())
    if (a.type == ActionType::kForward) order.push_back(a.chunk);
  return order;
}

std::vector<int> assign_head_stages(const std::vector<Chunk>& chunks,
                                    const std::vector<int>& forward_order, const CostModel& cost,
                                    const HeadAssignmentOptions& options) {
  const int d = cost.num_stages(), last = d - 1;
  check(forward_order.size() == chunks.size(), "assign_head_stages: a forward order of " +
                                                   std::to_string(forward_order.size()) +
                                                   " chunks for " + std::to_string(chunks.size()));
  const int first = std::clamp(options.first_stage, 0, last);
  std::vector<double> busy(d, 0.0);
  double heads = 0;
  for (const Chunk& chunk : chunks) {
    const double layer_forward = cost.layer_forward_time(chunk);
    for (int p = 0; p < d; ++p)
      busy[p] += cost.forward_time_with(chunk, p, layer_forward, /*with_head=*/false) +
                 cost.backward_time_with(chunk, p, 0, layer_forward, /*with_head=*/false);
    heads += cost.head_time(chunk);
  }
  const std::vector<double> share = head_shares(busy, heads, first);
  // Dealt in forward order: each head to the stage furthest behind its share of the heads dealt
  // so far (ties: the later stage), so every stage's heads come evenly through the step.
  std::vector<int> stage_of(chunks.size(), last);
  std::vector<double> given(d, 0.0);
  double dealt = 0;
  for (int c : forward_order) {
    check(c >= 0 && c < static_cast<int>(chunks.size()),
          "assign_head_stages: the forward order names chunk " + std::to_string(c));
    const double head = cost.head_time(chunks[c]);
    dealt += head;
    int best = last;
    double most_behind = -std::numeric_limits<double>::infinity();
    for (int p = last; p >= first; --p) {
      const double behind = share[p] * dealt - given[p];
      if (behind > most_behind) {
        most_behind = behind;
        best = p;
      }
    }
    stage_of[c] = best;
    given[best] += head;
  }
  return stage_of;
}

}  // namespace infinipipe
