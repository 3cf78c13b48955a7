#include "infinipipe/cost/profile_grid.h"

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
  EXPECT_NE(error_of([] { profile_grid("huge"); }).find("'quick', 'training' or 'full'"),
            std::string::npos);
}

}  // namespace
}  // namespace infinipipe
