#pragma once
// A skewed step: mostly short sequences (log-normal around max_length / 64), about one in seven
// long (a quarter of max_length to max_length); and the longest of a step's lengths. Shared by
// the chunking and the plan tests.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

namespace infinipipe::test_support {

inline std::vector<int64_t> random_lengths(std::mt19937_64& rng, int max_sequences,
                                           int64_t max_length) {
  std::uniform_int_distribution<int> count(1, max_sequences);
  std::lognormal_distribution<double> short_length(std::log(double(max_length) / 64), 1.0);
  std::uniform_int_distribution<int64_t> long_length(max_length / 4, max_length);
  std::bernoulli_distribution is_long(0.15);
  std::vector<int64_t> lengths(count(rng));
  for (int64_t& n : lengths) {
    const double drawn = is_long(rng) ? double(long_length(rng)) : short_length(rng);
    n = std::clamp<int64_t>(static_cast<int64_t>(drawn), 1, max_length);
  }
  return lengths;
}

inline int64_t longest_of(const std::vector<int64_t>& lengths) {
  return *std::max_element(lengths.begin(), lengths.end());
}

}  // namespace infinipipe::test_support
