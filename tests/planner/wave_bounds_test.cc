// wave_bounds.cc: the bound of a wave of a candidate's whole chains, from the candidate's
// per-chunk costs, is pipeline_bound of the wave's chunks alone, bit for bit (the grouping DP's
// lower bounds must not change); a wave that splits a chain or is not in ascending order is
// refused.
#include "wave_bounds.h"

#include <algorithm>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "infinipipe/core/error.h"
#include "planner/candidate_fixtures.h"
#include "planner/instances.h"

namespace infinipipe {
namespace {

void expect_same_bounds(const Candidate& got, const Candidate& want) {
  EXPECT_EQ(got.busy, want.busy);
  EXPECT_EQ(got.fill, want.fill);
  EXPECT_EQ(got.drain, want.drain);
  EXPECT_EQ(got.saving_rate, want.saving_rate);
  EXPECT_EQ(got.bound, want.bound);
  EXPECT_EQ(got.optimistic, want.optimistic);
  EXPECT_EQ(got.excess, want.excess);
  EXPECT_EQ(got.recompute_floor, want.recompute_floor);
  EXPECT_EQ(got.never_fits_as_is, want.never_fits_as_is);
  EXPECT_EQ(got.never_fits_recomputed, want.never_fits_recomputed);
  EXPECT_EQ(got.never_fits_stage, want.never_fits_stage);
  EXPECT_EQ(got.key, want.key);
}

// Random sets of whole chains (a run of chain lengths, as the grouping DP's waves, or any chains
// at all), each bounded both ways, under the instance's budget and a tighter one.
TEST(WaveBounds, AWaveIsBoundedAsItsChunksAlone) {
  std::mt19937_64 rng(12);
  int waves = 0, over = 0, hopeless = 0, split = 0;
  for (int trial = 0; trial < 40; ++trial) {
    const Instance inst = random_instance(rng);
    const Candidate cand = candidate(inst, some_setting(inst, trial));
    SCOPED_TRACE(described(inst, cand.setting));
    const int d = inst.options.num_stages;
    planning::WaveBounds bounds(cand.chunks, inst.cost, d);
    std::vector<std::vector<int>> all = chains(cand.chunks);
    std::stable_sort(all.begin(), all.end(),
                     [](const auto& a, const auto& b) { return a.size() > b.size(); });
    for (int pick = 0; pick < 8; ++pick) {
      std::vector<char> taken(all.size(), 0);
      if (pick % 2 == 0) {
        size_t first = rng() % all.size(), last = rng() % all.size();
        if (first > last) std::swap(first, last);
        std::fill(taken.begin() + first, taken.begin() + last + 1, 1);
      } else {
        for (char& t : taken) t = rng() % 3 == 0;
        taken[rng() % all.size()] = 1;
      }
      Wave wave;
      for (size_t i = 0; i < all.size(); ++i)
        if (taken[i]) wave.insert(wave.end(), all[i].begin(), all[i].end());
      std::sort(wave.begin(), wave.end());
      for (double budget : {inst.options.memory_budget_bytes,
                            inst.options.memory_budget_bytes * (0.3 + 0.1 * (rng() % 5))}) {
        Candidate alone;
        for (int c : wave) alone.chunks.push_back(cand.chunks[c]);
        planning::pipeline_bound(alone, inst.cost, d, budget);
        Candidate got;
        bounds.bound(wave, got, budget);
        expect_same_bounds(got, alone);
        ++waves;
        over += planning::over_budget(alone);
        hopeless += alone.never_fits_recomputed;
        for (const Chunk& chunk : alone.chunks)
          split += std::any_of(chunk.slices.begin(), chunk.slices.end(),
                               [](const Slice& s) { return !s.whole(); });
      }
    }
  }
  EXPECT_EQ(waves, 640);
  EXPECT_GE(over, 50) << "too few waves over the budget to compare the memory walk";
  EXPECT_GE(hopeless, 10) << "too few waves that never fit";
  EXPECT_GE(split, 100) << "too few split sequences to compare the K/V buffers";
}

// Every run of chains from each first chain, bounded in one walk, as each wave alone: cut at the
// chain lengths (the grouping DP's groups) and at every chain, under a budget that makes some
// waves end while their stages still warm up.
TEST(WaveBounds, RunsFromOneChainAreBoundedAsEachWaveAlone) {
  std::mt19937_64 rng(77);
  int waves = 0, hopeless = 0, walks = 0;
  for (int trial = 0; trial < 30; ++trial) {
    const Instance inst = random_instance(rng);
    const Candidate cand = candidate(inst, some_setting(inst, trial));
    SCOPED_TRACE(described(inst, cand.setting));
    const int d = inst.options.num_stages;
    planning::WaveBounds bounds(cand.chunks, inst.cost, d);
    const std::vector<int> runs = bounds.length_runs();
    const int chains = runs.back();
    ASSERT_EQ(chains, static_cast<int>(infinipipe::chains(cand.chunks).size()));
    // The chains in the walk's order, to build each wave's ids.
    std::vector<std::vector<int>> ordered = infinipipe::chains(cand.chunks);
    std::stable_sort(ordered.begin(), ordered.end(),
                     [](const auto& a, const auto& b) { return a.size() > b.size(); });
    for (size_t g = 0; g + 1 < runs.size(); ++g)
      for (int c = runs[g]; c < runs[g + 1]; ++c)
        EXPECT_EQ(ordered[c].size(), ordered[runs[g]].size()) << "a run of one length";
    for (bool by_length : {true, false}) {
      const double budget =
          inst.options.memory_budget_bytes * (by_length ? 1.0 : 0.3 + 0.1 * (rng() % 5));
      const int first =
          by_length ? runs[rng() % (runs.size() - 1)] : static_cast<int>(rng() % chains);
      std::vector<int> ends;
      for (int end = first + 1; end <= chains; ++end)
        if (!by_length || std::find(runs.begin(), runs.end(), end) != runs.end())
          ends.push_back(end);
      std::vector<Candidate> got;
      bounds.bound_runs(first, ends, got, budget);
      ++walks;
      ASSERT_EQ(got.size(), ends.size());
      for (size_t k = 0; k < ends.size(); ++k) {
        Wave wave;
        for (int c = first; c < ends[k]; ++c)
          wave.insert(wave.end(), ordered[c].begin(), ordered[c].end());
        std::sort(wave.begin(), wave.end());
        Candidate alone;
        for (int c : wave) alone.chunks.push_back(cand.chunks[c]);
        planning::pipeline_bound(alone, inst.cost, d, budget);
        SCOPED_TRACE("chains " + std::to_string(first) + " .. " + std::to_string(ends[k]));
        expect_same_bounds(got[k], alone);
        ++waves;
        hopeless += alone.never_fits_recomputed;
      }
    }
  }
  EXPECT_EQ(walks, 60);
  EXPECT_GE(waves, 100);
  EXPECT_GE(hopeless, 20) << "too few waves that never fit";
}

TEST(WaveBounds, RefusesAWaveThatSplitsAChainOrIsNotAscending) {
  std::mt19937_64 rng(3);
  int refused = 0;
  for (int trial = 0; trial < 40 && refused < 5; ++trial) {
    const Instance inst = random_instance(rng);
    const Candidate cand = candidate(inst, some_setting(inst, 1));
    planning::WaveBounds bounds(cand.chunks, inst.cost, inst.options.num_stages);
    Candidate out;
    const std::vector<std::vector<int>> all = chains(cand.chunks);
    const auto longest = std::max_element(
        all.begin(), all.end(), [](const auto& a, const auto& b) { return a.size() < b.size(); });
    if (longest->size() < 2) continue;
    Wave part = {longest->front()};
    EXPECT_THROW(bounds.bound(part, out, inst.options.memory_budget_bytes), Error);
    Wave whole = *longest;
    std::sort(whole.begin(), whole.end());
    EXPECT_NO_THROW(bounds.bound(whole, out, inst.options.memory_budget_bytes));
    std::reverse(whole.begin(), whole.end());
    EXPECT_THROW(bounds.bound(whole, out, inst.options.memory_budget_bytes), Error);
    std::vector<Candidate> outs;
    EXPECT_THROW(bounds.bound_runs(1, {1}, outs, inst.options.memory_budget_bytes), Error);
    ++refused;
  }
  EXPECT_EQ(refused, 5);
}

}  // namespace
}  // namespace infinipipe
