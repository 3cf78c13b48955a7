#include "infinipipe/schedule/grouping.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "infinipipe/core/error.h"

namespace infinipipe {

std::vector<Wave> group_into_waves(const std::vector<Chunk>& chunks, const WaveCost& wave_cost,
                                   const WaveCost& lower_bound) {
  std::vector<std::vector<int>> sorted = chains(chunks);
  if (sorted.empty()) return {};
  // chains() lists chains by their smallest chunk id; the stable sort keeps that among equals.
  std::stable_sort(sorted.begin(), sorted.end(),
                   [](const auto& a, const auto& b) { return a.size() > b.size(); });
  // Cuts fall only between groups of equal length, so the DP runs over groups, not chains.
  std::vector<size_t> group_start;
  for (size_t c = 0; c < sorted.size(); ++c)
    if (c == 0 || sorted[c].size() != sorted[c - 1].size()) group_start.push_back(c);
  const size_t groups = group_start.size();
  group_start.push_back(sorted.size());

  auto wave_of = [&](size_t first_group, size_t end_group) {
    Wave wave;
    for (size_t c = group_start[first_group]; c < group_start[end_group]; ++c)
      wave.insert(wave.end(), sorted[c].begin(), sorted[c].end());
    return wave;
  };
  auto cost_of = [&](const Wave& wave) {
    const double cost = wave_cost(wave);
    check(!std::isnan(cost), "the wave cost function returned NaN for a wave of " +
                                 std::to_string(wave.size()) +
                                 " chunks; it must return a time or +infinity");
    return cost;
  };

  const double kInfinity = std::numeric_limits<double>::infinity();
  std::vector<double> best(groups + 1, kInfinity);
  std::vector<size_t> cut(groups + 1, 0);  // best[j] ends with the wave of groups [cut[j], j)
  best[0] = 0;
  // With a lower bound: the bound's rounding may differ from the cost's by a few ulps, so a wave
  // is skipped only when its bound clears dp[j] by a relative margin far above that.
  constexpr double kBoundMargin = 1e-6;
  std::vector<std::pair<double, size_t>> order;  // (dp[i] + bound, i)
  for (size_t j = 1; j <= groups; ++j) {
    order.clear();
    for (size_t i = 0; i < j; ++i) {
      if (best[i] == kInfinity) continue;
      order.push_back({lower_bound ? best[i] + lower_bound(wave_of(i, j)) : 0.0, i});
    }
    if (lower_bound) std::stable_sort(order.begin(), order.end());
    for (const auto& [least, i] : order) {
      if (lower_bound) {
        const double bound = least - best[i];
        if (bound == kInfinity) break;  // sorted: the rest cannot fit either
        if (bound > 0 && best[i] + bound * (1 - kBoundMargin) >= best[j]) continue;
      }
      const double cost = cost_of(wave_of(i, j));
      // The smallest i wins ties, as when the waves are weighed in order of i.
      if (best[i] + cost < best[j] || (best[i] + cost == best[j] && i < cut[j])) {
        best[j] = best[i] + cost;
        cut[j] = i;
      }
    }
  }
  if (best[groups] == kInfinity) {
    // Some group alone does not fit (else one wave per group would be finite): name those.
    std::string lengths;
    for (size_t g = 0; g < groups; ++g) {
      if (cost_of(wave_of(g, g + 1)) != kInfinity) continue;
      if (!lengths.empty()) lengths += ", ";
      lengths += std::to_string(group_start[g + 1] - group_start[g]) + " chain(s) of " +
                 std::to_string(sorted[group_start[g]].size()) + " chunk(s)";
    }
    throw Error(
        "no grouping of the step's chunks into waves fits: the smallest possible wave, all chains "
        "of one length, has infinite cost (does not fit memory) for " +
        lengths +
        "; use smaller chunks (a larger slice count K or a lower token cap) or more memory");
  }
  std::vector<Wave> waves;
  for (size_t j = groups; j > 0; j = cut[j]) waves.push_back(wave_of(cut[j], j));
  std::reverse(waves.begin(), waves.end());
  return waves;
}

}  // namespace infinipipe
