#include "infinipipe/cost/profile_grid.h"

#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include <gtest/gtest.h>

#include "support/error_of.h"

namespace infinipipe {
namespace {

using test_support::error_of;

TEST(ProfileGrid, LeavesOutSequencesOverTheLongest) {
  const ProfileGrid grid{{64, 4096}, {0, 2048, 8192}, 1, 6144};
  const std::vector<std::pair<int64_t, int64_t>> want = {
      {64, 0}, {64, 2048}, {4096, 0}, {4096, 2048}};
  std::vector<std::pair<int64_t, int64_t>> got;
  for (const GridPoint& p : grid.points()) got.emplace_back(p.tokens, p.context);
  EXPECT_EQ(got, want);
  ProfileGrid unlimited = grid;
  unlimited.longest_sequence = 0;
  EXPECT_EQ(unlimited.points().size(), 6u);
}

TEST(ProfileGrid, OnlyTheNamedGrids) {
  EXPECT_NE(error_of([] { profile_grid("huge"); }).find("'quick', 'training', 'full' or 'gpu'"),
            std::string::npos);
}

TEST(ProfileGrid, TheGpuGridReachesLongContextsAndLargeChunks) {
  const std::vector<GridPoint> points = profile_grid("gpu").points();
  ASSERT_FALSE(points.empty());
  int64_t most_tokens = 0, most_context = 0;
  for (const GridPoint& p : points) {
    most_tokens = std::max(most_tokens, p.tokens);
    most_context = std::max(most_context, p.context);
  }
  EXPECT_EQ(most_tokens, 16384);
  EXPECT_EQ(most_context, 98304);
}

TEST(ProfileGrid, ShortRunsAreTimedUntilTheyHoldTheLeastTokens) {
  EXPECT_EQ(timed_runs(256, 5, 0), 5);
  EXPECT_EQ(timed_runs(256, 5, 10240), 40);
  EXPECT_EQ(timed_runs(300, 5, 10240), 35);  // rounded up: 35 x 300 >= 10240
  EXPECT_EQ(timed_runs(2048, 5, 10240), 5);
  EXPECT_EQ(timed_runs(16384, 5, 10240), 5);  // never fewer than repeats
  const ProfileGrid gpu = profile_grid("gpu");
  EXPECT_EQ(timed_runs(256, gpu.repeats, gpu.min_timed_tokens), 40);
  EXPECT_EQ(timed_runs(1024, gpu.repeats, gpu.min_timed_tokens), 10);
  EXPECT_EQ(timed_runs(2048, gpu.repeats, gpu.min_timed_tokens), gpu.repeats);
  for (const char* name : {"quick", "training", "full"})
    EXPECT_EQ(profile_grid(name).min_timed_tokens, 0);
  EXPECT_NE(error_of([] { timed_runs(0, 5, 0); }).find("tokens >= 1"), std::string::npos);
}

}  // namespace
}  // namespace infinipipe
