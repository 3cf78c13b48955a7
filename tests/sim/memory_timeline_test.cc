#include "infinipipe/sim/memory_timeline.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <random>

#include "infinipipe/core/error.h"
#include "sim/sim_fixtures.h"

namespace infinipipe {
namespace {

using test::B;
using test::F;

// Sequence 0 (300 tokens) split into three slices, chunks 0..2; chunks 3 and 4 are whole
// short sequences.
std::vector<Chunk> split_and_packed() {
  return {Chunk{{Slice{0, 0, 100, 300}}}, Chunk{{Slice{0, 100, 200, 300}}},
          Chunk{{Slice{0, 200, 300, 300}}}, test::whole(1, 40), test::whole(2, 30)};
}

TEST(MemoryTimeline, SplitSequenceBuffersOpenAndClose) {
  CostModel cost = test::simple_cost({2});
  std::vector<Chunk> chunks = split_and_packed();
  // Chunk 3 goes first (no buffer yet), then the split sequence's slices ascending, backwards
  // in reverse; chunk 4 runs after the split sequence is gone.
  Schedule s;
  s.stages = {{F(3), F(0), F(1), F(2), B(3), B(2), B(1), B(0), F(4), B(4)}};
  std::vector<MemoryMoment> moments = memory_moments(s, 0, chunks, cost);

  const double ms = cost.model_state_bytes(0);
  const double kv = cost.kv_buffer_bytes(300, 0);  // and as much again for dK/dV
  auto ws = [&](int c) { return cost.backward_workspace_bytes(chunks[c], 0); };
  struct Expected {
    int action_index;
    double fixed;
    std::vector<int> in_flight;
  };
  const std::vector<Expected> expected = {
      {0, ms, {3}},
      {1, ms + kv, {3, 0}},
      {2, ms + kv, {3, 0, 1}},
      {3, ms + kv, {3, 0, 1, 2}},
      {4, ms + kv + ws(3), {3, 0, 1, 2}},    // whole chunk: no dK/dV yet
      {5, ms + kv + kv + ws(2), {0, 1, 2}},  // the sequence's first backward opens dK/dV
      {6, ms + kv + kv + ws(1), {0, 1}},
      {7, ms + kv + kv + ws(0), {0}},  // its first slice: both buffers still there
      {8, ms, {4}},                    // ... and gone after it
      {9, ms + ws(4), {4}},
  };
  ASSERT_EQ(moments.size(), expected.size());
  for (size_t i = 0; i < expected.size(); ++i) {
    SCOPED_TRACE("moment " + std::to_string(i));
    EXPECT_EQ(moments[i].action_index, expected[i].action_index);
    EXPECT_DOUBLE_EQ(moments[i].fixed_bytes, expected[i].fixed);
    EXPECT_EQ(moments[i].in_flight, expected[i].in_flight);
  }
}

TEST(MemoryTimeline, SkipsCommunicationAndCountsEachStageOnItsOwn) {
  CostModel cost = test::simple_cost({1, 1});
  std::vector<Chunk> chunks = test::equal_chunks(3, 10);
  Schedule s = test::one_f_one_b(2, 3);
  for (int p = 0; p < 2; ++p) {
    std::vector<MemoryMoment> moments = memory_moments(s, p, chunks, cost);
    ASSERT_EQ(moments.size(), 6u);
    for (const MemoryMoment& m : moments) {
      EXPECT_TRUE(s.stages[p][m.action_index].is_compute());
      EXPECT_GE(m.fixed_bytes, cost.model_state_bytes(p));
    }
  }
  // Stage 0 warms up with one forward, so it holds two chunks; the last stage never more than one.
  EXPECT_EQ(memory_moments(s, 0, chunks, cost)[1].in_flight.size(), 2u);
  for (const MemoryMoment& m : memory_moments(s, 1, chunks, cost))
    EXPECT_EQ(m.in_flight.size(), 1u);
}

TEST(MemoryTimeline, MomentBytesAddTheActivationsWithTheirRecompute) {
  CostModel cost = test::simple_cost({3});
  std::vector<Chunk> chunks = split_and_packed();
  MemoryMoment moment;
  moment.fixed_bytes = 1234;
  moment.in_flight = {3, 0, 1};
  Recompute recompute = {{2, 1, 0, 3, 0}};
  double expected = 1234 + cost.activation_bytes(chunks[3], 0, 3) +
                    cost.activation_bytes(chunks[0], 0, 2) + cost.activation_bytes(chunks[1], 0, 1);
  EXPECT_DOUBLE_EQ(moment_bytes(moment, 0, chunks, cost, recompute), expected);
  // Recomputing can only lower a moment (checkpointed layers keep their input only).
  EXPECT_LT(moment_bytes(moment, 0, chunks, cost, recompute),
            moment_bytes(moment, 0, chunks, cost, {}));
}

TEST(MemoryTimeline, ObservablePeakLeavesOutModelStateAndWorkspaceGradients) {
  CostModel cost = test::simple_cost({2});
  std::vector<Chunk> chunks = split_and_packed();
  Schedule s;
  s.stages = {{F(3), F(0), F(1), F(2), B(3), B(2), B(1), B(0), F(4), B(4)}};
  const double kv = cost.kv_buffer_bytes(300, 0);
  auto act = [&](int c, int ckpt) { return cost.activation_bytes(chunks[c], 0, ckpt); };
  // No recompute: the peak is after the last forward (K/V and all four chunks) or at the
  // split sequence's first backward (K/V and dK/dV, chunk 3 gone); no workspace.
  const double all_held = act(0, 0) + act(1, 0) + act(2, 0);
  EXPECT_DOUBLE_EQ(observable_activation_peak(s, 0, chunks, cost, {}),
                   std::max(kv + act(3, 0) + all_held, 2 * kv + all_held));
  // Chunk 2 checkpoints both layers: its backward recomputes one layer at a time, which holds
  // that layer's activations again besides the kept inputs. Chunk 1 checkpoints one of two
  // layers: its held full layer already bounds the recompute.
  const Recompute recompute = {{0, 1, 2, 0, 0}};
  const double held = act(0, 0) + act(1, 1) + act(2, 2);
  EXPECT_DOUBLE_EQ(
      observable_activation_peak(s, 0, chunks, cost, recompute),
      std::max(kv + act(3, 0) + held, 2 * kv + held + cost.checkpoint_saving_bytes(chunks[2], 0)));
}

TEST(MemoryTimeline, ObservablePeakIsBelowThePeakAndAboveEveryForwardMoment) {
  std::mt19937_64 rng(21);
  for (int trial = 0; trial < 100; ++trial) {
    const int layers = 1 + rng() % 3;
    CostModel cost = test::simple_cost({layers, layers});
    std::vector<Chunk> chunks = test::equal_chunks(4, 5 + rng() % 50);
    Schedule s = test::one_f_one_b(2, 4);
    Recompute recompute(2, std::vector<int>(4));
    for (auto& row : recompute)
      for (int& r : row) r = rng() % (layers + 1);
    for (int p = 0; p < 2; ++p) {
      const double model_state = cost.model_state_bytes(p);
      const double observable = observable_activation_peak(s, p, chunks, cost, recompute);
      double peak = 0, forward_peak = 0;
      for (const MemoryMoment& m : memory_moments(s, p, chunks, cost)) {
        const double bytes = moment_bytes(m, p, chunks, cost, recompute) - model_state;
        peak = std::max(peak, bytes);
        if (s.stages[p][m.action_index].type == ActionType::kForward)
          forward_peak = std::max(forward_peak, bytes);
      }
      EXPECT_LE(observable, peak * (1 + 1e-12));
      EXPECT_GE(observable, forward_peak * (1 - 1e-12));
    }
  }
}

TEST(MemoryTimeline, RankPeaksAddEachStagesLatestMomentOverTime) {
  // Rank 0 holds stages 0 and 2, rank 1 stage 1. Stage 0: 5 at t=1, 2 at t=4; stage 2: 3 at
  // t=2, 7 at t=5. Rank 0 holds 1 + 1 idle, then 5 + 1, 5 + 3 = 8 at t=2, 2 + 3, 2 + 7 = 9 at t=5.
  const std::vector<std::vector<std::pair<double, double>>> timelines = {
      {{1, 5}, {4, 2}}, {{0.5, 4}}, {{2, 3}, {5, 7}}};
  const std::vector<RankPeak> peaks = rank_memory_peaks(timelines, {1, 2, 1}, {0, 1, 0}, 2);
  ASSERT_EQ(peaks.size(), 2u);
  EXPECT_EQ(peaks[0].bytes, 9);
  EXPECT_EQ(peaks[0].time_s, 5);
  EXPECT_EQ(peaks[1].bytes, 4);
  EXPECT_EQ(peaks[1].time_s, 0.5);
  // A stage without moments holds its idle bytes all along.
  const std::vector<RankPeak> idle = rank_memory_peaks({{}, {}}, {2, 3}, {0, 0}, 1);
  EXPECT_EQ(idle[0].bytes, 5);
  EXPECT_THROW(rank_memory_peaks(timelines, {1, 2, 1}, {0, 2, 0}, 2), Error);
}

TEST(MemoryTimeline, RejectsAStageOutsideTheSchedule) {
  CostModel cost = test::simple_cost({1});
  Schedule s;
  s.stages = {{F(0), B(0)}};
  EXPECT_THROW(memory_moments(s, 1, test::equal_chunks(1, 10), cost), Error);
}

}  // namespace
}  // namespace infinipipe
