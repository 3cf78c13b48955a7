#include "dry_run.h"

#include <gtest/gtest.h>

#include "schedule/test_chunks.h"

namespace infinipipe {
namespace {

using testing::parse_schedule;

TEST(DryRun, ASendWaitsForThePostedReceiveAndAComputeForItsData) {
  const Schedule s = parse_schedule({"F0 SEND_F0 RECV_B0 B0", "RECV_F0 F0 B0 SEND_B0"});
  DryRun run(s, 1);
  EXPECT_TRUE(run.ready(0, 0));   // F0 on stage 0 needs nothing
  EXPECT_FALSE(run.ready(0, 1));  // SEND_F0: stage 1 has not posted
  EXPECT_EQ(run.waits_for(0, 1), "stage 1 to post RECV_F0");
  EXPECT_FALSE(run.ready(1, 1));  // F0 on stage 1: nothing sent yet
  EXPECT_EQ(run.waits_for(1, 1), "stage 0 to send SEND_F0");
  EXPECT_EQ(run.waits_for(0, 0), "nothing");
  run.run(1, 0);  // RECV_F0 posted
  EXPECT_TRUE(run.ready(0, 1));
  EXPECT_FALSE(run.ready(1, 1));
  run.run(0, 0);
  run.run(0, 1);  // SEND_F0 made
  EXPECT_TRUE(run.ready(1, 1));
  EXPECT_FALSE(run.ready(0, 3));  // B0 waits for stage 1's SEND_B0
  run.run(0, 2);
  run.run(1, 1);
  run.run(1, 2);
  EXPECT_TRUE(run.ready(1, 3));  // stage 0 posted RECV_B0
  run.run(1, 3);
  EXPECT_TRUE(run.ready(0, 3));
}

TEST(DryRun, ChannelsNumberEachDirectionOfEachLinkOnce) {
  const int d = 4;
  const std::vector<Channel> channels = all_channels(d);
  EXPECT_EQ(channels.size(), static_cast<size_t>(2 * (d - 1) + 2 * (d - 1)));
  // Both ends of every channel name it by the same index.
  for (size_t i = 0; i < channels.size(); ++i) {
    const Channel& ch = channels[i];
    EXPECT_EQ(channel_of(d, ch.sender, send_of(ch, 7)), static_cast<int>(i));
    EXPECT_EQ(channel_of(d, ch.receiver, recv_of(ch, 7)), static_cast<int>(i));
  }
  EXPECT_EQ(channel_of(d, 1, Action{ActionType::kForward, 0}), -1);
}

TEST(DryRun, InputOfNamesTheReceiveEachComputeWaitsFor) {
  const std::vector<int> head = {-1, 1};  // chunk 1's head on stage 1 of 3
  EXPECT_EQ(input_of(3, 0, {ActionType::kForward, 0}, head).text(), "F0");
  EXPECT_EQ(input_of(3, 1, {ActionType::kForward, 0}, head).text(), "RECV_F0");
  EXPECT_EQ(input_of(3, 1, {ActionType::kBackward, 0}, head).text(), "RECV_B0");
  EXPECT_EQ(input_of(3, 2, {ActionType::kBackward, 0}, head).text(), "B0");
  EXPECT_EQ(input_of(3, 2, {ActionType::kBackward, 1}, head).text(), "RECV_HG1@1");
  EXPECT_EQ(input_of(3, 1, {ActionType::kHead, 1}, head).text(), "RECV_H1@2");
  EXPECT_EQ(input_of(3, 1, {ActionType::kWeight, 1}, head).text(), "W1");
}

}  // namespace
}  // namespace infinipipe
