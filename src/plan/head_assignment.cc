// Which stage runs each chunk's head (head_spread.h: assign_head_stages).
#include <algorithm>
#include <numeric>

#include "infinipipe/core/error.h"
#include "infinipipe/plan/head_spread.h"

namespace infinipipe {

std::vector<int> assign_head_stages(const std::vector<Chunk>& chunks, const CostModel& cost,
                                    const HeadAssignmentOptions& options) {
  const int d = cost.num_stages(), last = d - 1;
  const int first = options.exclude_first_stage && d > 1 ? 1 : 0;
  std::vector<double> busy(d, 0.0);
  for (const Chunk& chunk : chunks) {
    const double layer_forward = cost.layer_forward_time(chunk);
    for (int p = 0; p < d; ++p)
      busy[p] += cost.forward_time_with(chunk, p, layer_forward, /*with_head=*/false) +
                 cost.backward_time_with(chunk, p, 0, layer_forward, /*with_head=*/false);
  }
  std::vector<double> head(chunks.size());
  for (size_t c = 0; c < chunks.size(); ++c) head[c] = cost.head_time(chunks[c]);
  // Largest first (longest-processing-time), equal ones in chunk order: deterministic, so every
  // rank planning on its own assigns the same.
  std::vector<int> order(chunks.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return head[a] > head[b]; });
  std::vector<int> stage_of(chunks.size(), last);
  for (int c : order) {
    int best = last;
    for (int p = last - 1; p >= first; --p)
      if (busy[p] < busy[best]) best = p;
    stage_of[c] = best;
    busy[best] += head[c];
  }
  return stage_of;
}

}  // namespace infinipipe
