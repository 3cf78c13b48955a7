#include "infinipipe/schedule/placement.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <functional>
#include <random>

#include "infinipipe/core/error.h"
#include "infinipipe/schedule/validator.h"
#include "schedule/test_chunks.h"
#include "support/error_of.h"

namespace infinipipe {
namespace {

using test_support::error_of;

TEST(VShape, GoesDownTheRanksAndBackUp) {
  EXPECT_EQ(v_shape(1), (std::vector<int>{0, 0}));
  EXPECT_EQ(v_shape(4), (std::vector<int>{0, 1, 2, 3, 3, 2, 1, 0}));
  EXPECT_THROW(v_shape(0), Error);
}

TEST(PlaceOnRanks, TheTurnOfAVOnOneRankPostsBeforeItSends) {
  // Two stages on one rank, one chunk: the merged order must post stage 1's receive before stage
  // 0 sends, and runs stage 1's backward (the loss's side) as soon as it can.
  const Schedule s = testing::schedule_on(2, testing::packed_step(1).chunks, {{0}});
  ASSERT_EQ(s.text(), "stage 0: RECV_B0 F0 SEND_F0 B0\nstage 1: RECV_F0 F0 B0 SEND_B0\n");
  const Schedule placed = place_on_ranks(s, {0, 0}, 1);
  EXPECT_EQ(placed.stages, s.stages);
  EXPECT_EQ(placed.ranks, (std::vector<std::vector<int>>{{0, 1, 0, 0, 1, 1, 1, 0}}));
  EXPECT_EQ(placed.text().substr(placed.text().find("rank 0:")),
            "rank 0: 0:RECV_B0 1:RECV_F0 0:F0 0:SEND_F0 1:F0 1:B0 1:SEND_B0 0:B0\n");
  EXPECT_NO_THROW(validate_schedule(placed, testing::packed_step(1).chunks));
}

TEST(PlaceOnRanks, RandomVShapedStepsAreValid) {
  std::mt19937_64 rng(7);
  int placed_count = 0;
  for (int trial = 0; trial < 150; ++trial) {
    const testing::Step step = testing::random_step(rng);
    for (int ranks : {1, 2, 3, 4}) {
      for (ZeroBubble mode : {ZeroBubble::kOff, ZeroBubble::kH1, ZeroBubble::kH2}) {
        ScheduleOptions options;
        options.num_stages = 2 * ranks;
        options.zero_bubble = mode;
        options.overlap_waves = trial % 2 == 1;
        const Schedule s = build_schedule(step.chunks, step.waves, options);
        const std::vector<int> rank_of = v_shape(ranks);
        const Schedule placed = place_on_ranks(s, rank_of, static_cast<int>(step.chunks.size()));
        ASSERT_NO_THROW(validate_schedule(placed, step.chunks))
            << "trial " << trial << " ranks " << ranks << " " << to_string(mode);
        EXPECT_EQ(placed.stages, s.stages);
        EXPECT_EQ(placed.rank_of_stage(), rank_of);
        ++placed_count;
      }
    }
    if (::testing::Test::HasFailure()) return;
  }
  EXPECT_EQ(placed_count, 150 * 4 * 3);
}

// The position of stage `s`'s compute `text` in rank 0's merged order.
int merged_position(const Schedule& placed, int s, const std::string& text) {
  const auto program = placed.rank_programs()[0];
  for (size_t k = 0; k < program.size(); ++k)
    if (program[k].first == s && placed.stages[s][program[k].second].text() == text)
      return static_cast<int>(k);
  return -1;
}

TEST(PlaceOnRanks, WithStartTimesTheReadyComputeThatStartedFirstGoesFirst) {
  const testing::Step step = testing::packed_step(2);
  const Schedule s = testing::schedule_on(2, step.chunks, {{0, 1}});
  // Stage 0 runs F0 F1 before its backwards; stage 1's F0 is ready once stage 0 sent chunk 0.
  std::vector<std::vector<double>> times(2);
  for (int p = 0; p < 2; ++p)
    for (size_t i = 0; i < s.stages[p].size(); ++i) times[p].push_back(static_cast<double>(i));
  times[0][s.stages[0].size() - 1] = 100;  // its last action late: nothing changes before it
  std::vector<std::vector<double>> stage_one_first = times;
  for (double& t : stage_one_first[0]) t += 0.5;  // stage 0 just after stage 1 at each index
  const Schedule a = place_on_ranks(s, {0, 0}, 2, times);
  const Schedule b = place_on_ranks(s, {0, 0}, 2, stage_one_first);
  EXPECT_NO_THROW(validate_schedule(a, step.chunks));
  EXPECT_NO_THROW(validate_schedule(b, step.chunks));
  EXPECT_NE(a.ranks, b.ranks);
  // Stage 1's F0 (index 1 there) against stage 0's F1: which the times put first.
  const int f1_index = static_cast<int>(
      std::find(s.stages[0].begin(), s.stages[0].end(), Action::parse("F1")) - s.stages[0].begin());
  ASSERT_GT(f1_index, 1);
  times[1][1] = f1_index + 1;  // stage 1's F0 after stage 0's F1
  const Schedule later = place_on_ranks(s, {0, 0}, 2, times);
  EXPECT_LT(merged_position(later, 0, "F1"), merged_position(later, 1, "F0"));
  times[1][1] = 0;  // stage 1's F0 before everything it can precede
  const Schedule sooner = place_on_ranks(s, {0, 0}, 2, times);
  EXPECT_GT(merged_position(sooner, 0, "F1"), merged_position(sooner, 1, "F0"));
  EXPECT_NE(error_of([&] {
              place_on_ranks(s, {0, 0}, 2, {{1.0}});
            }).find("start times given for 1"),
            std::string::npos);
}

TEST(PlaceOnRanks, RandomStartTimesGiveValidOrders) {
  std::mt19937_64 rng(17);
  for (int trial = 0; trial < 100; ++trial) {
    const testing::Step step = testing::random_step(rng);
    const int ranks = 1 + trial % 4;
    ScheduleOptions options;
    options.num_stages = 2 * ranks;
    options.zero_bubble = trial % 3 == 0 ? ZeroBubble::kH1 : ZeroBubble::kOff;
    const Schedule s = build_schedule(step.chunks, step.waves, options);
    std::vector<std::vector<double>> times(s.num_stages());
    for (int p = 0; p < s.num_stages(); ++p)
      for (size_t i = 0; i < s.stages[p].size(); ++i)
        times[p].push_back(std::uniform_real_distribution<double>(0, 10)(rng));
    const Schedule placed =
        place_on_ranks(s, v_shape(ranks), static_cast<int>(step.chunks.size()), times);
    ASSERT_NO_THROW(validate_schedule(placed, step.chunks)) << "trial " << trial;
  }
}

TEST(PlaceOnRanks, BadPlacementsAndDeadlockedStagesAreErrors) {
  const testing::Step step = testing::packed_step(2);
  const Schedule s = testing::schedule_on(4, step.chunks, {{0, 1}});
  EXPECT_NE(error_of([&] {
              place_on_ranks(s, {0, 1}, 2);
            }).find("2 ranks given for 4 stages"),
            std::string::npos);
  EXPECT_NE(error_of([&] {
              place_on_ranks(s, {0, 0, 2, 2}, 2);
            }).find("no stage is placed on rank 1"),
            std::string::npos);
  EXPECT_NE(error_of([&] {
              place_on_ranks(s, {0, -1, 1, 1}, 2);
            }).find("stage 1 has rank -1"),
            std::string::npos);
  const Schedule placed = place_on_ranks(s, {0, 1, 1, 0}, 2);
  EXPECT_NE(error_of([&] {
              place_on_ranks(placed, {0, 1, 1, 0}, 2);
            }).find("placed already"),
            std::string::npos);
  // Stages that deadlock on ranks of their own deadlock on any placement.
  const Schedule stuck = testing::parse_schedule({"F0 SEND_F0 F1 SEND_F1 RECV_B0 B0 RECV_B1 B1",
                                                  "RECV_F0 F0 B0 SEND_B0 RECV_F1 F1 B1 SEND_B1"});
  const std::string message = error_of([&] { place_on_ranks(stuck, {0, 1}, 2); });
  EXPECT_NE(message.find("deadlock before they are placed: stage 0 SEND_F1 waits for stage 1 to "
                         "post RECV_F1"),
            std::string::npos)
      << message;
}

}  // namespace
}  // namespace infinipipe
