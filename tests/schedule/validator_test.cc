#include "infinipipe/schedule/validator.h"

#include <gtest/gtest.h>

#include <algorithm>

#include "infinipipe/core/error.h"
#include "infinipipe/schedule/scheduler.h"
#include "schedule/test_chunks.h"

namespace infinipipe {
namespace {

using testing::packed_step;
using testing::parse_schedule;
using testing::schedule_on;
using testing::Step;
using testing::StepBuilder;

int index_of(const std::vector<Action>& list, const std::string& text) {
  const auto it = std::find(list.begin(), list.end(), Action::parse(text));
  EXPECT_NE(it, list.end()) << text;
  return static_cast<int>(it - list.begin());
}

void erase_action(std::vector<Action>& list, const std::string& text) {
  list.erase(list.begin() + index_of(list, text));
}

void swap_actions(std::vector<Action>& list, const std::string& a, const std::string& b) {
  std::swap(list[index_of(list, a)], list[index_of(list, b)]);
}

// Asserts that validation fails with a reason containing `reason_part`, followed by the grid
// marked at (stage, index), and that the grid carries exactly one mark.
void expect_invalid(const Schedule& s, const std::vector<Chunk>& chunks, int stage, int index,
                    const std::string& reason_part) {
  try {
    validate_schedule(s, chunks);
    ADD_FAILURE() << "accepted:\n" << s.text();
  } catch (const Error& e) {
    const std::string message = e.what();
    const std::string first_line = message.substr(0, message.find('\n'));
    EXPECT_NE(first_line.find(reason_part), std::string::npos) << message;
    EXPECT_EQ(message.substr(message.find('\n') + 1), s.grid(stage, index)) << message;
    EXPECT_EQ(message.find(">>"), message.rfind(">>")) << message;
  }
}

// A valid schedule that a test breaks one way: three stages, chains of 3, 2 and 1 chunks (ids
// 0-2, 3-4, 5) in one wave.
class Validator : public ::testing::Test {
 protected:
  void SetUp() override {
    StepBuilder b;
    b.add_chain(3, 1);
    b.add_chain(2);
    b.add_chain(1, 2);
    step = b.step();
    schedule = schedule_on(3, step.chunks, {{0, 1, 2, 3, 4, 5}});
    ASSERT_NO_THROW(validate_schedule(schedule, step.chunks));
  }

  std::vector<Action>& stage(int p) { return schedule.stages[p]; }

  // expect_invalid of the broken schedule, marked at (stage p, index).
  void expect_invalid_at(int p, int index, const std::string& reason_part) {
    expect_invalid(schedule, step.chunks, p, index, reason_part);
  }

  // The same for a reason about `action` on stage p: "<action> at stage <p> step <its index>
  // <what>", marked there.
  void expect_invalid_action(int p, const std::string& action, const std::string& what) {
    const int index = index_of(stage(p), action);
    expect_invalid_at(
        p, index,
        action + " at stage " + std::to_string(p) + " step " + std::to_string(index) + " " + what);
  }

  Step step;
  Schedule schedule;
};

TEST_F(Validator, CatchesAMissingBackward) {
  erase_action(stage(0), "B4");
  expect_invalid_at(0, index_of(stage(0), "F4"), "never followed by B4");
}

TEST_F(Validator, CatchesAChunkMissingAltogether) {
  for (const char* gone : {"F5", "B5", "SEND_F5", "RECV_B5"}) erase_action(stage(0), gone);
  // Nothing to point at: the mark sits just past the end of the stage's list.
  expect_invalid_at(0, static_cast<int>(stage(0).size()), "never runs F5");
}

TEST_F(Validator, CatchesADuplicatedForward) {
  const int first = index_of(stage(1), "F3");
  stage(1).insert(stage(1).begin() + first + 1, Action::parse("F3"));
  expect_invalid_at(1, first + 1, "F3 appears twice on stage 1");
}

TEST_F(Validator, CatchesABackwardBeforeItsForward) {
  erase_action(stage(2), "B5");
  stage(2).insert(stage(2).begin(), Action::parse("B5"));
  expect_invalid_at(2, 0, "runs before F5");
}

TEST_F(Validator, CatchesAWeightActionBeforeItsBackwardOrTwice) {
  schedule = with_weight_actions(schedule, ZeroBubble::kH1);
  ASSERT_NO_THROW(validate_schedule(schedule, step.chunks));
  erase_action(stage(1), "W2");
  stage(1).insert(stage(1).begin(), Action::parse("W2"));
  expect_invalid_at(1, 0, "runs before B2: a chunk's weight gradients need");
  erase_action(stage(1), "W2");
  const int w = index_of(stage(1), "W3");
  stage(1).insert(stage(1).begin() + w + 1, Action::parse("W3"));
  expect_invalid_at(1, w + 1, "W3 appears twice on stage 1");
}

TEST_F(Validator, CatchesBrokenSliceOrder) {
  // Swap the names of chunks 0 and 1 (consecutive slices of one sequence) everywhere: all
  // sends still match, but chunk 1 now forwards before chunk 0 on every stage.
  for (auto& list : schedule.stages)
    for (Action& a : list)
      if (a.chunk == 0 || a.chunk == 1) a.chunk = 1 - a.chunk;
  expect_invalid_action(0, "F1", "runs before F0");
}

TEST_F(Validator, CatchesBrokenReverseSliceOrderInBackward) {
  // Backwards of the 2-chain (3, 4) must go 4 then 3; swap just those two computes, the
  // SEND_Bs that follow them and the receives of those.
  swap_actions(stage(1), "B4", "B3");
  swap_actions(stage(1), "SEND_B4", "SEND_B3");
  swap_actions(stage(0), "RECV_B4", "RECV_B3");
  expect_invalid_action(1, "B3", "runs before B4");
}

TEST_F(Validator, CatchesASendWithoutReceive) {
  erase_action(stage(1), "RECV_F2");
  expect_invalid_action(0, "SEND_F2", "has no matching RECV_F2 on stage 1");
}

TEST_F(Validator, CatchesAReceiveThatIsNeverSent) {
  erase_action(stage(1), "SEND_B3");
  expect_invalid_action(0, "RECV_B3", "is never sent");
}

TEST_F(Validator, CatchesChannelOrderMismatch) {
  const int r3 = index_of(stage(2), "RECV_F3");
  swap_actions(stage(2), "RECV_F3", "RECV_F4");
  // The first receive out of order is RECV_F4, now where RECV_F3 was; it is the 4th receive.
  expect_invalid_at(2, r3, "4th receive from stage 1, but that stage's 4th send is SEND_F3");
}

TEST_F(Validator, CatchesAComputeWhoseReceiveComesAfterIt) {
  const Schedule s = parse_schedule({"F0 SEND_F0 RECV_B0 B0", "F0 RECV_F0 B0 SEND_B0"});
  expect_invalid(s, packed_step(1).chunks, 1, 0, "F0 at stage 1 step 0 has no RECV_F0 before it");
}

TEST_F(Validator, CatchesCommunicationPastTheEndsOfThePipeline) {
  const Schedule s = parse_schedule({"RECV_F0 F0 B0"});
  expect_invalid(s, packed_step(1).chunks, 0, 0, "talks to stage -1");
}

TEST_F(Validator, CatchesUnknownChunks) {
  stage(2).push_back(Action::parse("F6"));
  expect_invalid_at(2, static_cast<int>(stage(2).size()) - 1, "only 6 chunks");
}

TEST_F(Validator, CatchesACraftedDeadlock) {
  // Stage 0 forwards both chunks before its first backward, stage 1 runs F0 B0 before it posts
  // RECV_F1: stage 0 blocks in SEND_F1, stage 1 in SEND_B0, each waiting for the other's receive.
  Schedule s = parse_schedule({"F0 SEND_F0 F1 SEND_F1 RECV_B0 B0 RECV_B1 B1",
                               "RECV_F0 F0 B0 SEND_B0 RECV_F1 F1 B1 SEND_B1"});
  const Step two = packed_step(2);
  expect_invalid(s, two.chunks, 0, 3, "deadlock");
  try {
    validate_schedule(s, two.chunks);
  } catch (const Error& e) {
    const std::string message = e.what();
    EXPECT_NE(message.find("stage 0 step 3 SEND_F1 waits for stage 1 to post RECV_F1"),
              std::string::npos)
        << message;
    EXPECT_NE(message.find("stage 1 step 3 SEND_B0 waits for stage 0 to post RECV_B0"),
              std::string::npos)
        << message;
  }
  // Posting the receives early removes the deadlock.
  std::swap(s.stages[0][4], s.stages[0][2]);  // RECV_B0 before F1
  std::swap(s.stages[0][3], s.stages[0][4]);  // ... and SEND_F1 stays after F1
  ASSERT_EQ(Schedule{{s.stages[0]}}.text(),
            "stage 0: F0 SEND_F0 RECV_B0 F1 SEND_F1 B0 RECV_B1 B1\n");
  EXPECT_NO_THROW(validate_schedule(s, two.chunks));
}

TEST_F(Validator, CatchesADeadlockOfComputesWaitingForData) {
  // Every send meets a posted receive, but stage 0 wants B0 before it forwards chunk 1 while
  // stage 1 wants F1 before it runs B0: two computes wait for each other's data.
  const Schedule s = parse_schedule({"F0 SEND_F0 RECV_B0 B0 F1 SEND_F1 RECV_B1 B1",
                                     "RECV_F0 RECV_F1 F0 F1 B0 SEND_B0 B1 SEND_B1"});
  expect_invalid(s, packed_step(2).chunks, 0, 3,
                 "stage 0 step 3 B0 waits for stage 1 to send SEND_B0");
}

TEST_F(Validator, FindsTheDeadlockOfReceivesPostedJustBeforeTheirCompute) {
  // Textbook 1F1B with each RECV moved to right before its compute (channel order unchanged):
  // in the steady state neighbours send to each other and neither has posted the receive yet.
  const Step six = packed_step(6);
  Schedule s = schedule_on(3, six.chunks, {{0, 1, 2, 3, 4, 5}});
  validate_schedule(s, six.chunks);
  for (auto& list : s.stages) {
    std::vector<Action> just_in_time;
    for (const Action& a : list) {
      if (a.is_recv()) continue;
      if (a.type == ActionType::kForward && &list != &s.stages.front())
        just_in_time.push_back({ActionType::kRecvForward, a.chunk});
      if (a.type == ActionType::kBackward && &list != &s.stages.back())
        just_in_time.push_back({ActionType::kRecvBackward, a.chunk});
      just_in_time.push_back(a);
    }
    list = just_in_time;
  }
  try {
    validate_schedule(s, six.chunks);
    ADD_FAILURE() << "accepted:\n" << s.text();
  } catch (const Error& e) {
    const std::string message = e.what();
    EXPECT_EQ(message.rfind("invalid schedule: deadlock", 0), 0u) << message;
    EXPECT_NE(message.find("waits for stage 1 to post RECV_F"), std::string::npos) << message;
    EXPECT_EQ(message.find(">>"), message.rfind(">>")) << message;
  }
}

// Spread head schedules written by hand (docs/design.md, "Spread head"), packed chunks.
// Two stages: chunk 0's head on stage 0, chunk 1's on the last stage itself.
const std::vector<std::string> kSpreadTwo = {
    "RECV_H0@1 F0 SEND_F0 RECV_B0 F1 SEND_F1 H0 SEND_HG0@1 RECV_B1 B0 B1",
    "RECV_F0 RECV_F1 F0 RECV_HG0@0 SEND_H0@0 F1 H1 B0 SEND_B0 B1 SEND_B1"};
// Three stages: chunk c's head on stage c.
const std::vector<std::string> kSpreadThree = {
    "RECV_H0@2 F0 SEND_F0 RECV_B0 F1 SEND_F1 RECV_B1 F2 SEND_F2 H0 SEND_HG0@2 RECV_B2 B0 B1 B2",
    "RECV_F0 RECV_H1@2 F0 SEND_F0 RECV_F1 F1 SEND_F1 RECV_F2 F2 SEND_F2 RECV_B0 H1 SEND_HG1@2 "
    "RECV_B1 B0 SEND_B0 RECV_B2 B1 SEND_B1 B2 SEND_B2",
    "RECV_F0 RECV_F1 RECV_F2 RECV_HG0@0 RECV_HG1@1 F0 SEND_H0@0 F1 SEND_H1@1 F2 H2 B0 SEND_B0 B1 "
    "SEND_B1 B2 SEND_B2"};

class SpreadHead : public ::testing::Test {
 protected:
  void SetUp() override {
    two = parse_schedule(kSpreadTwo);
    three = parse_schedule(kSpreadThree);
    ASSERT_NO_THROW(validate_schedule(two, packed_step(2).chunks));
    ASSERT_NO_THROW(validate_schedule(three, packed_step(3).chunks));
  }
  // Validation of `three` fails with "<action> at stage <p> step <its index> <what>", marked at
  // that action.
  void expect_invalid_action(int p, const std::string& action, const std::string& what) {
    const int index = index_of(three.stages[p], action);
    expect_invalid(
        three, packed_step(3).chunks, p, index,
        action + " at stage " + std::to_string(p) + " step " + std::to_string(index) + " " + what);
  }
  void move_to(int p, const std::string& action, int index) {
    erase_action(three.stages[p], action);
    three.stages[p].insert(three.stages[p].begin() + index, Action::parse(action));
  }
  Schedule two, three;
};

TEST_F(SpreadHead, HandWrittenSchedulesPass) {
  EXPECT_EQ(two.head_stages(2), (std::vector<int>{0, 1}));
  EXPECT_EQ(three.head_stages(3), (std::vector<int>{0, 1, 2}));
}

TEST_F(SpreadHead, CatchesAHeadRunTwice) {
  three.stages[1].push_back(Action::parse("H0"));
  expect_invalid_action(1, "H0", "runs again: stage 0 already runs it");
}

TEST_F(SpreadHead, CatchesATransferForAChunkWithoutHead) {
  erase_action(two.stages[1], "H1");
  two.stages[0].insert(two.stages[0].begin(), Action::parse("RECV_H1@1"));
  expect_invalid(two, packed_step(2).chunks, 0, 0,
                 "RECV_H1@1 at stage 0 step 0 moves chunk 1's head data, but no stage runs H1");
}

TEST_F(SpreadHead, CatchesATransferForAHeadOnTheLastStage) {
  two.stages[1].push_back(Action::parse("SEND_H1@0"));
  const int i = static_cast<int>(two.stages[1].size()) - 1;
  expect_invalid(two, packed_step(2).chunks, 1, i,
                 "SEND_H1@0 at stage 1 step " + std::to_string(i) +
                     " moves head data, but H1 runs on the last stage (stage 1) itself");
}

TEST_F(SpreadHead, CatchesATransferOnTheWrongStage) {
  erase_action(three.stages[2], "SEND_H0@0");
  three.stages[1].push_back(Action::parse("SEND_H0@0"));
  expect_invalid_action(1, "SEND_H0@0", "belongs on stage 2: the last stage sends");
  three = parse_schedule(kSpreadThree);
  erase_action(three.stages[1], "RECV_H1@2");
  three.stages[0].insert(three.stages[0].begin(), Action::parse("RECV_H1@2"));
  expect_invalid_action(0, "RECV_H1@2", "belongs on stage 1: the stage running H1");
}

TEST_F(SpreadHead, CatchesInconsistentPeers) {
  three.stages[2][index_of(three.stages[2], "SEND_H0@0")] = Action::parse("SEND_H0@1");
  expect_invalid_action(2, "SEND_H0@1", "names stage 1, but its peer is stage 0 (H0 runs there)");
  three = parse_schedule(kSpreadThree);
  three.stages[1][index_of(three.stages[1], "SEND_HG1@2")] = Action::parse("SEND_HG1@0");
  expect_invalid_action(1, "SEND_HG1@0", "names stage 0, but its peer is stage 2 (the last stage");
}

TEST_F(SpreadHead, CatchesAMissingHiddenStateSend) {
  erase_action(three.stages[2], "SEND_H0@0");
  erase_action(three.stages[0], "RECV_H0@2");
  expect_invalid_action(2, "F0", "is never followed by SEND_H0@0: H0 runs on stage 0");
}

TEST_F(SpreadHead, CatchesASendBeforeItsCompute) {
  move_to(2, "SEND_H0@0", 0);
  expect_invalid_action(2, "SEND_H0@0", "sends a hidden state before F0 computed it");
  three = parse_schedule(kSpreadThree);
  move_to(1, "SEND_HG1@2", 0);
  expect_invalid_action(1, "SEND_HG1@2", "sends a gradient before H1 computed it");
}

TEST_F(SpreadHead, CatchesAMissingOrLateReceive) {
  move_to(2, "RECV_HG1@1", static_cast<int>(three.stages[2].size()) - 1);
  expect_invalid_action(2, "B1", "has no RECV_HG1@1 before it: its output gradient from stage 1");
  three = parse_schedule(kSpreadThree);
  move_to(0, "RECV_H0@2", static_cast<int>(three.stages[0].size()) - 1);
  expect_invalid_action(0, "H0", "has no RECV_H0@2 before it: its hidden state from stage 2");
}

TEST_F(SpreadHead, CatchesAMissingGradientSend) {
  erase_action(three.stages[1], "SEND_HG1@2");
  expect_invalid_action(1, "H1", "is never followed by SEND_HG1@2");
}

TEST_F(SpreadHead, CatchesAHeadOnTheLastStageOutOfOrder) {
  move_to(2, "H2", index_of(three.stages[2], "F2"));
  expect_invalid_action(2, "H2", "runs before F2");
  three = parse_schedule(kSpreadThree);
  move_to(2, "H2", index_of(three.stages[2], "B2") + 1);
  expect_invalid_action(2, "B2", "runs before H2");
}

TEST_F(SpreadHead, CatchesHeadChannelOrderMismatch) {
  // Both heads on stage 0: the last stage sends chunk 0's hidden state first.
  const Schedule good =
      parse_schedule({"RECV_H0@1 RECV_H1@1 F0 SEND_F0 F1 SEND_F1 H0 SEND_HG0@1 H1 SEND_HG1@1 "
                      "RECV_B0 RECV_B1 B0 B1",
                      "RECV_F0 RECV_F1 RECV_HG0@0 RECV_HG1@0 F0 SEND_H0@0 F1 SEND_H1@0 B0 SEND_B0 "
                      "B1 SEND_B1"});
  ASSERT_NO_THROW(validate_schedule(good, packed_step(2).chunks));
  Schedule s = good;
  swap_actions(s.stages[0], "RECV_H0@1", "RECV_H1@1");
  expect_invalid(s, packed_step(2).chunks, 0, 0,
                 "RECV_H1@1 at stage 0 step 0 is stage 0's 1st head receive from stage 1, but "
                 "that stage's 1st head send is SEND_H0@0");
}

TEST_F(SpreadHead, FindsADeadlockOfHeadMessages) {
  // Stage 0 blocks in SEND_F1 until stage 1 posts RECV_F1, which stage 1 does only after its
  // SEND_H0@0, which blocks until stage 0 posts RECV_H0@1, after its SEND_F1.
  const Schedule s =
      parse_schedule({"F0 SEND_F0 F1 SEND_F1 RECV_H0@1 H0 SEND_HG0@1 RECV_B0 RECV_B1 B0 B1",
                      "RECV_F0 RECV_HG0@0 F0 SEND_H0@0 RECV_F1 F1 H1 B0 SEND_B0 B1 SEND_B1"});
  expect_invalid(s, packed_step(2).chunks, 0, 3,
                 "deadlock, no stage can move: stage 0 step 3 SEND_F1 waits for stage 1 to post "
                 "RECV_F1; stage 1 step 3 SEND_H0@0 waits for stage 0 to post RECV_H0@1");
  // The last stage's backward waiting for a head gradient that comes after it.
  const Schedule t =
      parse_schedule({"RECV_H0@1 F0 SEND_F0 F1 SEND_F1 RECV_B0 RECV_B1 B0 H0 SEND_HG0@1 B1",
                      "RECV_F0 RECV_F1 RECV_HG0@0 F0 SEND_H0@0 F1 H1 B0 SEND_B0 B1 SEND_B1"});
  expect_invalid(t, packed_step(2).chunks, 0, 7,
                 "stage 0 step 7 B0 waits for stage 1 to send SEND_B0; stage 1 step 7 B0 waits "
                 "for stage 0 to send SEND_HG0@1");
}

// Virtual stages (docs/design.md, "Virtual stages"): two stages on one rank, as a V's turn.
class VirtualStages : public ::testing::Test {
 protected:
  Schedule schedule = parse_schedule({"F0 SEND_F0 RECV_B0 B0", "RECV_F0 F0 B0 SEND_B0"});
  std::vector<Chunk> chunks = packed_step(1).chunks;
};

TEST_F(VirtualStages, AnOrderThatPostsBeforeItSendsPasses) {
  schedule.ranks = {{1, 0, 0, 0, 1, 1, 1, 0}};
  EXPECT_NO_THROW(validate_schedule(schedule, chunks));
  schedule.ranks = {{0, 0, 0, 0}, {1, 1, 1, 1}};  // a rank per stage, written out
  EXPECT_NO_THROW(validate_schedule(schedule, chunks));
}

TEST_F(VirtualStages, ARankWaitingOnItselfIsADeadlock) {
  // Stage 0 sends before the same rank posts stage 1's receive: the rank blocks in the send.
  schedule.ranks = {{0, 0, 1, 1, 1, 1, 0, 0}};
  expect_invalid(schedule, chunks, 0, 1,
                 "deadlock, no rank can move: rank 0 step 1, stage 0 step 1 SEND_F0 waits for "
                 "stage 1 to post RECV_F0");
  // Both stages would pass on ranks of their own.
  schedule.ranks.clear();
  EXPECT_NO_THROW(validate_schedule(schedule, chunks));
}

TEST_F(VirtualStages, EachStageRunsWholeOnOneRank) {
  schedule.ranks = {{1, 0, 0, 0, 1, 1, 0}, {1, 0}};
  EXPECT_THROW(
      {
        try {
          validate_schedule(schedule, chunks);
        } catch (const Error& e) {
          EXPECT_NE(std::string(e.what()).find("stage 1 runs on rank 0 and on rank 1"),
                    std::string::npos)
              << e.what();
          throw;
        }
      },
      Error);
  schedule.ranks = {{1, 0, 0, 0, 1, 1, 0}};  // stage 1's SEND_B0 never taken
  expect_invalid(schedule, chunks, 1, 3, "stage 1 has 4 actions but rank 0 takes 3 steps of it");
  schedule.ranks = {{0, 0, 0, 0}};  // stage 1 on no rank
  expect_invalid(schedule, chunks, 1, 0, "stage 1 has 4 actions but no rank runs it");
}

TEST_F(Validator, AcceptsAnEmptyStepAndRejectsNoStages) {
  Schedule s;
  EXPECT_THROW(validate_schedule(s, {}), Error);
  s.stages.resize(2);
  EXPECT_NO_THROW(validate_schedule(s, {}));
}

}  // namespace
}  // namespace infinipipe
