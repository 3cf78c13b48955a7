#include "infinipipe/chunking/split_mesh.h"

#include <numeric>
#include <random>

#include <gtest/gtest.h>

#include "chunking/chunking_test_support.h"
#include "infinipipe/chunking/sequence_processor.h"

namespace infinipipe {
namespace {

using namespace testing_support;

// The mesh properties EPP relies on, for one (longest, k, cost).
void check_mesh(int64_t longest, int k, const CostModel& cost) {
  SCOPED_TRACE("longest " + std::to_string(longest) + ", k " + std::to_string(k));
  const SplitMesh mesh = cost_balanced_mesh(longest, k, cost);
  const auto& b = mesh.boundaries;
  ASSERT_EQ(b.size(), static_cast<size_t>(k) + 1);
  EXPECT_EQ(b.front(), 0);
  EXPECT_EQ(b.back(), longest);
  const double total = cost.slice_layer_time(0, longest);
  EXPECT_NEAR(mesh.time_target, total / k, 1e-12 * total);
  EXPECT_EQ(mesh.token_cap, b[1] - b[0]);
  const double tolerance = dearest_token_cost(cost, longest) * (1 + 1e-9);
  for (int j = 0; j < k; ++j) {
    ASSERT_LT(b[j], b[j + 1]) << "slice " << j << " is empty";
    const double slice = cost.slice_layer_time(b[j], b[j + 1] - b[j]);
    EXPECT_LE(std::abs(slice - mesh.time_target), tolerance)
        << "slice " << j << " [" << b[j] << ", " << b[j + 1] << ") is off the target by more "
        << "than one token's cost";
    if (j > 0)
      EXPECT_LE(b[j + 1] - b[j], b[j] - b[j - 1])
          << "slice " << j << " is longer than slice " << j - 1;
  }
}

TEST(SplitMesh, PropertiesOverRandomLengthsAndSliceCounts) {
  const std::vector<std::pair<std::string, CostModel>> models = {
      {"llama-13b/a800", llama13b_a800()},
      {"linear", hand_made(0, 1e-6)},
      {"quadratic", hand_made(1e-9, 0)},
      {"attention-heavy", hand_made(1e-6, 1e-6)}};
  std::mt19937_64 rng(20250901);
  for (const auto& [model_name, cost] : models) {
    SCOPED_TRACE(model_name);
    for (int trial = 0; trial < 300; ++trial) {
      // Spread the lengths over orders of magnitude, from a handful of tokens to 256K.
      const int64_t longest = static_cast<int64_t>(
          std::exp(std::uniform_real_distribution<double>(0, std::log(262144.0))(rng)));
      const int64_t max_k = std::min<int64_t>(longest, 64);
      const int k = static_cast<int>(std::uniform_int_distribution<int64_t>(1, max_k)(rng));
      check_mesh(longest, k, cost);
    }
    for (int64_t longest = 1; longest <= 40; ++longest)  // every k where slices are a few tokens
      for (int k = 1; k <= longest; ++k) check_mesh(longest, k, cost);
  }
}

TEST(SplitMesh, LaterSlicesAreShorterWhenAttentionMatters) {
  // At 96K tokens attention dominates a 13B layer, so equal cost means clearly unequal lengths.
  const CostModel cost = llama13b_a800();
  const SplitMesh mesh = cost_balanced_mesh(98304, 8, cost);
  const auto& b = mesh.boundaries;
  const int64_t first = b[1] - b[0], last = b[8] - b[7];
  EXPECT_GT(first, 2 * last) << "first slice " << first << " tokens, last " << last;
  EXPECT_GT(first, 98304 / 8);
}

TEST(SplitMesh, OneSliceIsTheWholeSequence) {
  const CostModel cost = llama13b_a800();
  for (int64_t longest : {1, 7, 4096, 131072}) {
    const SplitMesh mesh = cost_balanced_mesh(longest, 1, cost);
    EXPECT_EQ(mesh.boundaries, (std::vector<int64_t>{0, longest}));
    EXPECT_EQ(mesh.token_cap, longest);
    EXPECT_DOUBLE_EQ(mesh.time_target, cost.slice_layer_time(0, longest));
  }
}

TEST(SplitMesh, SliceCountAsLargeAsTheSequenceGivesOneTokenSlices) {
  const CostModel cost = hand_made(1e-6, 1e-6);
  const SplitMesh mesh = cost_balanced_mesh(17, 17, cost);
  std::vector<int64_t> expected(18);
  std::iota(expected.begin(), expected.end(), 0);
  EXPECT_EQ(mesh.boundaries, expected);
}

TEST(SplitMesh, BadInputIsRejectedWithTheNumbers) {
  const CostModel cost = llama13b_a800();
  expect_error([&] { cost_balanced_mesh(100, 0, cost); }, {"k = 0", "at least 1"});
  expect_error([&] { cost_balanced_mesh(100, -3, cost); }, {"k = -3"});
  expect_error([&] { cost_balanced_mesh(100, 101, cost); }, {"k = 101", "100 tokens", "k <= 100"});
  expect_error([&] { cost_balanced_mesh(0, 1, cost); }, {"0 tokens"});
  expect_error([&] { cost_balanced_mesh(-5, 1, cost); }, {"-5 tokens"});
  expect_error([&] { cost_balanced_mesh(100, 2, hand_made(0, 0)); }, {"positive slice costs"});
}

TEST(EqualCostCuts, PiecesOfARunHaveNearEqualCost) {
  std::mt19937_64 rng(7);
  for (const CostModel& cost : {llama13b_a800(), hand_made(1e-9, 0), hand_made(0, 1e-6)}) {
    for (int trial = 0; trial < 200; ++trial) {
      const int count = std::uniform_int_distribution<int>(1, 12)(rng);
      const auto d = all_distributions()[trial % 4];
      const std::vector<int64_t> run = sample_lengths(d, count, 32768, rng);
      const int64_t tokens = std::accumulate(run.begin(), run.end(), int64_t{0});
      const int pieces = static_cast<int>(
          std::uniform_int_distribution<int64_t>(1, std::min<int64_t>(tokens, 32))(rng));
      const std::vector<int64_t> cuts = equal_cost_cuts(run, pieces, cost);
      ASSERT_EQ(cuts.size(), static_cast<size_t>(pieces) + 1);
      EXPECT_EQ(cuts.front(), 0);
      EXPECT_EQ(cuts.back(), tokens);
      // Cost of [x, y) of the run, each sequence attending only to itself.
      auto run_cost = [&](int64_t x, int64_t y) {
        double t = 0;
        int64_t offset = 0;
        for (int64_t n : run) {
          const int64_t from = std::max(x, offset), to = std::min(y, offset + n);
          if (from < to) t += cost.slice_layer_time(from - offset, to - from);
          offset += n;
        }
        return t;
      };
      const double total = run_cost(0, tokens);
      const int64_t longest = *std::max_element(run.begin(), run.end());
      for (int p = 0; p < pieces; ++p) {
        ASSERT_LT(cuts[p], cuts[p + 1]);
        EXPECT_LE(std::abs(run_cost(cuts[p], cuts[p + 1]) - total / pieces),
                  dearest_token_cost(cost, longest) * (1 + 1e-9))
            << "piece " << p << " of " << pieces << " (" << name(d) << ")";
      }
    }
  }
}

}  // namespace
}  // namespace infinipipe
