#pragma once
// Cost models, length samplers and checks shared by the chunking tests.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <map>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include <gtest/gtest.h>

#include "infinipipe/core/chunk.h"
#include "infinipipe/core/error.h"
#include "infinipipe/cost/cost_model.h"
#include "support/a800_cost.h"
#include "support/error_of.h"
#include "support/random_lengths.h"

namespace infinipipe::testing_support {

using test_support::a800_cost;

inline CostModel llama13b_a800() { return a800_cost("llama-13b", 8); }

// Slice cost a1 * ((c+s)^2 - c^2) + a2 * s with chosen coefficients, to reach regimes the
// analytic model does not (purely linear, purely quadratic).
inline CostModel hand_made(double a1, double a2) {
  CostCoefficients co;
  co.a1 = a1;
  co.a2 = a2;
  co.p2p_bandwidth = 1e9;  // unused here, but must be positive
  ModelShape shape = ModelShape::builtin("tiny");
  return CostModel(shape, {shape.layers}, co);
}

enum class Distribution { kLogNormal, kUniform, kOneHuge, kAllEqual };
inline const char* name(Distribution d) {
  // In the enum's order.
  static const char* const names[] = {"log-normal", "uniform", "one-huge", "all-equal"};
  return names[static_cast<int>(d)];
}
inline const std::vector<Distribution>& all_distributions() {
  static const std::vector<Distribution> all = {Distribution::kLogNormal, Distribution::kUniform,
                                                Distribution::kOneHuge, Distribution::kAllEqual};
  return all;
}

// `count` lengths in [1, max_length].
inline std::vector<int64_t> sample_lengths(Distribution d, int count, int64_t max_length,
                                           std::mt19937_64& rng) {
  std::vector<int64_t> lengths(count);
  auto clamp = [&](double x) {
    return std::clamp<int64_t>(static_cast<int64_t>(std::llround(x)), 1, max_length);
  };
  switch (d) {
    case Distribution::kLogNormal: {
      // Median a few percent of the maximum, heavy right tail: most short, a few long.
      std::lognormal_distribution<double> dist(std::log(0.03 * max_length + 1), 1.3);
      for (auto& n : lengths) n = clamp(dist(rng));
      break;
    }
    case Distribution::kUniform: {
      std::uniform_int_distribution<int64_t> dist(1, max_length);
      for (auto& n : lengths) n = dist(rng);
      break;
    }
    case Distribution::kOneHuge: {
      std::uniform_int_distribution<int64_t> dist(1, std::max<int64_t>(1, max_length / 200));
      for (auto& n : lengths) n = dist(rng);
      lengths[std::uniform_int_distribution<int>(0, count - 1)(rng)] = max_length;
      break;
    }
    case Distribution::kAllEqual: {
      const int64_t n = std::uniform_int_distribution<int64_t>(1, max_length)(rng);
      std::fill(lengths.begin(), lengths.end(), n);
      break;
    }
  }
  return lengths;
}

// A random step of every distribution: `per_distribution` steps each, 1-300 sequences of up to
// 64K tokens.
struct Case {
  std::vector<int64_t> lengths;
  std::string label;
};
inline std::vector<Case> random_cases(uint64_t seed, int per_distribution) {
  std::mt19937_64 rng(seed);
  std::vector<Case> cases;
  for (Distribution d : all_distributions())
    for (int trial = 0; trial < per_distribution; ++trial) {
      const int count = std::uniform_int_distribution<int>(1, 300)(rng);
      const int64_t max_length = std::uniform_int_distribution<int64_t>(1, 65536)(rng);
      cases.push_back({sample_lengths(d, count, max_length, rng),
                       std::string(name(d)) + " trial " + std::to_string(trial)});
    }
  return cases;
}

using test_support::longest_of;

// How often each slice (sequence, start, end) occurs in the chunks, whatever chunk holds it.
inline std::map<std::tuple<int, int64_t, int64_t>, int> slice_counts(
    const std::vector<Chunk>& chunks) {
  std::map<std::tuple<int, int64_t, int64_t>, int> counts;
  for (const Chunk& c : chunks)
    for (const Slice& s : c.slices) ++counts[{s.seq, s.start, s.end}];
  return counts;
}

inline double slice_cost(const CostModel& cost, const Slice& s) {
  return cost.slice_layer_time(s.context(), s.length());
}
inline double chunk_cost(const CostModel& cost, const Chunk& c) {
  double t = 0;
  for (const Slice& s : c.slices) t += slice_cost(cost, s);
  return t;
}
// The dearest single token of a sequence of `length` tokens: its last one.
inline double dearest_token_cost(const CostModel& cost, int64_t length) {
  return cost.slice_layer_time(length - 1, 1);
}

using test_support::expect_error;

}  // namespace infinipipe::testing_support
