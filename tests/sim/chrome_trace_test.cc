#include <cstdio>
#include <fstream>
#include <set>
#include <string>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "infinipipe/core/error.h"
#include "infinipipe/sim/simulator.h"
#include "sim/sim_fixtures.h"

namespace infinipipe {
namespace {

SimResult three_stage_run() {
  CostModel cost = test::simple_cost({1, 2, 1}, 1e-4);
  const int d = 3, m = 5;
  Recompute recompute(d, std::vector<int>(m, 0));
  recompute[1][2] = 2;
  return simulate(test::one_f_one_b(d, m), test::equal_chunks(m, 20), cost, recompute, {});
}

TEST(ChromeTrace, OneCompleteEventPerComputeOnItsStageThread) {
  SimResult r = three_stage_run();
  // Through text and back: what a viewer would load.
  nlohmann::json trace = nlohmann::json::parse(chrome_trace(r).dump());
  ASSERT_TRUE(trace.at("traceEvents").is_array());

  int forwards = 0, backwards = 0, recomputes = 0, counters = 0;
  std::set<std::string> thread_names;
  for (const auto& e : trace["traceEvents"]) {
    const std::string ph = e.at("ph");
    EXPECT_EQ(e.at("pid"), 0);
    if (ph == "M") {
      thread_names.insert(e.at("args").at("name").get<std::string>());
    } else if (ph == "X") {
      const std::string cat = e.at("cat");
      EXPECT_GE(e.at("dur").get<double>(), 0);
      if (cat == "forward" || cat == "backward" || cat == "recompute") {
        EXPECT_GE(e.at("tid").get<int>(), 0);
        EXPECT_LT(e.at("tid").get<int>(), 3);
      }
      forwards += cat == "forward";
      backwards += cat == "backward";
      recomputes += cat == "recompute";
    } else if (ph == "C") {
      ++counters;
      EXPECT_GT(e.at("args").at("GiB").get<double>(), 0);
    }
  }
  EXPECT_EQ(forwards, 3 * 5);
  EXPECT_EQ(backwards, 3 * 5);
  EXPECT_EQ(recomputes, 1);
  EXPECT_EQ(counters, 3 * 10);  // a memory moment per forward and per backward
  for (int p = 0; p < 3; ++p) EXPECT_TRUE(thread_names.count("stage " + std::to_string(p)));

  // Times are in microseconds: the last event ends at the step time.
  double last_end = 0;
  for (const auto& e : trace["traceEvents"])
    if (e["ph"] == "X")
      last_end = std::max(last_end, e["ts"].get<double>() + e["dur"].get<double>());
  EXPECT_NEAR(last_end, r.step_time_s * 1e6, 1e-6);
}

TEST(ChromeTrace, WritesAFileAndNamesAPathItCannotWrite) {
  SimResult r = three_stage_run();
  const std::string path = ::testing::TempDir() + "infinipipe_sim_trace.json";
  write_chrome_trace(r, path);
  std::ifstream in(path);
  nlohmann::json back = nlohmann::json::parse(in);
  EXPECT_EQ(back, chrome_trace(r));
  std::remove(path.c_str());

  const std::string bad = "/nonexistent-dir-for-infinipipe/trace.json";
  try {
    write_chrome_trace(r, bad);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(bad), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace infinipipe
