#include "infinipipe/schedule/action.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <random>
#include <sstream>

#include "infinipipe/core/error.h"
#include "infinipipe/schedule/scheduler.h"
#include "schedule/test_chunks.h"

namespace infinipipe {
namespace {

const ActionType kAllTypes[] = {
    ActionType::kForward,      ActionType::kBackward,     ActionType::kSendForward,
    ActionType::kRecvForward,  ActionType::kSendBackward, ActionType::kRecvBackward,
    ActionType::kHead,         ActionType::kSendHead,     ActionType::kRecvHead,
    ActionType::kSendHeadGrad, ActionType::kRecvHeadGrad, ActionType::kWeight};
static_assert(sizeof(kAllTypes) / sizeof(kAllTypes[0]) == kActionTypes);

// A head transfer carries its peer stage; every other action has none.
Action make(ActionType type, int chunk) {
  Action a{type, chunk};
  if (a.is_head_transfer()) a.peer_stage = 5;
  return a;
}

TEST(Action, TextFormsAreTheDocumentedOnes) {
  EXPECT_EQ((Action{ActionType::kForward, 3}).text(), "F3");
  EXPECT_EQ((Action{ActionType::kBackward, 3}).text(), "B3");
  EXPECT_EQ((Action{ActionType::kSendForward, 3}).text(), "SEND_F3");
  EXPECT_EQ((Action{ActionType::kRecvForward, 3}).text(), "RECV_F3");
  EXPECT_EQ((Action{ActionType::kSendBackward, 3}).text(), "SEND_B3");
  EXPECT_EQ((Action{ActionType::kRecvBackward, 12}).text(), "RECV_B12");
  EXPECT_EQ((Action{ActionType::kHead, 3}).text(), "H3");
  EXPECT_EQ((Action{ActionType::kSendHead, 3, 5}).text(), "SEND_H3@5");
  EXPECT_EQ((Action{ActionType::kRecvHead, 3, 7}).text(), "RECV_H3@7");
  EXPECT_EQ((Action{ActionType::kSendHeadGrad, 3, 7}).text(), "SEND_HG3@7");
  EXPECT_EQ((Action{ActionType::kRecvHeadGrad, 30, 0}).text(), "RECV_HG30@0");
  EXPECT_EQ((Action{ActionType::kWeight, 3}).text(), "W3");
  EXPECT_TRUE((Action{ActionType::kWeight, 3}).is_compute());
}

TEST(Action, TextRoundTripsForEveryType) {
  for (ActionType type : kAllTypes) {
    for (int chunk : {0, 1, 9, 10, 4711, 999999999}) {
      const Action a = make(type, chunk);
      EXPECT_EQ(Action::parse(a.text()), a) << a.text();
    }
  }
}

TEST(Action, ParseRejectsWhatIsNotATextForm) {
  for (const char* bad :
       {"",         "F",         "B",           "SEND_F",      "X3",       "F-1",      "F+1",
        "F3x",      "f3",        "send_f3",     "SEND_3",      "SEND_X3",  " F3",      "F3 ",
        "F 3",      "RECV_F3.0", "F9999999999", "SEND_H3",     "RECV_HG3", "SEND_H3@", "SEND_H3@x",
        "SEND_H@3", "H3@5",      "F3@5",        "SEND_HG3@-1", "h3",       "W",        "w3",
        "W3@5"}) {
    EXPECT_THROW(Action::parse(bad), Error) << '"' << bad << '"';
  }
  try {
    Action::parse("SEND_X3");
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("\"SEND_X3\""), std::string::npos) << e.what();
  }
}

TEST(Action, PeerIsTheNeighbourTheMessageGoesToOrComesFrom) {
  EXPECT_EQ((Action{ActionType::kSendForward, 0}).peer(2), 3);
  EXPECT_EQ((Action{ActionType::kRecvForward, 0}).peer(2), 1);
  EXPECT_EQ((Action{ActionType::kSendBackward, 0}).peer(2), 1);
  EXPECT_EQ((Action{ActionType::kRecvBackward, 0}).peer(2), 3);
  EXPECT_THROW((Action{ActionType::kForward, 0}).peer(2), Error);
  EXPECT_THROW((Action{ActionType::kBackward, 0}).peer(2), Error);
  EXPECT_THROW((Action{ActionType::kHead, 0}).peer(2), Error);
  // Head transfers go to the stage their text names, not to a neighbour.
  EXPECT_EQ(Action::parse("SEND_H0@5").peer(7), 5);
  EXPECT_EQ(Action::parse("RECV_HG0@0").peer(7), 0);
  EXPECT_EQ(Action::parse("RECV_H0@7").peer(2), 7);
}

TEST(Action, ParseOfAHeadTransferWithoutAPeerSaysHowToWriteIt) {
  try {
    Action::parse("SEND_H3");
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("SEND_H3@5"), std::string::npos) << e.what();
  }
}

TEST(Schedule, HeadStagesNameTheStageRunningEachChunksHead) {
  const Schedule s = testing::parse_schedule({"H1 F0 F1", "F0 SEND_H1@0 F1"});
  EXPECT_EQ(s.head_stages(3), (std::vector<int>{-1, 0, -1}));
}

TEST(Action, PredicatesPartitionTheTypes) {
  for (ActionType type : kAllTypes) {
    const Action a = make(type, 0);
    EXPECT_EQ(int(a.is_compute()) + int(a.is_send()) + int(a.is_recv()), 1) << a.text();
  }
}

Schedule small_schedule() {
  return testing::parse_schedule({"F0 SEND_F0 RECV_B0 B0", "RECV_F0 F0 B0 SEND_B0"});
}

TEST(Schedule, TextIsOneLinePerStage) {
  EXPECT_EQ(small_schedule().text(),
            "stage 0: F0 SEND_F0 RECV_B0 B0\nstage 1: RECV_F0 F0 B0 SEND_B0\n");
}

TEST(Schedule, JsonRoundTripsGeneratedSchedules) {
  std::mt19937_64 rng(11);
  for (int trial = 0; trial < 50; ++trial) {
    testing::Step step = testing::random_step(rng);
    ScheduleOptions options;
    options.num_stages = 1 + trial % 5;
    options.kind = trial % 2 ? ScheduleKind::kGPipe : ScheduleKind::kOneFOneB;
    const Schedule s = build_schedule(step.chunks, step.waves, options);
    const nlohmann::json j = s;
    const Schedule back = nlohmann::json::parse(j.dump()).get<Schedule>();
    ASSERT_EQ(back.stages, s.stages) << s.text();
  }
}

TEST(Schedule, JsonHasTheDocumentedShape) {
  const nlohmann::json j = small_schedule();
  EXPECT_EQ(
      j, nlohmann::json::parse(
             R"({"stages": [["F0","SEND_F0","RECV_B0","B0"],["RECV_F0","F0","B0","SEND_B0"]]})"));
}

// Both stages on one rank: the rank posts stage 1's receive before stage 0 sends, and runs stage
// 1's backward before stage 0's (docs/design.md, "Virtual stages").
Schedule small_schedule_on_one_rank() {
  Schedule s = small_schedule();
  s.ranks = {{1, 0, 0, 0, 1, 1, 1, 0}};
  return s;
}

TEST(Schedule, VirtualStagesAddOneLinePerRankAndTheirOwnJsonField) {
  const Schedule s = small_schedule_on_one_rank();
  EXPECT_EQ(s.text(),
            "stage 0: F0 SEND_F0 RECV_B0 B0\nstage 1: RECV_F0 F0 B0 SEND_B0\n"
            "rank 0: 1:RECV_F0 0:F0 0:SEND_F0 0:RECV_B0 1:F0 1:B0 1:SEND_B0 0:B0\n");
  EXPECT_EQ(s.num_ranks(), 1);
  EXPECT_EQ(s.rank_of_stage(), (std::vector<int>{0, 0}));
  EXPECT_EQ(small_schedule().rank_of_stage(), (std::vector<int>{0, 1}));
  EXPECT_EQ(s.rank_programs()[0][4], (std::pair<int, int>{1, 1}));  // stage 1's F0
  const nlohmann::json j = s;
  EXPECT_EQ(j.at("ranks"), nlohmann::json::parse("[[1, 0, 0, 0, 1, 1, 1, 0]]"));
  const Schedule back = nlohmann::json::parse(j.dump()).get<Schedule>();
  EXPECT_EQ(back.stages, s.stages);
  EXPECT_EQ(back.ranks, s.ranks);
  EXPECT_FALSE(nlohmann::json(small_schedule()).contains("ranks"));
}

std::string json_error(const std::string& text) {
  try {
    nlohmann::json::parse(text).get<Schedule>();
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

TEST(Schedule, JsonErrorsSayWhereTheProblemIs) {
  EXPECT_NE(json_error(R"([["F0"]])").find("\"stages\""), std::string::npos);
  EXPECT_NE(json_error(R"({"steps": []})").find("\"stages\""), std::string::npos);
  EXPECT_NE(json_error(R"({"stages": {"a": 1}})").find("not an array"), std::string::npos);
  EXPECT_NE(json_error(R"({"stages": [["F0"], "F1"]})").find("stages[1] is"), std::string::npos);
  const std::string bad_type = json_error(R"({"stages": [["F0", 3]]})");
  EXPECT_NE(bad_type.find("stages[0][1]"), std::string::npos) << bad_type;
  const std::string bad_text = json_error(R"({"stages": [["F0"], ["RECV_F0", "F0", "SEND_Q0"]]})");
  EXPECT_NE(bad_text.find("stages[1][2]"), std::string::npos) << bad_text;
  EXPECT_NE(bad_text.find("SEND_Q0"), std::string::npos) << bad_text;
  const std::string bad_rank = json_error(R"({"stages": [["F0"]], "ranks": [[0, 1]]})");
  EXPECT_NE(bad_rank.find("ranks[0][1] is 1, not one of the 1 stages"), std::string::npos)
      << bad_rank;
  EXPECT_NE(json_error(R"({"stages": [["F0"]], "ranks": [0]})").find("ranks[0] is number"),
            std::string::npos);
  EXPECT_NE(json_error(R"({"stages": [["F0"]], "ranks": []})").find("not a non-empty array"),
            std::string::npos);
}

size_t occurrences(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (size_t p = text.find(what); p != std::string::npos; p = text.find(what, p + 1)) ++n;
  return n;
}

std::vector<std::string> lines(const std::string& text) {
  std::vector<std::string> out;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) out.push_back(line);
  return out;
}

TEST(Schedule, GridMarksExactlyTheRequestedCell) {
  std::mt19937_64 rng(5);
  const testing::Step step = testing::random_step(rng);
  const Schedule s = testing::schedule_on(3, step.chunks, step.waves);
  EXPECT_EQ(occurrences(s.grid(), ">>"), 0u);
  for (int stage = 0; stage < 3; ++stage) {
    for (int index : {0, static_cast<int>(s.stages[stage].size()) / 2,
                      static_cast<int>(s.stages[stage].size()) - 1}) {
      const std::string grid = s.grid(stage, index);
      ASSERT_EQ(occurrences(grid, ">>"), 1u) << grid;
      const std::vector<std::string> rows = lines(grid);
      const std::vector<std::string> plain = lines(s.grid());
      // Header, then one row per step shown (long grids show a window around the mark, with
      // "..." lines): find the marked step's row by its number.
      auto step_of = [](const std::string& row) {
        return row.find('|') == std::string::npos || row.find("...") != std::string::npos
                   ? -1
                   : std::stoi(row.substr(0, row.find('|')));
      };
      size_t marked_row = 0;
      for (size_t r = 1; r < rows.size(); ++r)
        if (step_of(rows[r]) == index) marked_row = r;
      ASSERT_GT(marked_row, 0u) << grid;
      const std::string& row = rows[marked_row];
      const size_t mark = row.find(">>");
      ASSERT_NE(mark, std::string::npos) << grid;
      EXPECT_EQ(rows[0].find("stage " + std::to_string(stage)), mark + 2) << grid;
      const size_t text_end = row.find_first_of(" |", mark + 2);
      EXPECT_EQ(row.substr(mark + 2,
                           text_end == std::string::npos ? std::string::npos : text_end - mark - 2),
                s.stages[stage][index].text())
          << grid;
      // Every other shown row is as in the unmarked grid (plain row 1 + step is that step).
      EXPECT_EQ(rows[0], plain[0]);
      for (size_t r = 1; r < rows.size(); ++r) {
        const int step_number = step_of(rows[r]);
        if (step_number < 0 || r == marked_row) continue;
        EXPECT_EQ(rows[r], plain.at(step_number + 1));
      }
    }
  }
}

TEST(Schedule, GridMarksAMissingStepPastTheEnd) {
  const Schedule s = small_schedule();
  const std::string grid = s.grid(1, 4);
  EXPECT_EQ(occurrences(grid, ">>"), 1u);
  EXPECT_NE(lines(grid).at(5).find(">>(end)"), std::string::npos) << grid;
}

}  // namespace
}  // namespace infinipipe

namespace infinipipe {
namespace {

TEST(ScheduleGrid, LargeMarkedGridShowsOnlyTheNeighbourhoodOfTheMark) {
  Schedule s;
  s.stages.resize(2);
  for (int c = 0; c < 100; ++c) {
    s.stages[0].push_back(Action{ActionType::kForward, c});
    s.stages[1].push_back(Action{ActionType::kForward, c});
  }
  const std::string g = s.grid(1, 50);
  EXPECT_NE(g.find(">>F50"), std::string::npos) << g;
  EXPECT_NE(g.find("38 earlier steps"), std::string::npos) << g;
  EXPECT_NE(g.find("37 later steps"), std::string::npos) << g;
  EXPECT_EQ(g.find("F10 "), std::string::npos) << g;
  // Unmarked grids stay whole.
  EXPECT_NE(s.grid().find("F10"), std::string::npos);
}

}  // namespace
}  // namespace infinipipe
