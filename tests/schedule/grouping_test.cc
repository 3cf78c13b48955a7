#include "infinipipe/schedule/grouping.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <limits>
#include <map>
#include <random>
#include <set>

#include "infinipipe/core/error.h"
#include "schedule/test_chunks.h"

namespace infinipipe {
namespace {

using testing::Step;
using testing::StepBuilder;

constexpr double kInf = std::numeric_limits<double>::infinity();

// A step whose chains come in `counts.size()` distinct lengths, longest group first:
// lengths[g] chunks per chain, counts[g] chains of that length.
struct Instance {
  Step step;
  std::vector<int> lengths, counts;
  std::vector<int> length_of_chunk;
};

Instance make_instance(const std::vector<int>& lengths, const std::vector<int>& counts,
                       std::mt19937_64& rng) {
  StepBuilder b;
  // Interleave the lengths, so that chain discovery order is not the sorted order.
  std::vector<int> todo;
  for (size_t g = 0; g < lengths.size(); ++g)
    for (int c = 0; c < counts[g]; ++c) todo.push_back(lengths[g]);
  std::shuffle(todo.begin(), todo.end(), rng);
  for (int length : todo) b.add_chain(length, std::uniform_int_distribution<int>(0, 1)(rng));
  Instance in{b.step(), lengths, counts, {}};
  testing::shuffle_ids(in.step, rng);
  in.length_of_chunk.resize(in.step.chunks.size());
  for (const auto& chain : in.step.chains)
    for (int c : chain) in.length_of_chunk[c] = static_cast<int>(chain.size());
  return in;
}

// The groups [first, end) a wave holds, or (-1, -1) if it is not a contiguous run of whole groups.
std::pair<int, int> groups_of(const Instance& in, const Wave& wave) {
  std::map<int, int> chunks_per_length;
  for (int c : wave) ++chunks_per_length[in.length_of_chunk[c]];
  int first = -1, end = -1;
  for (int g = 0; g < static_cast<int>(in.lengths.size()); ++g) {
    const auto it = chunks_per_length.find(in.lengths[g]);
    if (it == chunks_per_length.end()) continue;
    if (it->second != in.lengths[g] * in.counts[g]) return {-1, -1};  // part of a group
    if (first == -1) first = g;
    if (end != -1 && end != g) return {-1, -1};  // a gap
    end = g + 1;
  }
  if (first == -1 || chunks_per_length.size() != static_cast<size_t>(end - first))
    return {-1, -1};  // a foreign length
  return {first, end};
}

TEST(Grouping, EqualsBruteForceOverAllCutSets) {
  std::mt19937_64 rng(99);
  int infeasible = 0, feasible = 0;
  for (int trial = 0; trial < 400; ++trial) {
    std::vector<int> lengths = {1, 2, 3, 4, 5, 6};
    std::shuffle(lengths.begin(), lengths.end(), rng);
    lengths.resize(std::uniform_int_distribution<int>(1, 6)(rng));
    std::sort(lengths.rbegin(), lengths.rend());
    std::vector<int> counts;
    for (size_t g = 0; g < lengths.size(); ++g)
      counts.push_back(std::uniform_int_distribution<int>(1, 3)(rng));
    const Instance in = make_instance(lengths, counts, rng);
    const int m = static_cast<int>(lengths.size());

    // Integer costs, so sums are exact whatever order they are added in.
    std::vector<std::vector<double>> cost(m + 1, std::vector<double>(m + 1, kInf));
    const double p_inf = std::uniform_real_distribution<double>(0.0, 0.6)(rng);
    for (int i = 0; i < m; ++i)
      for (int j = i + 1; j <= m; ++j)
        cost[i][j] = std::bernoulli_distribution(p_inf)(rng)
                         ? kInf
                         : std::uniform_int_distribution<int>(1, 50)(rng);

    bool bad_wave_asked = false;
    const WaveCost wave_cost = [&](const Wave& wave) {
      const auto [i, j] = groups_of(in, wave);
      if (i < 0) {
        bad_wave_asked = true;
        return kInf;
      }
      return cost[i][j];
    };

    double brute = kInf;
    for (int mask = 0; mask < (1 << (m - 1)); ++mask) {
      double total = 0;
      int start = 0;
      for (int g = 1; g <= m; ++g) {
        if (g == m || (mask >> (g - 1) & 1)) {
          total += cost[start][g];
          start = g;
        }
      }
      brute = std::min(brute, total);
    }

    if (brute == kInf) {
      EXPECT_THROW(group_into_waves(in.step.chunks, wave_cost), Error) << "trial " << trial;
      ++infeasible;
      continue;
    }
    const std::vector<Wave> waves = group_into_waves(in.step.chunks, wave_cost);
    ASSERT_FALSE(bad_wave_asked) << "the DP asked for a wave that splits or skips a length group";
    double total = 0;
    int expected_first = 0;
    std::set<int> seen;
    for (const Wave& wave : waves) {
      const auto [i, j] = groups_of(in, wave);
      ASSERT_EQ(i, expected_first) << "waves must be contiguous length groups, longest first";
      expected_first = j;
      ASSERT_LT(cost[i][j], kInf) << "an infinite-cost wave was chosen";
      total += cost[i][j];
      for (int c : wave) ASSERT_TRUE(seen.insert(c).second) << "chunk " << c << " in two waves";
    }
    EXPECT_EQ(expected_first, m);
    EXPECT_EQ(seen.size(), in.step.chunks.size());
    EXPECT_EQ(total, brute) << "trial " << trial;
    ++feasible;
  }
  // Both outcomes must have been exercised for the comparison to mean anything.
  EXPECT_GT(feasible, 100);
  EXPECT_GT(infeasible, 10);
}

TEST(Grouping, ALowerBoundWeighsFewerWavesAndChoosesTheSame) {
  std::mt19937_64 rng(100);
  int weighed_with = 0, weighed_without = 0, compared = 0;
  for (int trial = 0; trial < 300; ++trial) {
    const int m = std::uniform_int_distribution<int>(1, 7)(rng);
    std::vector<int> lengths, counts;
    for (int g = 0; g < m; ++g) {
      lengths.push_back(m - g);
      counts.push_back(std::uniform_int_distribution<int>(1, 2)(rng));
    }
    const Instance in = make_instance(lengths, counts, rng);
    // Costs with many ties (small integers), some waves infinite; bounds at most the cost, equal
    // to it in some trials (ties between the bound and dp[j]).
    std::vector<std::vector<double>> cost(m + 1, std::vector<double>(m + 1, kInf)), bound = cost;
    const bool exact = trial % 3 == 0;
    for (int i = 0; i < m; ++i)
      for (int j = i + 1; j <= m; ++j) {
        if (std::bernoulli_distribution(0.2)(rng)) continue;
        cost[i][j] = std::uniform_int_distribution<int>(1, 6)(rng);
        bound[i][j] = exact ? cost[i][j] : cost[i][j] * std::uniform_real_distribution<>(0, 1)(rng);
      }
    int weighed = 0;
    auto from = [&](const std::vector<std::vector<double>>& table, bool count) {
      return [&, count](const Wave& wave) {
        const auto [i, j] = groups_of(in, wave);
        weighed += count;
        return table[i][j];
      };
    };
    std::vector<Wave> plain, bounded;
    try {
      plain = group_into_waves(in.step.chunks, from(cost, true));
    } catch (const Error&) {
      EXPECT_THROW(group_into_waves(in.step.chunks, from(cost, false), from(bound, false)), Error);
      continue;
    }
    weighed_without += weighed;
    weighed = 0;
    bounded = group_into_waves(in.step.chunks, from(cost, true), from(bound, false));
    weighed_with += weighed;
    EXPECT_EQ(bounded, plain) << "trial " << trial;
    ++compared;
  }
  EXPECT_GT(compared, 150);
  EXPECT_LT(weighed_with, weighed_without * 0.8);
}

TEST(Grouping, WavesHoldWholeChainsInSchedulableOrder) {
  std::mt19937_64 rng(3);
  const Instance in = make_instance({5, 3, 1}, {2, 2, 4}, rng);
  // Cheap enough to merge everything: one wave with every chunk.
  const std::vector<Wave> one =
      group_into_waves(in.step.chunks, [](const Wave& w) { return 1.0 + w.size(); });
  ASSERT_EQ(one.size(), 1u);
  EXPECT_EQ(one[0].size(), in.step.chunks.size());
  // A wave may hold at most 10 chunks (a memory limit): the 5s alone, then the 3s and 1s.
  const std::vector<Wave> capped = group_into_waves(
      in.step.chunks, [](const Wave& w) { return w.size() > 10 ? kInf : 1.0 + w.size(); });
  ASSERT_EQ(capped.size(), 2u);
  EXPECT_EQ(capped[0].size(), 10u);
  EXPECT_EQ(capped[1].size(), 10u);
  for (const Wave& w : capped) {
    ScheduleOptions options;
    options.num_stages = 2;
    EXPECT_NO_THROW(order_wave(in.step.chunks, w, options));  // whole chains only
  }
}

std::string grouping_error(const Instance& in, const WaveCost& cost) {
  try {
    group_into_waves(in.step.chunks, cost);
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

TEST(Grouping, ErrorNamesTheLengthsThatFitInNoWave) {
  std::mt19937_64 rng(8);
  const Instance in = make_instance({6, 2, 1}, {1, 3, 2}, rng);
  const std::string all = grouping_error(in, [](const Wave&) { return kInf; });
  EXPECT_NE(all.find("infinite"), std::string::npos) << all;
  EXPECT_NE(all.find("1 chain(s) of 6 chunk(s)"), std::string::npos) << all;
  EXPECT_NE(all.find("3 chain(s) of 2 chunk(s)"), std::string::npos) << all;
  EXPECT_NE(all.find("2 chain(s) of 1 chunk(s)"), std::string::npos) << all;

  // Only waves holding the 6-chunk chain are infinite: the error names that length alone.
  const std::string six = grouping_error(in, [&](const Wave& w) {
    for (int c : w)
      if (in.length_of_chunk[c] == 6) return kInf;
    return 1.0;
  });
  EXPECT_NE(six.find("1 chain(s) of 6 chunk(s)"), std::string::npos) << six;
  EXPECT_EQ(six.find("of 2 chunk(s)"), std::string::npos) << six;
}

TEST(Grouping, NanCostIsAnErrorAndNoChunksGiveNoWaves) {
  std::mt19937_64 rng(1);
  const Instance in = make_instance({2}, {2}, rng);
  EXPECT_THROW(group_into_waves(in.step.chunks, [](const Wave&) { return std::nan(""); }), Error);
  EXPECT_TRUE(group_into_waves({}, [](const Wave&) { return 1.0; }).empty());
}

}  // namespace
}  // namespace infinipipe
