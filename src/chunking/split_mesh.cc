#include "infinipipe/chunking/split_mesh.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "infinipipe/chunking/sequence_processor.h"
#include "infinipipe/core/error.h"

namespace infinipipe {

SplitMesh cost_balanced_mesh(int64_t longest, int k, const CostModel& cost) {
  check(longest >= 1, "cannot build a split mesh for a sequence of " + std::to_string(longest) +
                          " tokens: sequence lengths must be positive");
  check(k >= 1, "slice count k = " + std::to_string(k) + " is invalid: k must be at least 1");
  check(k <= longest, "slice count k = " + std::to_string(k) + " exceeds the longest sequence (" +
                          std::to_string(longest) +
                          " tokens), and every slice needs at least one token: choose k <= " +
                          std::to_string(longest));
  // f(c, s) = F(c + s) - F(c) with F(x) = f(0, x), so equal-cost slices are equal steps of F.
  auto prefix_cost = [&](int64_t x) { return cost.prefix_layer_time(x); };
  const double total = prefix_cost(longest);
  check(total > 0 && std::isfinite(total),
        "the cost model gives a sequence of " + std::to_string(longest) +
            " tokens a per-layer time of " + std::to_string(total) +
            " s; the split mesh needs positive slice costs (check a1 and a2)");
  const double target = total / k;
  const CostCoefficients& co = cost.coefficients();
  // Real root of a1 x^2 + a2 x = y, in the form that stays exact when a1 or a2 is zero.
  auto prefix_inverse = [&](double y) {
    return 2 * y / (co.a2 + std::sqrt(co.a2 * co.a2 + 4 * co.a1 * y));
  };

  SplitMesh mesh;
  std::vector<int64_t>& b = mesh.boundaries;
  b.assign(k + 1, 0);
  b[k] = longest;
  // From the tail: the slice ending at e costs the target when F(c) = F(e) - target. Chaining
  // through the unrounded ends puts b_j at F(b_j) = j * target, so rounding errors do not pile
  // up in the first slice. Two bounds keep the integer mesh sound: slice j is at least as long
  // as slice j+1 (cost balance makes later slices shorter; rounding must not reverse that), and
  // no longer than the mean of what is left before b_{j+1}, so the j earlier slices can each be
  // at least as long (and at least one token).
  int64_t later_length = 1;  // for the last slice: at least one token
  for (int j = k - 1; j >= 1; --j) {
    const double goal = j * target;
    const double x = prefix_inverse(goal);
    int64_t cut = std::isfinite(x) ? static_cast<int64_t>(std::floor(x)) : b[j + 1] - 1;
    cut = std::clamp<int64_t>(cut, 0, longest - 1);
    if (std::abs(prefix_cost(cut + 1) - goal) < std::abs(prefix_cost(cut) - goal)) ++cut;
    const int64_t upper = b[j + 1] - later_length;
    const int64_t lower = (static_cast<int64_t>(j) * b[j + 1] + j) / (j + 1);  // ceil(j b/(j+1))
    b[j] = std::clamp(cut, lower, upper);
    later_length = b[j + 1] - b[j];
  }
  mesh.time_target = target;
  mesh.token_cap = b[1] - b[0];
  return mesh;
}

std::vector<int64_t> equal_cost_cuts(const std::vector<int64_t>& lengths, int pieces,
                                     const CostModel& cost) {
  const size_t n = lengths.size();
  std::vector<int64_t> offsets(n + 1, 0);
  std::vector<double> cost_before_seq(n + 1, 0);
  for (size_t i = 0; i < n; ++i) {
    if (lengths[i] <= 0)
      throw Error("equal_cost_cuts: piece " + std::to_string(i) + " has length " +
                  std::to_string(lengths[i]) + "; lengths must be positive");
    offsets[i + 1] = offsets[i] + lengths[i];
    cost_before_seq[i + 1] = cost_before_seq[i] + cost.prefix_layer_time(lengths[i]);
  }
  const int64_t total_tokens = offsets[n];
  check(pieces >= 1 && pieces <= total_tokens, "cannot cut " + std::to_string(total_tokens) +
                                                   " tokens into " + std::to_string(pieces) +
                                                   " pieces: need 1 <= pieces <= tokens");
  // Per-layer cost of the first x tokens of the run; strictly increasing in x.
  auto cost_before = [&](int64_t x) {
    size_t i = std::upper_bound(offsets.begin(), offsets.end(), x) - offsets.begin() - 1;
    if (i >= n) return cost_before_seq[n];
    return cost_before_seq[i] + cost.prefix_layer_time(x - offsets[i]);
  };
  const double total = cost_before_seq[n];
  std::vector<int64_t> cuts(pieces + 1, 0);
  cuts[pieces] = total_tokens;
  for (int j = 1; j < pieces; ++j) {
    const double goal = total * j / pieces;  // anchored, so rounding does not drift
    int64_t lo = 0, hi = total_tokens;       // smallest x with cost_before(x) >= goal
    while (lo < hi) {
      const int64_t mid = lo + (hi - lo) / 2;
      if (cost_before(mid) >= goal)
        hi = mid;
      else
        lo = mid + 1;
    }
    if (lo > 0 && goal - cost_before(lo - 1) < cost_before(lo) - goal) --lo;
    cuts[j] = std::clamp<int64_t>(lo, cuts[j - 1] + 1, total_tokens - (pieces - j));
  }
  return cuts;
}

}  // namespace infinipipe
