// Plan serialisation: JSON round trip, the stable hash ranks compare, and errors on malformed
// plan JSON that name the field.
#include "infinipipe/plan/plan.h"

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <functional>
#include <set>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "infinipipe/core/error.h"
#include "infinipipe/cost/cost_model.h"
#include "infinipipe/planner/planner.h"
#include "support/a800_cost.h"

namespace infinipipe {
namespace {

Plan small_plan() {
  const CostModel cost = test_support::a800_cost("tiny", 2);
  PlannerOptions options;
  options.num_stages = 2;
  options.memory_budget_bytes = 1e12;
  options.max_k = 4;
  options.baseline_chunkings = false;  // the sequence processor's chunks: several, in an order
  PlanResult r = plan_epp({3000, 200, 150, 90, 40}, cost, options);
  EXPECT_TRUE(r.feasible) << r.reason;
  return r.plan;
}

void expect_error_naming(const nlohmann::json& j, const std::string& field) {
  try {
    j.get<Plan>();
    ADD_FAILURE() << "no error for malformed \"" << field << "\"";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(field), std::string::npos)
        << "message does not name \"" << field << "\": " << e.what();
  }
}

TEST(Method, NamesRoundTrip) {
  for (Method m : all_methods()) EXPECT_EQ(parse_method(to_string(m)), m);
  EXPECT_EQ(all_methods().size(), 4u);
  try {
    parse_method("gpipe");
    FAIL() << "expected Error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("seq1f1b"), std::string::npos) << e.what();
  }
}

TEST(Plan, JsonRoundTripKeepsEverything) {
  const Plan plan = small_plan();
  ASSERT_FALSE(plan.chunks.empty());
  const nlohmann::json j = plan;
  const Plan back = nlohmann::json::parse(j.dump()).get<Plan>();
  EXPECT_EQ(back.method, plan.method);
  EXPECT_EQ(back.setting, plan.setting);
  EXPECT_EQ(back.lengths, plan.lengths);
  ASSERT_EQ(back.chunks.size(), plan.chunks.size());
  for (size_t c = 0; c < plan.chunks.size(); ++c) {
    ASSERT_EQ(back.chunks[c].slices.size(), plan.chunks[c].slices.size());
    for (size_t i = 0; i < plan.chunks[c].slices.size(); ++i) {
      const Slice& a = plan.chunks[c].slices[i];
      const Slice& b = back.chunks[c].slices[i];
      EXPECT_EQ(std::tie(a.seq, a.start, a.end, a.seq_length),
                std::tie(b.seq, b.start, b.end, b.seq_length));
    }
  }
  EXPECT_EQ(back.waves, plan.waves);
  EXPECT_EQ(back.schedule.text(), plan.schedule.text());
  EXPECT_EQ(back.recompute, plan.recompute);
  EXPECT_EQ(back.layers_per_stage, plan.layers_per_stage);
  EXPECT_DOUBLE_EQ(back.step_time_s, plan.step_time_s);
  EXPECT_EQ(back.peak_memory_bytes, plan.peak_memory_bytes);
  EXPECT_EQ(back.checkpoint_solver, plan.checkpoint_solver);
  EXPECT_EQ(back.stage_p2p_s, plan.stage_p2p_s);
  EXPECT_EQ(back.stage_alltoall_s, plan.stage_alltoall_s);
  EXPECT_EQ(back.hash(), plan.hash());
  // EPP's own knobs are written where plans have always held them, "k" and "token_cap".
  EXPECT_EQ(j["setting"]["k"].get<int>(), plan.setting.epp_k);
  EXPECT_EQ(j["setting"]["token_cap"].get<int64_t>(), plan.setting.epp_token_cap);
}

TEST(Plan, PredictionsCarryCommunicationPerStage) {
  // Two stages, no SP: sends both ways, no all-to-all. Older plan files without the fields read.
  const Plan plan = small_plan();
  ASSERT_EQ(plan.stage_p2p_s.size(), 2u);
  EXPECT_GT(plan.stage_p2p_s[0], 0);
  EXPECT_GT(plan.stage_p2p_s[1], 0);
  EXPECT_EQ(plan.stage_alltoall_s, (std::vector<double>{0, 0}));
  nlohmann::json j = plan;
  j["predicted"].erase("stage_p2p_s");
  j["predicted"].erase("stage_alltoall_s");
  EXPECT_TRUE(j.get<Plan>().stage_p2p_s.empty());
}

TEST(Setting, JsonRoundTripKeepsEveryKnob) {
  Setting s;
  s.k = 24;
  s.token_cap = 1024;
  s.chunk_tokens = 4096;
  s.uniform_recompute = 3;
  s.strict_packing = true;
  s.drain_chunks = 32;
  s.drain_split = 4;
  const nlohmann::json j = s;
  EXPECT_EQ(nlohmann::json::parse(j.dump()).get<Setting>(), s);
  EXPECT_EQ(describe(Method::kSeq1F1B, s), "cap=1024 k=24 recompute=3");
  Setting epp;
  epp.epp_k = 24;
  epp.epp_token_cap = 1024;
  epp.strict_packing = true;
  epp.drain_chunks = 32;
  epp.drain_split = 4;
  EXPECT_EQ(describe(Method::kEpp, epp), "K=24 cap=1024 strict drain=32/4");
  // Plans written before these knobs existed still load, with their defaults.
  const Setting old = nlohmann::json{{"k", 3}}.get<Setting>();
  EXPECT_EQ(old.k, 3);
  EXPECT_FALSE(old.strict_packing);
  EXPECT_EQ(old.drain_chunks, 0);
  EXPECT_EQ(old.chunker, Method::kEpp);
  // EPP on a baseline's chunks: that baseline's knobs, and no uniform recompute.
  Setting borrowed;
  borrowed.chunker = Method::kSeq1F1B;
  borrowed.token_cap = 6144;
  borrowed.k = 16;
  EXPECT_EQ(nlohmann::json::parse(nlohmann::json(borrowed).dump()).get<Setting>(), borrowed);
  EXPECT_EQ(describe(Method::kEpp, borrowed), "seq1f1b chunks cap=6144 k=16");
}

TEST(Plan, SaveAndLoadFile) {
  const Plan plan = small_plan();
  const std::string path = ::testing::TempDir() + "plan_roundtrip.json";
  save_plan(plan, path);
  EXPECT_EQ(load_plan(path).hash(), plan.hash());
  std::remove(path.c_str());
  try {
    load_plan(path);
    FAIL() << "expected Error for a missing file";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(path), std::string::npos) << e.what();
  }
}

TEST(Plan, HashIsStableAndSixteenHexDigits) {
  const Plan plan = small_plan();
  const std::string h = plan.hash();
  ASSERT_EQ(h.size(), 16u);
  EXPECT_EQ(h.find_first_not_of("0123456789abcdef"), std::string::npos) << h;
  EXPECT_EQ(small_plan().hash(), h);  // planning again gives the same executable plan
  Plan copy = plan;
  EXPECT_EQ(copy.hash(), h);
  // Predictions are not part of what ranks execute.
  copy.step_time_s += 1;
  copy.plan_ms += 5;
  copy.peak_memory_bytes.push_back(1);
  copy.checkpoint_solver = "other";
  EXPECT_EQ(copy.hash(), h);
}

TEST(Plan, AnyExecutableChangeChangesTheHash) {
  const Plan plan = small_plan();
  ASSERT_FALSE(plan.recompute.empty());
  const std::vector<std::pair<std::string, std::function<void(Plan&)>>> edits = {
      {"method", [](Plan& p) { p.method = Method::kBatch; }},
      {"lengths", [](Plan& p) { p.lengths.back() += 1; }},
      {"slice end", [](Plan& p) { p.chunks.back().slices.back().end -= 1; }},
      {"chunk order", [](Plan& p) { std::swap(p.chunks.front(), p.chunks.back()); }},
      {"waves", [](Plan& p) { p.waves.push_back({}); }},
      {"schedule",
       [](Plan& p) { std::swap(p.schedule.stages[0].front(), p.schedule.stages[0].back()); }},
      {"recompute", [](Plan& p) { p.recompute[0][0] += 1; }},
      {"layers",
       [](Plan& p) {
         p.layers_per_stage[0] += 1;
         p.layers_per_stage[1] -= 1;
       }},
  };
  std::set<std::string> seen = {plan.hash()};
  for (const auto& [name, edit] : edits) {
    Plan changed = plan;
    edit(changed);
    EXPECT_TRUE(seen.insert(changed.hash()).second) << "edit of " << name << " kept a hash";
  }
}

TEST(Plan, MalformedJsonNamesTheField) {
  const nlohmann::json good = small_plan();
  for (const char* field :
       {"method", "lengths", "chunks", "waves", "schedule", "recompute", "layers_per_stage"}) {
    nlohmann::json j = good;
    j.erase(field);
    expect_error_naming(j, field);
    j = good;
    j[field] = "not this";
    expect_error_naming(j, field);
  }
  nlohmann::json j = good;
  j["lengths"][0] = 0;
  expect_error_naming(j, "lengths");
  j = good;
  j["chunks"][0][0] = {0, 1};
  expect_error_naming(j, "chunks");
  j = good;
  j["chunks"][0][0][0] = 999;
  expect_error_naming(j, "chunks");
  j = good;
  j["recompute"][0].push_back(0);
  expect_error_naming(j, "recompute");
  j = good;
  j["recompute"][0][0] = 1000;
  expect_error_naming(j, "recompute");
  j = good;
  j["waves"][0].push_back(1000);
  expect_error_naming(j, "waves");
  j = good;
  j["method"] = "gpipe";
  expect_error_naming(j, "method");
  // The hash guards the executable part against edits made after the plan was written.
  j = good;
  j["recompute"][0][0] = j["recompute"][0][0].get<int>() == 0 ? 1 : 0;
  expect_error_naming(j, "hash");
}

TEST(Plan, BadFileIsReportedWithItsName) {
  const std::string path = ::testing::TempDir() + "plan_bad.json";
  {
    std::ofstream out(path);
    out << "{\"method\": \"epp\", ";
  }
  try {
    load_plan(path);
    FAIL() << "expected Error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(path), std::string::npos) << e.what();
  }
  std::remove(path.c_str());
}

// Found by fuzz/plan_fuzzer: a number beyond double's range is nlohmann's out_of_range, which
// load_plan let through instead of naming the file.
TEST(Plan, NumberBeyondDoubleInAFileIsReportedWithItsName) {
  const std::string path = ::testing::TempDir() + "plan_overflow.json";
  nlohmann::json j = small_plan();
  j["predicted"]["step_time_s"] = 12345.5;
  std::string text = j.dump();
  text.replace(text.find("12345.5"), 7, "1e999");
  std::ofstream(path) << text;
  try {
    load_plan(path);
    ADD_FAILURE() << "expected Error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(path), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("number overflow"), std::string::npos) << e.what();
  }
  std::remove(path.c_str());
}

// nlohmann converts floats to integers by truncation, with undefined behaviour beyond the
// integer's range, and wraps integers too large for it: every integer field of a plan, at any
// depth, must hold an integer that fits.
TEST(Plan, IntegerFieldsRejectFractionsAndValuesThatDoNotFit) {
  const nlohmann::json good = small_plan();
  const std::pair<std::function<void(nlohmann::json&)>, const char*> edits[] = {
      {[](nlohmann::json& j) { j["waves"][0][0] = 1e30; }, "\"waves\"[0][0] must be an integer"},
      {[](nlohmann::json& j) { j["waves"][0][0] = 0.5; }, "\"waves\"[0][0] must be an integer"},
      {[](nlohmann::json& j) { j["lengths"][1] = 18446744073709551615ULL; },
       "\"lengths\"[1] is out of range"},
      {[](nlohmann::json& j) { j["chunks"][0][0][2] = 2.5; }, "\"chunks\"[0][0][2] must be"},
      {[](nlohmann::json& j) { j["recompute"][0][0] = 4294967296LL; },
       "\"recompute\"[0][0] is out of range"},
      {[](nlohmann::json& j) { j["layers_per_stage"][0] = -4294967296LL; },
       "\"layers_per_stage\"[0] is out of range"},
      {[](nlohmann::json& j) { j["setting"]["k"] = 1e10; }, "\"k\" must be an integer"},
  };
  for (const auto& [edit, expected] : edits) {
    nlohmann::json j = good;
    j.erase("hash");
    edit(j);
    expect_error_naming(j, expected);
  }
}

// Plan::validate sizes its tables by stages x chunks; a file naming thousands of both without
// their actions (a few hundred KB) made it allocate gigabytes before it found the schedule
// wanting. from_json refuses a stage with fewer actions than a forward and a backward per chunk.
TEST(Plan, StagesListingTooFewActionsAreRefusedBeforeValidation) {
  constexpr int kMany = 3000;
  nlohmann::json j = {{"method", "epp"},
                      {"lengths", nlohmann::json::array()},
                      {"chunks", nlohmann::json::array()},
                      {"waves", {nlohmann::json::array()}},
                      {"schedule", {{"stages", nlohmann::json::array()}}},
                      {"recompute", nlohmann::json::array()},
                      {"layers_per_stage", nlohmann::json::array()}};
  for (int i = 0; i < kMany; ++i) {
    j["lengths"].push_back(1);
    j["chunks"].push_back({{i, 0, 1}});
    j["waves"][0].push_back(i);
    j["schedule"]["stages"].push_back(nlohmann::json::array());
    j["layers_per_stage"].push_back(1);
  }
  expect_error_naming(j, "stage 0 lists 0 actions, fewer than the 6000");

  // A real plan has exactly that many compute actions per stage, and reads.
  const Plan plan = small_plan();
  for (const auto& list : plan.schedule.stages) {
    const auto compute =
        std::count_if(list.begin(), list.end(), [](const Action& a) { return a.is_compute(); });
    EXPECT_EQ(static_cast<size_t>(compute), 2 * plan.chunks.size());
  }
  EXPECT_EQ(nlohmann::json(plan).get<Plan>().hash(), plan.hash());
}

}  // namespace
}  // namespace infinipipe
