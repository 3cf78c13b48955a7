// The simulator on schedules the scheduler builds, from chunks the sequence processor cuts.
#include <algorithm>
#include <random>
#include <set>

#include <gtest/gtest.h>

#include "infinipipe/chunking/sequence_processor.h"
#include "infinipipe/schedule/scheduler.h"
#include "infinipipe/schedule/validator.h"
#include "infinipipe/sim/memory_timeline.h"
#include "infinipipe/sim/simulator.h"
#include "sim/random_step.h"
#include "sim/sim_fixtures.h"

namespace infinipipe {
namespace {

using test::random_step;
using test::RandomStep;

std::vector<Wave> one_wave(int m) {
  Wave wave(m);
  for (int c = 0; c < m; ++c) wave[c] = c;
  return {wave};
}

TEST(ScheduledSimulation, BuiltOneFOneBAndGPipeMatchTheClassicFormula) {
  // tf = 2 layers * 50 tokens * 1 ms = 0.1 s, tb = 0.2 s on every stage.
  for (ScheduleKind kind : {ScheduleKind::kOneFOneB, ScheduleKind::kGPipe}) {
    for (int d : {1, 2, 4, 8}) {
      for (int m : {1, d, 3 * d}) {
        CostModel cost = test::simple_cost(std::vector<int>(d, 2));
        std::vector<Chunk> chunks = test::equal_chunks(m, 50);
        ScheduleOptions options;
        options.num_stages = d;
        options.kind = kind;
        Schedule s = build_schedule(chunks, one_wave(m), options);
        SimResult r = simulate(s, chunks, cost, {}, {});
        EXPECT_NEAR(r.step_time_s, (m + d - 1) * 0.3, 1e-9)
            << (kind == ScheduleKind::kGPipe ? "GPipe" : "1F1B") << " d=" << d << " m=" << m;
      }
    }
  }
}

TEST(ScheduledSimulation, OverlappedWavesOfPackedChunksRunAsOneWave) {
  // Packed chunks have no warm-up beyond 1F1B's, so wave i+1's warm-up fills exactly wave i's
  // cool-down: the step is one 1F1B over all chunks, a fill and a drain in all instead of per wave.
  const int waves = 3;
  for (int d : {2, 4, 8}) {
    for (int m : {d, 2 * d}) {
      CostModel cost = test::simple_cost(std::vector<int>(d, 2));
      std::vector<Chunk> chunks = test::equal_chunks(waves * m, 50);
      std::vector<Wave> split(waves);
      for (int c = 0; c < waves * m; ++c) split[c / m].push_back(c);
      ScheduleOptions options;
      options.num_stages = d;
      const SimResult back_to_back =
          simulate(build_schedule(chunks, split, options), chunks, cost, {}, {});
      options.overlap_waves = true;
      const Schedule overlapped = build_schedule(chunks, split, options);
      const SimResult r = simulate(overlapped, chunks, cost, {}, {});
      EXPECT_NEAR(back_to_back.step_time_s, waves * (m + d - 1) * 0.3, 1e-9)
          << "d=" << d << " m=" << m;
      EXPECT_NEAR(r.step_time_s, (waves * m + d - 1) * 0.3, 1e-9) << "d=" << d << " m=" << m;
      EXPECT_TRUE(waves_overlap(overlapped, split));
      const Schedule one = build_schedule(chunks, one_wave(waves * m), options);
      EXPECT_EQ(overlapped.text(), one.text()) << "d=" << d << " m=" << m;
      EXPECT_EQ(r.peak_memory_bytes, back_to_back.peak_memory_bytes) << "d=" << d << " m=" << m;
    }
  }
}

TEST(ScheduledSimulation, OneFOneBHoldsFewerChunksThanGPipe) {
  const int d = 4, m = 12;
  CostModel cost = test::simple_cost(std::vector<int>(d, 2));
  std::vector<Chunk> chunks = test::equal_chunks(m, 50);
  ScheduleOptions options;
  options.num_stages = d;
  SimResult one_f_one_b =
      simulate(build_schedule(chunks, one_wave(m), options), chunks, cost, {}, {});
  options.kind = ScheduleKind::kGPipe;
  SimResult gpipe = simulate(build_schedule(chunks, one_wave(m), options), chunks, cost, {}, {});
  const double act = cost.activation_bytes(chunks[0], 0, 0);
  const double ws = cost.backward_workspace_bytes(chunks[0], 0);
  // Stage 0: d chunks in flight under 1F1B, all m under GPipe, peaking during a backward.
  EXPECT_DOUBLE_EQ(one_f_one_b.peak_memory_bytes[0], cost.model_state_bytes(0) + d * act + ws);
  EXPECT_DOUBLE_EQ(gpipe.peak_memory_bytes[0], cost.model_state_bytes(0) + m * act + ws);
}

// Every built schedule passes the validator and simulates without deadlock; buffers of split
// sequences appear in the memory timeline exactly while the sequence is open.
TEST(ScheduledSimulation, RandomEppStepsSimulateWithoutDeadlock) {
  std::mt19937_64 rng(7);
  const ModelShape shape = ModelShape::builtin("tiny");
  for (int trial = 0; trial < 60; ++trial) {
    const RandomStep step = random_step(rng, trial, shape);
    const int d = step.d;
    const CostModel cost = CostModel::analytic(shape, Hardware::builtin("cpu"), d);
    const std::vector<int64_t>& lengths = step.lengths;
    const std::vector<Chunk>& chunks = step.chunks;
    const Schedule& s = step.schedule;
    SCOPED_TRACE("trial " + std::to_string(trial) + " d=" + std::to_string(d));
    ASSERT_NO_THROW(validate_schedule(s, chunks));

    SimOptions quiet;
    quiet.record_events = false;
    SimResult r;
    ASSERT_NO_THROW(r = simulate(s, chunks, cost, {}, quiet));
    for (int p = 0; p < d; ++p) {
      EXPECT_GE(r.bubble_fraction[p], -1e-12);
      EXPECT_LE(r.bubble_fraction[p], 1.0);
      EXPECT_GE(r.peak_memory_bytes[p], cost.model_state_bytes(p));

      // Independent count of open split sequences at each moment: a sequence's buffer is open
      // from its first forward until its first slice's backward has ended.
      std::set<int> open, grad;
      std::vector<MemoryMoment> moments = memory_moments(s, p, chunks, cost);
      size_t next = 0;
      for (int i = 0; i < static_cast<int>(s.stages[p].size()); ++i) {
        const Action& a = s.stages[p][i];
        if (!a.is_compute()) continue;
        const Chunk& chunk = chunks[a.chunk];
        for (const Slice& sl : chunk.slices)
          if (!sl.whole()) (a.type == ActionType::kForward ? open : grad).insert(sl.seq);
        double expected = cost.model_state_bytes(p);
        for (int seq : open) expected += cost.kv_buffer_bytes(lengths[seq], p);
        for (int seq : grad) expected += cost.kv_buffer_bytes(lengths[seq], p);
        // A posted receive's buffer, from its RECV until the compute that takes it.
        for (int j = 0; j < i; ++j) {
          const Action& recv = s.stages[p][j];
          if (!recv.is_recv()) continue;
          const ActionType taker =
              recv.type == ActionType::kRecvForward ? ActionType::kForward : ActionType::kBackward;
          int k = j + 1;
          while (!(s.stages[p][k].type == taker && s.stages[p][k].chunk == recv.chunk)) ++k;
          if (k > i) expected += cost.message_bytes(chunks[recv.chunk]);
        }
        if (a.type == ActionType::kBackward) expected += cost.backward_workspace_bytes(chunk, p);
        ASSERT_LT(next, moments.size());
        EXPECT_EQ(moments[next].action_index, i);
        EXPECT_NEAR(moments[next].fixed_bytes, expected, 1e-9 * expected);
        ++next;
        if (a.type == ActionType::kBackward)
          for (const Slice& sl : chunk.slices)
            if (!sl.whole() && sl.start == 0) open.erase(sl.seq), grad.erase(sl.seq);
      }
      EXPECT_EQ(next, moments.size());
    }
  }
}

// binding_moments keeps memory moments unchanged and drops only dominated ones: each dropped
// moment's in-flight set lies inside a kept one's and its fixed bytes are no larger, so for any
// recompute the peak over the kept moments is the peak over all, bit for bit.
TEST(ScheduledSimulation, BindingMomentsKeepThePeakOfEveryRecompute) {
  std::mt19937_64 rng(11);
  const ModelShape shape = ModelShape::builtin("tiny");
  size_t all = 0, kept = 0;
  for (int trial = 0; trial < 60; ++trial) {
    const RandomStep step = random_step(rng, trial, shape);
    const CostModel cost = CostModel::analytic(shape, Hardware::builtin("cpu"), step.d);
    SCOPED_TRACE("trial " + std::to_string(trial));
    for (int p = 0; p < step.d; ++p) {
      const std::vector<MemoryMoment> moments = memory_moments(step.schedule, p, step.chunks, cost);
      const std::vector<MemoryMoment> binding =
          binding_moments(step.schedule, p, step.chunks, cost);
      all += moments.size();
      kept += binding.size();
      size_t next = 0;
      for (const MemoryMoment& m : moments) {
        if (next < binding.size() && binding[next].action_index == m.action_index) {
          EXPECT_EQ(binding[next].fixed_bytes, m.fixed_bytes);
          EXPECT_EQ(binding[next].in_flight, m.in_flight);
          ++next;
          continue;
        }
        std::vector<int> set = m.in_flight;
        std::sort(set.begin(), set.end());
        const bool dominated = std::any_of(binding.begin(), binding.end(), [&](const auto& b) {
          std::vector<int> over = b.in_flight;
          std::sort(over.begin(), over.end());
          return b.fixed_bytes >= m.fixed_bytes &&
                 std::includes(over.begin(), over.end(), set.begin(), set.end());
        });
        EXPECT_TRUE(dominated) << "moment at action " << m.action_index << " dropped";
      }
      EXPECT_EQ(next, binding.size()) << "a binding moment that is no memory moment";
      for (int draw = 0; draw < 3; ++draw) {
        Recompute recompute(step.d, std::vector<int>(step.chunks.size(), 0));
        for (int& layers : recompute[p])
          layers = std::uniform_int_distribution<int>(0, cost.layers(p))(rng);
        double peak = 0, binding_peak = 0;
        for (const MemoryMoment& m : moments)
          peak = std::max(peak, moment_bytes(m, p, step.chunks, cost, recompute));
        for (const MemoryMoment& m : binding)
          binding_peak = std::max(binding_peak, moment_bytes(m, p, step.chunks, cost, recompute));
        EXPECT_EQ(binding_peak, peak);
      }
    }
  }
  EXPECT_LT(kept, all) << "nothing was ever dropped: the test shows nothing";
}

// One long sequence's slices are all in flight on the first stage before its first backward,
// which holds them all and its workspace too: none of the run of forwards binds.
TEST(ScheduledSimulation, ALongSequencesForwardsBindOnce) {
  const int stages = 2, k = 64;
  const CostModel cost =
      CostModel::analytic(ModelShape::builtin("tiny"), Hardware::builtin("cpu"), stages);
  std::vector<Chunk> chunks;
  for (int i = 0; i < k; ++i) chunks.push_back(Chunk{{Slice{0, i * 512, (i + 1) * 512, k * 512}}});
  ScheduleOptions options;
  options.num_stages = stages;
  const Schedule s = build_schedule(chunks, one_wave(k), options);
  int forwards = 0;
  const std::vector<MemoryMoment> binding = binding_moments(s, 0, chunks, cost);
  for (const MemoryMoment& m : binding)
    forwards += s.stages[0][m.action_index].type == ActionType::kForward;
  EXPECT_EQ(forwards, 0);
  EXPECT_GE(binding.size(), 1u);
  EXPECT_LE(binding.size(), static_cast<size_t>(k));  // of 2k moments
}

// The paper's Figure (penalty bubbles): a long sequence's slices scheduled after short chunks
// stall the pipeline, because its warm-up is sized for a chain of one; longest first avoids it.
TEST(ScheduledSimulation, LongestFirstAvoidsThePenaltyBubblesOfShortFirst) {
  const int stages = 4, k = 4, shorts = 4;
  const CostModel cost =
      CostModel::analytic(ModelShape::builtin("tiny"), Hardware::builtin("a800"), stages);
  const int64_t slice = 2048;
  std::vector<Chunk> chunks;
  for (int i = 0; i < k; ++i)  // sequence 0: one chain of k slices
    chunks.push_back(Chunk{{Slice{0, i * slice, (i + 1) * slice, k * slice}}});
  for (int j = 0; j < shorts; ++j)  // sequences 1..shorts: chains of one
    chunks.push_back(Chunk{{Slice{1 + j, 0, slice, slice}}});
  Wave short_first, longest_first;
  for (int j = 0; j < shorts; ++j) short_first.push_back(k + j);
  for (int i = 0; i < k; ++i) short_first.push_back(i);
  longest_first = short_first;  // the default order sorts it
  ScheduleOptions keep;
  keep.num_stages = stages;
  keep.keep_chain_order = true;
  ScheduleOptions sorted;
  sorted.num_stages = stages;
  const Schedule bad = build_schedule(chunks, {short_first}, keep);
  const Schedule good = build_schedule(chunks, {longest_first}, sorted);
  ASSERT_NO_THROW(validate_schedule(bad, chunks));
  ASSERT_NO_THROW(validate_schedule(good, chunks));
  ASSERT_EQ(bad.stages[0].front().chunk, k) << "short-first did not keep the given order";
  SimOptions sim_options;
  sim_options.record_events = false;
  const SimResult slow = simulate(bad, chunks, cost, {}, sim_options);
  const SimResult fast = simulate(good, chunks, cost, {}, sim_options);
  EXPECT_LT(fast.step_time_s, slow.step_time_s);
  EXPECT_LT(fast.mean_bubble_fraction(), slow.mean_bubble_fraction());
}

}  // namespace
}  // namespace infinipipe
