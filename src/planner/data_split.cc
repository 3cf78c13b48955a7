#include "infinipipe/planner/data_split.h"

#include <algorithm>
#include <numeric>
#include <string>

#include "infinipipe/core/error.h"

namespace infinipipe {

double whole_sequence_cost(int64_t length, const CostModel& cost) {
  const Chunk chunk{{Slice{0, 0, length, length}}};
  double total = 0;
  for (int p = 0; p < cost.num_stages(); ++p)
    total += cost.forward_time(chunk, p) + cost.backward_time(chunk, p, 0);
  return total;
}

std::vector<std::vector<int>> split_over_replicas(const std::vector<int64_t>& lengths,
                                                  const CostModel& cost, int replicas) {
  check(replicas >= 1, "data split: replicas must be at least 1, got " + std::to_string(replicas));
  const int n = static_cast<int>(lengths.size());
  check(n >= replicas, "data split: the batch has " + std::to_string(n) +
                           " sequences, fewer than the " + std::to_string(replicas) +
                           " data-parallel replicas; every replica needs at least one (use a "
                           "larger batch or fewer replicas)");
  std::vector<double> seq_cost(n);
  for (int i = 0; i < n; ++i) {
    check(lengths[i] >= 1, "data split: sequence " + std::to_string(i) + " has length " +
                               std::to_string(lengths[i]) + "; lengths must be at least 1");
    seq_cost[i] = whole_sequence_cost(lengths[i], cost);
  }
  std::vector<int> order(n);
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(),
                   [&](int a, int b) { return seq_cost[a] > seq_cost[b]; });
  std::vector<double> load(replicas, 0);
  std::vector<std::vector<int>> out(replicas);
  for (int i : order) {
    // Least load, then fewest sequences (only a cost model that prices a sequence at zero ties
    // there: it keeps every replica non-empty), then the lowest replica index.
    int r = 0;
    for (int q = 1; q < replicas; ++q)
      if (load[q] < load[r] || (load[q] == load[r] && out[q].size() < out[r].size())) r = q;
    load[r] += seq_cost[i];
    out[r].push_back(i);
  }
  for (auto& indices : out) std::sort(indices.begin(), indices.end());
  return out;
}

}  // namespace infinipipe
