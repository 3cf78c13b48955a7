// offload.cc and the simulator's copies: which chunks a stage keeps at each moment (its latest
// forwards and its next backwards), when each leaves and comes back, and what the copies cost.
#include "infinipipe/sim/offload.h"

#include <gtest/gtest.h>

#include <algorithm>

#include "infinipipe/sim/memory_timeline.h"
#include "infinipipe/sim/simulator.h"
#include "sim/sim_fixtures.h"
#include "support/error_of.h"

namespace infinipipe {
namespace {

using test::B;
using test::F;
using test_support::error_of;

// Both stages warm up with four forwards, so stage 0 holds four chunks.
Schedule deep_warmup() {
  const std::vector<Action> order = {F(0), F(1), F(2), F(3), B(0), F(4),
                                     B(1), F(5), B(2), B(3), B(4), B(5)};
  return test::with_communication({order, order});
}

int index_of(const Schedule& s, const Action& a) {
  const auto& list = s.stages[0];
  return static_cast<int>(std::find(list.begin(), list.end(), a) - list.begin());
}

TEST(Offload, KeepsTheLatestForwardsAndTheNextBackwards) {
  const CostModel cost = test::simple_cost({1, 1});
  const std::vector<Chunk> chunks = test::equal_chunks(6, 10);
  const Schedule s = deep_warmup();
  const double act = cost.activation_bytes(chunks[0], 0, 0);
  const std::vector<double> activation(6, act);
  const std::vector<MemoryMoment> moments = memory_moments(s, 0, chunks, cost);

  // Without offload the walk holds what memory_moments holds.
  const OffloadWalk all = walk_offload(s, 0, chunks, cost, activation, -1, 1);
  ASSERT_EQ(all.bytes.size(), moments.size());
  for (size_t m = 0; m < moments.size(); ++m) {
    EXPECT_EQ(all.moment_action[m], moments[m].action_index);
    EXPECT_DOUBLE_EQ(all.bytes[m], moment_bytes(moments[m], 0, chunks, cost, {}));
  }
  EXPECT_EQ(all.bytes_each_way, 0);

  // One latest forward and the next backward: never more than two chunks on the device. Chunk
  // c (1..4) leaves at F(c+1)'s moment and comes back after B(c-1), for B(c).
  const OffloadWalk one = walk_offload(s, 0, chunks, cost, activation, 1, 1);
  for (size_t m = 0; m < moments.size(); ++m) {
    const double kept = std::min<double>(2, moments[m].in_flight.size());
    EXPECT_DOUBLE_EQ(one.bytes[m], moments[m].fixed_bytes + kept * act) << "moment " << m;
  }
  for (int c = 1; c <= 4; ++c) {
    EXPECT_EQ(one.copied_out_by[index_of(s, F(c + 1))], std::vector<int>{c});
    EXPECT_EQ(one.copied_in_after[index_of(s, B(c - 1))], std::vector<int>{c});
  }
  EXPECT_DOUBLE_EQ(one.bytes_each_way, 4 * act);
  EXPECT_DOUBLE_EQ(one.peak_bytes, *std::max_element(one.bytes.begin(), one.bytes.end()));

  // Two backwards ahead: one chunk more is kept, chunks come back a backward earlier, and chunk
  // 1 never leaves.
  const OffloadWalk two = walk_offload(s, 0, chunks, cost, activation, 1, 2);
  EXPECT_DOUBLE_EQ(two.bytes_each_way, 3 * act);
  EXPECT_EQ(two.copied_out_by[index_of(s, F(3))], std::vector<int>{2});
  EXPECT_EQ(two.copied_in_after[index_of(s, B(0))], std::vector<int>{2});
  EXPECT_GT(two.peak_bytes, one.peak_bytes);
  EXPECT_LT(two.peak_bytes, all.peak_bytes);
}

TEST(Offload, RefusesWhatItCannotModel) {
  Offload offload{{0, -1}, 1, 1e9};
  EXPECT_NE(error_of([&] { offload.validate(2); }).find("keep at least 1"), std::string::npos);
  offload = {{1, -1}, 0, 1e9};
  EXPECT_NE(error_of([&] { offload.validate(2); }).find("prefetch 0"), std::string::npos);
  offload = {{1, -1}, 1, 0};
  EXPECT_NE(error_of([&] { offload.validate(2); }).find("host link"), std::string::npos);
  offload = {{1}, 1, 1e9};
  EXPECT_NE(error_of([&] { offload.validate(2); }).find("1 resident counts for 2 stages"),
            std::string::npos);
  offload = {{1, -1}, 1, 1e9, 0};
  EXPECT_NE(error_of([&] { offload.validate(2); }).find("0 stages per host link"),
            std::string::npos);
}

TEST(Offload, ALinkBooksEachCopyIntoTheFirstGapThatHoldsIt) {
  HostLinkWay link;
  EXPECT_EQ(link.book(10, 5), 15);  // [10, 15)
  EXPECT_EQ(link.book(0, 4), 4);    // booked later, ready earlier: [0, 4)
  EXPECT_EQ(link.book(3, 4), 8);    // [4, 8) is free from 4 and holds it
  EXPECT_EQ(link.book(7, 3), 18);   // [8, 10) is too short: after [10, 15)
  EXPECT_EQ(link.book(20, 1), 21);  // past every copy
  EXPECT_EQ(link.book(8, 2), 10);   // the gap [8, 10) exactly
}

TEST(Offload, TheLastStageMovesAHeadedChunkWithoutItsLogits) {
  // The last stage runs each chunk's H itself; it keeps no logits from F to B (memory_timeline.h).
  const CostModel cost = test::simple_cost({1, 1});
  const std::vector<Chunk> chunks = test::equal_chunks(6, 10);
  Schedule s = deep_warmup();
  auto& last = s.stages[1];
  for (int c = 0; c < 6; ++c)
    last.insert(std::find(last.begin(), last.end(), F(c)) + 1, Action{ActionType::kHead, c});
  const double act = cost.activation_bytes(chunks[0], 1, 0);
  const double logits = cost.head_logits_bytes(chunks[0]);
  ASSERT_GT(logits, 0);
  const std::vector<double> activation(6, act);
  const OffloadWalk all = walk_offload(s, 1, chunks, cost, activation, -1, 1);
  const OffloadWalk one = walk_offload(s, 1, chunks, cost, activation, 1, 1);
  EXPECT_DOUBLE_EQ(one.moved_bytes[1], act - logits);
  EXPECT_EQ(one.moved_bytes[0], 0);
  // At F3's moment chunks 1 and 2 are on the host.
  const auto at = [&](const OffloadWalk& w) {
    const int index = static_cast<int>(std::find(last.begin(), last.end(), F(3)) - last.begin());
    return w.bytes[std::find(w.moment_action.begin(), w.moment_action.end(), index) -
                   w.moment_action.begin()];
  };
  EXPECT_DOUBLE_EQ(at(all) - at(one), 2 * (act - logits));
}

double event_end(const SimResult& r, int stage, const std::string& name) {
  for (const SimEvent& e : r.events)
    if (e.stage == stage && e.name == name) return e.end_s;
  ADD_FAILURE() << name << " not found";
  return 0;
}

double event_start(const SimResult& r, int stage, const std::string& name) {
  for (const SimEvent& e : r.events)
    if (e.stage == stage && e.name == name) return e.start_s;
  ADD_FAILURE() << name << " not found";
  return 0;
}

TEST(Offload, TheSimulatorTimesTheCopies) {
  const CostModel cost = test::simple_cost({1, 1});
  const std::vector<Chunk> chunks = test::equal_chunks(6, 10);
  const Schedule s = deep_warmup();
  const double act = cost.activation_bytes(chunks[0], 0, 0);
  SimOptions plain;
  const SimResult without = simulate(s, chunks, cost, {}, plain);

  // A free link: the same step, a lower peak on stage 0, the bytes counted.
  Offload fast{{1, -1}, 1, 1e30};
  SimOptions options;
  options.offload = &fast;
  const SimResult free = simulate(s, chunks, cost, {}, options);
  EXPECT_DOUBLE_EQ(free.step_time_s, without.step_time_s);
  EXPECT_LT(free.peak_memory_bytes[0], without.peak_memory_bytes[0]);
  EXPECT_DOUBLE_EQ(free.peak_memory_bytes[1], without.peak_memory_bytes[1]);
  EXPECT_DOUBLE_EQ(free.offload_bytes[0], 4 * act);
  EXPECT_EQ(free.offload_wait_s[0], 0);

  // A slow link: a copy takes ten forwards. Chunk 1 leaves after F1 and must be out by F2's end;
  // it comes back after B0 and B1 waits for it.
  const double forward = event_end(without, 0, "F0") - event_start(without, 0, "F0");
  const double copy = 10 * forward;
  Offload slow{{1, -1}, 1, act / copy};
  options.offload = &slow;
  const SimResult waited = simulate(s, chunks, cost, {}, options);
  EXPECT_GT(waited.step_time_s, without.step_time_s);
  EXPECT_GT(waited.offload_wait_s[0], 0);
  EXPECT_NEAR(event_end(waited, 0, "F2"), event_end(waited, 0, "F1") + copy, 1e-9 * copy);
  EXPECT_GE(event_start(waited, 0, "B1"), event_end(waited, 0, "B0") + copy);
  EXPECT_DOUBLE_EQ(waited.peak_memory_bytes[0], free.peak_memory_bytes[0]);

  // Under a budget between stage 0's two peaks only the offloaded stage 0 fits (stage 1, which
  // holds as many chunks and keeps them all, is over it either way).
  SimOptions budget = options;
  budget.memory_budget_bytes = (free.peak_memory_bytes[0] + without.peak_memory_bytes[0]) / 2;
  const std::string offloaded = simulate(s, chunks, cost, {}, budget).over_budget_message;
  EXPECT_EQ(offloaded.find("stage 0"), std::string::npos) << offloaded;
  EXPECT_NE(offloaded.find("stage 1"), std::string::npos) << offloaded;
  budget.offload = nullptr;
  const std::string kept = simulate(s, chunks, cost, {}, budget).over_budget_message;
  EXPECT_NE(kept.find("stage 0"), std::string::npos) << kept;
}

TEST(Offload, StagesSharingALinkQueueTheirCopies) {
  const CostModel cost = test::simple_cost({1, 1});
  const std::vector<Chunk> chunks = test::equal_chunks(6, 10);
  const Schedule s = deep_warmup();
  const SimResult without = simulate(s, chunks, cost, {}, SimOptions{});
  const double forward = event_end(without, 0, "F0") - event_start(without, 0, "F0");
  // Both stages offload; a copy takes three forwards.
  const double rate = cost.activation_bytes(chunks[0], 0, 0) / (3 * forward);
  Offload own{{1, 1}, 1, rate, 1};
  Offload shared{{1, 1}, 1, rate, 2};
  SimOptions options;
  options.offload = &own;
  const SimResult apart = simulate(s, chunks, cost, {}, options);
  options.offload = &shared;
  const SimResult together = simulate(s, chunks, cost, {}, options);
  EXPECT_EQ(together.offload_bytes, apart.offload_bytes);
  const auto total = [](const std::vector<double>& v) { return v[0] + v[1]; };
  EXPECT_GT(total(together.offload_wait_s), total(apart.offload_wait_s));
  EXPECT_GT(together.step_time_s, apart.step_time_s);
  // Stage 1's chunk 1 leaves after its F1 and must be out by its F2's end: apart, three forwards
  // after F1; shared, only once stage 0's copies out, booked first, leave the link a gap.
  const double f1_end = event_end(apart, 1, "F1");
  EXPECT_NEAR(event_end(apart, 1, "F2"), f1_end + 3 * forward, 1e-9 * forward);
  EXPECT_GT(event_end(together, 1, "F2"), f1_end + 3 * forward + forward / 2);
  // A link that costs nothing is the same shared or not.
  own.bytes_per_s = shared.bytes_per_s = 1e30;
  options.offload = &own;
  const double free_apart = simulate(s, chunks, cost, {}, options).step_time_s;
  options.offload = &shared;
  EXPECT_DOUBLE_EQ(simulate(s, chunks, cost, {}, options).step_time_s, free_apart);
}

}  // namespace
}  // namespace infinipipe
