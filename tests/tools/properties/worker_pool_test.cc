// properties/worker_pool.cc: every item is reported once; one that never returns is reported
// timed out and one that kills its worker crashed, and the run goes on past both.
#include "properties/worker_pool.h"

#include <unistd.h>

#include <csignal>
#include <map>
#include <string>

#include <gtest/gtest.h>

namespace infinipipe::properties {
namespace {

TEST(WorkerPool, ReportsEveryItemOnceThroughHangsAndCrashes) {
  std::map<int64_t, ItemOutcome> seen;
  PoolOptions options;
  options.workers = 2;
  options.item_timeout_s = 0.5;
  run_pool(
      40, options,
      [](int64_t i) -> std::string {
        if (i == 7) pause();  // never returns
        if (i == 11) raise(SIGSEGV);
        return "item " + std::to_string(i * i);
      },
      [&](const ItemOutcome& o) { EXPECT_TRUE(seen.emplace(o.index, o).second) << o.index; });
  ASSERT_EQ(seen.size(), 40u);
  EXPECT_EQ(seen[7].status, ItemStatus::kTimedOut);
  EXPECT_GE(seen[7].seconds, 0.5);
  EXPECT_EQ(seen[11].status, ItemStatus::kCrashed);
  EXPECT_NE(seen[11].reason.find("Segmentation"), std::string::npos) << seen[11].reason;
  EXPECT_EQ(seen[39].status, ItemStatus::kDone);
  EXPECT_EQ(seen[39].line, "item 1521");
}

}  // namespace
}  // namespace infinipipe::properties
