// data_split.cc: the batch split over data-parallel replicas by predicted cost.
#include "infinipipe/planner/data_split.h"

#include <algorithm>
#include <random>

#include <gtest/gtest.h>

#include "support/a800_cost.h"
#include "support/error_of.h"
#include "support/random_lengths.h"

namespace infinipipe {
namespace {

using test_support::a800_cost;
using test_support::expect_error;

TEST(DataSplit, EverySequenceOnceAscendingAndBalanced) {
  const CostModel cost = a800_cost("llama-7b", 4);
  std::mt19937_64 rng(11);
  for (int trial = 0; trial < 10; ++trial) {
    std::vector<int64_t> lengths = test_support::random_lengths(rng, 256, 98304);
    while (lengths.size() < 8) lengths.push_back(1 + lengths.size());
    for (int replicas : {1, 2, 3, 8}) {
      const auto split = split_over_replicas(lengths, cost, replicas);
      ASSERT_EQ(static_cast<int>(split.size()), replicas);
      std::vector<int> seen;
      std::vector<double> load;
      double largest = 0;
      for (const auto& indices : split) {
        EXPECT_FALSE(indices.empty());
        EXPECT_TRUE(std::is_sorted(indices.begin(), indices.end()));
        double total = 0;
        for (int i : indices) {
          seen.push_back(i);
          const double c = whole_sequence_cost(lengths[i], cost);
          total += c;
          largest = std::max(largest, c);
        }
        load.push_back(total);
      }
      std::sort(seen.begin(), seen.end());
      ASSERT_EQ(seen.size(), lengths.size());
      for (size_t i = 0; i < seen.size(); ++i) EXPECT_EQ(seen[i], static_cast<int>(i));
      // Greedy LPT: the most loaded replica got its last sequence while it was the least
      // loaded, so the spread is at most one sequence's cost.
      const auto [lo, hi] = std::minmax_element(load.begin(), load.end());
      EXPECT_LE(*hi - *lo, largest * (1 + 1e-12));
      // Deterministic.
      EXPECT_EQ(split_over_replicas(lengths, cost, replicas), split);
    }
  }
}

TEST(DataSplit, TheLongestSequencesGoFirstAndTiesToTheLowerIndex) {
  const CostModel cost = a800_cost("llama-7b", 4);
  // Equal lengths: round robin by index.
  EXPECT_EQ(split_over_replicas({100, 100, 100, 100}, cost, 2),
            (std::vector<std::vector<int>>{{0, 2}, {1, 3}}));
  // One long sequence outweighs the rest: it stays alone.
  EXPECT_EQ(split_over_replicas({1000, 60000, 900, 800, 700}, cost, 2),
            (std::vector<std::vector<int>>{{1}, {0, 2, 3, 4}}));
}

TEST(DataSplit, FewerSequencesThanReplicasIsAnError) {
  const CostModel cost = a800_cost("llama-7b", 4);
  expect_error(
      [&] {
        split_over_replicas({100, 200}, cost, 3);
      },
      {"2 sequences", "fewer than the 3 data-parallel replicas"});
  expect_error([&] { split_over_replicas({100, 0}, cost, 1); }, {"sequence 1", "length 0"});
  expect_error([&] { split_over_replicas({100}, cost, 0); }, {"replicas must be at least 1"});
}

}  // namespace
}  // namespace infinipipe
