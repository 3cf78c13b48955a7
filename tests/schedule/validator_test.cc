#include "infinipipe/schedule/validator.h"

#include <gtest/gtest.h>

#include <algorithm>

#include "infinipipe/core/error.h"
#include "infinipipe/schedule/scheduler.h"
#include "schedule/test_chunks.h"

namespace infinipipe {
namespace {

using testing::Step;
using testing::StepBuilder;

int index_of(const std::vector<Action>& list, const std::string& text) {
  const auto it = std::find(list.begin(), list.end(), Action::parse(text));
  EXPECT_NE(it, list.end()) << text;
  return static_cast<int>(it - list.begin());
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

// Three stages, chains of 3, 2 and 1 chunks (ids 0-2, 3-4, 5).
struct Fixture {
  Step step;
  Schedule schedule;
};
Fixture valid_fixture() {
  StepBuilder b;
  b.add_chain(3, 1);
  b.add_chain(2);
  b.add_chain(1, 2);
  Fixture f{b.step(), {}};
  ScheduleOptions options;
  options.num_stages = 3;
  f.schedule = build_schedule(f.step.chunks, {{0, 1, 2, 3, 4, 5}}, options);
  validate_schedule(f.schedule, f.step.chunks);
  return f;
}

TEST(Validator, CatchesAMissingBackward) {
  Fixture f = valid_fixture();
  auto& stage0 = f.schedule.stages[0];
  stage0.erase(stage0.begin() + index_of(stage0, "B4"));
  expect_invalid(f.schedule, f.step.chunks, 0, index_of(stage0, "F4"), "never followed by B4");
}

TEST(Validator, CatchesAChunkMissingAltogether) {
  Fixture f = valid_fixture();
  auto& stage0 = f.schedule.stages[0];
  for (const char* gone : {"F5", "B5", "SEND_F5", "RECV_B5"})
    stage0.erase(stage0.begin() + index_of(stage0, gone));
  // Nothing to point at: the mark sits just past the end of the stage's list.
  expect_invalid(f.schedule, f.step.chunks, 0, static_cast<int>(stage0.size()), "never runs F5");
}

TEST(Validator, CatchesADuplicatedForward) {
  Fixture f = valid_fixture();
  auto& stage1 = f.schedule.stages[1];
  const int first = index_of(stage1, "F3");
  stage1.insert(stage1.begin() + first + 1, Action::parse("F3"));
  expect_invalid(f.schedule, f.step.chunks, 1, first + 1, "F3 appears twice on stage 1");
}

TEST(Validator, CatchesABackwardBeforeItsForward) {
  Fixture f = valid_fixture();
  auto& stage2 = f.schedule.stages[2];
  const int b = index_of(stage2, "B5");
  stage2.erase(stage2.begin() + b);
  stage2.insert(stage2.begin(), Action::parse("B5"));
  expect_invalid(f.schedule, f.step.chunks, 2, 0, "runs before F5");
}

TEST(Validator, CatchesBrokenSliceOrder) {
  Fixture f = valid_fixture();
  // Swap the names of chunks 0 and 1 (consecutive slices of one sequence) everywhere: all
  // sends still match, but chunk 1 now forwards before chunk 0 on every stage.
  const int old_f0 = index_of(f.schedule.stages[0], "F0");
  for (auto& list : f.schedule.stages)
    for (Action& a : list)
      if (a.chunk == 0 || a.chunk == 1) a.chunk = 1 - a.chunk;
  expect_invalid(f.schedule, f.step.chunks, 0, old_f0,
                 "F1 at stage 0 step " + std::to_string(old_f0) + " runs before F0");
}

TEST(Validator, CatchesBrokenReverseSliceOrderInBackward) {
  Fixture f = valid_fixture();
  auto& stage1 = f.schedule.stages[1];
  // Backwards of the 2-chain (3, 4) must go 4 then 3; swap just those two computes.
  const int b4 = index_of(stage1, "B4"), b3 = index_of(stage1, "B3");
  std::swap(stage1[b4], stage1[b3]);
  std::swap(stage1[b4 + 1], stage1[b3 + 1]);  // their SEND_Bs follow them
  std::swap(f.schedule.stages[0][index_of(f.schedule.stages[0], "RECV_B4")],
            f.schedule.stages[0][index_of(f.schedule.stages[0], "RECV_B3")]);
  expect_invalid(f.schedule, f.step.chunks, 1, b4,
                 "B3 at stage 1 step " + std::to_string(b4) + " runs before B4");
}

TEST(Validator, CatchesASendWithoutReceive) {
  Fixture f = valid_fixture();
  auto& stage1 = f.schedule.stages[1];
  stage1.erase(stage1.begin() + index_of(stage1, "RECV_F2"));
  expect_invalid(f.schedule, f.step.chunks, 0, index_of(f.schedule.stages[0], "SEND_F2"),
                 "SEND_F2 at stage 0 step " +
                     std::to_string(index_of(f.schedule.stages[0], "SEND_F2")) +
                     " has no matching RECV_F2 on stage 1");
}

TEST(Validator, CatchesAReceiveThatIsNeverSent) {
  Fixture f = valid_fixture();
  auto& stage1 = f.schedule.stages[1];
  stage1.erase(stage1.begin() + index_of(stage1, "SEND_B3"));
  const int recv = index_of(f.schedule.stages[0], "RECV_B3");
  expect_invalid(f.schedule, f.step.chunks, 0, recv,
                 "RECV_B3 at stage 0 step " + std::to_string(recv) + " is never sent");
}

TEST(Validator, CatchesChannelOrderMismatch) {
  Fixture f = valid_fixture();
  auto& stage2 = f.schedule.stages[2];
  const int r3 = index_of(stage2, "RECV_F3"), r4 = index_of(stage2, "RECV_F4");
  std::swap(stage2[r3], stage2[r4]);
  // The first receive out of order is RECV_F4, now where RECV_F3 was; it is the 4th receive.
  expect_invalid(f.schedule, f.step.chunks, 2, r3,
                 "4th receive from stage 1, but that stage's 4th send is SEND_F3");
}

TEST(Validator, CatchesAComputeWhoseReceiveComesAfterIt) {
  Schedule s;
  s.stages = {{Action::parse("F0"), Action::parse("SEND_F0"), Action::parse("RECV_B0"),
               Action::parse("B0")},
              {Action::parse("F0"), Action::parse("RECV_F0"), Action::parse("B0"),
               Action::parse("SEND_B0")}};
  StepBuilder b;
  b.add_chain(1);
  expect_invalid(s, b.step().chunks, 1, 0, "F0 at stage 1 step 0 has no RECV_F0 before it");
}

TEST(Validator, CatchesCommunicationPastTheEndsOfThePipeline) {
  Schedule s;
  s.stages = {{Action::parse("RECV_F0"), Action::parse("F0"), Action::parse("B0")}};
  StepBuilder b;
  b.add_chain(1);
  expect_invalid(s, b.step().chunks, 0, 0, "talks to stage -1");
}

TEST(Validator, CatchesUnknownChunks) {
  Fixture f = valid_fixture();
  f.schedule.stages[2].push_back(Action::parse("F6"));
  expect_invalid(f.schedule, f.step.chunks, 2, static_cast<int>(f.schedule.stages[2].size()) - 1,
                 "only 6 chunks");
}

TEST(Validator, CatchesACraftedDeadlock) {
  // Stage 0 forwards both chunks before its first backward, stage 1 runs F0 B0 before it posts
  // RECV_F1: stage 0 blocks in SEND_F1, stage 1 in SEND_B0, each waiting for the other's receive.
  Schedule s;
  for (const char* line : {"F0 SEND_F0 F1 SEND_F1 RECV_B0 B0 RECV_B1 B1",
                           "RECV_F0 F0 B0 SEND_B0 RECV_F1 F1 B1 SEND_B1"}) {
    std::vector<Action> list;
    std::string text = line;
    for (size_t p = 0; p < text.size();) {
      const size_t q = std::min(text.find(' ', p), text.size());
      list.push_back(Action::parse(text.substr(p, q - p)));
      p = q + 1;
    }
    s.stages.push_back(list);
  }
  StepBuilder b;
  b.add_chain(1);
  b.add_chain(1);
  expect_invalid(s, b.step().chunks, 0, 3, "deadlock");
  try {
    validate_schedule(s, b.step().chunks);
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
  EXPECT_NO_THROW(validate_schedule(s, b.step().chunks));
}

TEST(Validator, CatchesADeadlockOfComputesWaitingForData) {
  // Every send meets a posted receive, but stage 0 wants B0 before it forwards chunk 1 while
  // stage 1 wants F1 before it runs B0: two computes wait for each other's data.
  Schedule s;
  s.stages = {{Action::parse("F0"), Action::parse("SEND_F0"), Action::parse("RECV_B0"),
               Action::parse("B0"), Action::parse("F1"), Action::parse("SEND_F1"),
               Action::parse("RECV_B1"), Action::parse("B1")},
              {Action::parse("RECV_F0"), Action::parse("RECV_F1"), Action::parse("F0"),
               Action::parse("F1"), Action::parse("B0"), Action::parse("SEND_B0"),
               Action::parse("B1"), Action::parse("SEND_B1")}};
  StepBuilder b;
  b.add_chain(1);
  b.add_chain(1);
  expect_invalid(s, b.step().chunks, 0, 3, "stage 0 step 3 B0 waits for stage 1 to send SEND_B0");
}

TEST(Validator, FindsTheDeadlockOfReceivesPostedJustBeforeTheirCompute) {
  // Textbook 1F1B with each RECV moved to right before its compute (channel order unchanged):
  // in the steady state neighbours send to each other and neither has posted the receive yet.
  StepBuilder b;
  for (int c = 0; c < 6; ++c) b.add_chain(1);
  ScheduleOptions options;
  options.num_stages = 3;
  Schedule s = build_schedule(b.step().chunks, {{0, 1, 2, 3, 4, 5}}, options);
  validate_schedule(s, b.step().chunks);
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
    validate_schedule(s, b.step().chunks);
    ADD_FAILURE() << "accepted:\n" << s.text();
  } catch (const Error& e) {
    const std::string message = e.what();
    EXPECT_EQ(message.rfind("invalid schedule: deadlock", 0), 0u) << message;
    EXPECT_NE(message.find("waits for stage 1 to post RECV_F"), std::string::npos) << message;
    EXPECT_EQ(message.find(">>"), message.rfind(">>")) << message;
  }
}

TEST(Validator, AcceptsAnEmptyStepAndRejectsNoStages) {
  Schedule s;
  EXPECT_THROW(validate_schedule(s, {}), Error);
  s.stages.resize(2);
  EXPECT_NO_THROW(validate_schedule(s, {}));
}

}  // namespace
}  // namespace infinipipe
