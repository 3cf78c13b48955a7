// The greedy solver's tournament (src/recompute/tournament.h) against a scan from the front:
// after any batch of priority changes, best() is the variable the scan finds (the highest
// priority, the lowest index among equals), on random priorities with many ties and zeros.
#include "tournament.h"

#include <gtest/gtest.h>

#include <random>
#include <vector>

namespace infinipipe {
namespace {

int scanned_best(const std::vector<double>& priority) {
  int best = priority.empty() ? -1 : 0;
  for (int j = 1; j < static_cast<int>(priority.size()); ++j)
    if (priority[j] > priority[best]) best = j;
  return best;
}

TEST(Tournament, BestIsWhatAScanFromTheFrontFinds) {
  std::mt19937_64 rng(31);
  int checks = 0;
  for (int trial = 0; trial < 200; ++trial) {
    const int n = std::uniform_int_distribution<int>(1, 300)(rng);
    // Few distinct values, so ties are common; zeros as for variables at their bound.
    std::uniform_int_distribution<int> value(0, trial % 2 == 0 ? 4 : 1000);
    std::vector<double> priority(n);
    for (double& p : priority) p = value(rng) * 0.5;
    Tournament tournament(priority);
    EXPECT_EQ(tournament.best(), scanned_best(priority));
    for (int round = 0; round < 50; ++round) {
      // A batch of changes (some variables changed twice, some set back to what they were),
      // then the best, as the solver asks for it once per pick.
      const int changes = std::uniform_int_distribution<int>(0, trial % 3 == 0 ? n : 8)(rng);
      for (int c = 0; c < changes; ++c) {
        const int j = std::uniform_int_distribution<int>(0, n - 1)(rng);
        priority[j] = c % 5 == 4 ? priority[j] : value(rng) * 0.5;
        tournament.update(j);
      }
      ASSERT_EQ(tournament.best(), scanned_best(priority))
          << "trial " << trial << " round " << round;
      ++checks;
    }
  }
  EXPECT_EQ(checks, 200 * 50);
}

}  // namespace
}  // namespace infinipipe
