// Over 400 lines for a reason: scheduler.cc's one test file (tests mirror the sources), and its
// 1F1B shapes, waves and both zero-bubble modes each need their own instances.
#include "infinipipe/schedule/scheduler.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <random>

#include "infinipipe/core/error.h"
#include "infinipipe/schedule/validator.h"
#include "schedule/test_chunks.h"

namespace infinipipe {
namespace {

using testing::packed_step;
using testing::schedule_on;
using testing::Step;
using testing::StepBuilder;

std::vector<Action> computes_of(const std::vector<Action>& list) {
  std::vector<Action> out;
  for (const Action& a : list)
    if (a.is_compute()) out.push_back(a);
  return out;
}

std::string joined(const std::vector<Action>& list) {
  std::string out;
  for (const Action& a : list) out += (out.empty() ? "" : " ") + a.text();
  return out;
}

TEST(OrderWave, LongestChainFirstTiesByFirstChunkBackwardFifoChainsLifoChunks) {
  StepBuilder b;
  const auto two = b.add_chain(2);      // 0 1
  const auto three_a = b.add_chain(3);  // 2 3 4
  const auto one = b.add_chain(1);      // 5
  const auto three_b = b.add_chain(3);  // 6 7 8
  Step& step = b.step();
  ScheduleOptions options;
  const Wave wave = {5, 7, 0, 8, 1, 6, 2, 3, 4};
  const WaveOrder order = order_wave(step.chunks, wave, options);
  EXPECT_EQ(order.forward, (std::vector<int>{2, 3, 4, 6, 7, 8, 0, 1, 5}));
  EXPECT_EQ(order.backward, (std::vector<int>{4, 3, 2, 8, 7, 6, 1, 0, 5}));

  options.keep_chain_order =
      true;  // chains by first appearance in the wave: {5}, {6,7,8}, {0,1}, {2,3,4}
  const WaveOrder kept = order_wave(step.chunks, wave, options);
  EXPECT_EQ(kept.forward, (std::vector<int>{5, 6, 7, 8, 0, 1, 2, 3, 4}));
  EXPECT_EQ(kept.backward, (std::vector<int>{5, 8, 7, 6, 1, 0, 4, 3, 2}));
  (void)two, (void)three_a, (void)one, (void)three_b;
}

TEST(OrderWave, RejectsWavesThatAreNotWholeChains) {
  StepBuilder b;
  b.add_chain(3);
  b.add_chain(1);
  Step& step = b.step();
  ScheduleOptions options;
  EXPECT_THROW(order_wave(step.chunks, {0, 1, 3}, options), Error);  // chunk 2 of the chain missing
  EXPECT_THROW(order_wave(step.chunks, {0, 1, 2, 2}, options), Error);  // twice
  EXPECT_THROW(order_wave(step.chunks, {0, 1, 2, 4}, options), Error);  // no such chunk
}

TEST(BuildSchedule, RejectsBadWavesAndStages) {
  StepBuilder b;
  b.add_chain(2);
  b.add_chain(1);
  Step& step = b.step();
  ScheduleOptions options;
  options.num_stages = 2;
  EXPECT_THROW(build_schedule(step.chunks, {{0, 1}}, options), Error);  // chunk 2 in no wave
  EXPECT_THROW(build_schedule(step.chunks, {{0, 1, 2}, {2}}, options),
               Error);  // chunk 2 in two waves
  options.num_stages = 0;
  EXPECT_THROW(build_schedule(step.chunks, {{0, 1, 2}}, options), Error);
}

TEST(BuildSchedule, PackedChunksGiveTextbook1F1B) {
  const Step step = packed_step(6);
  const Schedule s = schedule_on(4, step.chunks, {{0, 1, 2, 3, 4, 5}});
  EXPECT_EQ(joined(computes_of(s.stages[0])), "F0 F1 F2 F3 B0 F4 B1 F5 B2 B3 B4 B5");
  EXPECT_EQ(joined(computes_of(s.stages[2])), "F0 F1 B0 F2 B1 F3 B2 F4 B3 F5 B4 B5");
  EXPECT_EQ(joined(computes_of(s.stages[3])), "F0 B0 F1 B1 F2 B2 F3 B3 F4 B4 F5 B5");
  // One compute ahead: the receive for the next compute is posted before the current one.
  EXPECT_EQ(joined(s.stages[3]),
            "RECV_F0 F0 RECV_F1 B0 SEND_B0 F1 RECV_F2 B1 SEND_B1 F2 RECV_F3 B2 SEND_B2 "
            "F3 RECV_F4 B3 SEND_B3 F4 RECV_F5 B4 SEND_B4 F5 B5 SEND_B5");
  EXPECT_EQ(joined(s.stages[1]),
            "RECV_F0 RECV_F1 F0 SEND_F0 RECV_F2 F1 SEND_F1 RECV_B0 F2 SEND_F2 RECV_F3 B0 SEND_B0 "
            "RECV_B1 F3 SEND_F3 RECV_F4 B1 SEND_B1 RECV_B2 F4 SEND_F4 RECV_F5 B2 SEND_B2 "
            "RECV_B3 F5 SEND_F5 RECV_B4 B3 SEND_B3 RECV_B5 B4 SEND_B4 B5 SEND_B5");
  EXPECT_NO_THROW(validate_schedule(s, step.chunks));
}

// Properties every generated schedule must have, checked here independently of the validator.
void check_properties(const Step& step, const Schedule& s, const ScheduleOptions& options) {
  const int d = options.num_stages;
  ASSERT_EQ(s.num_stages(), d);
  const int n = static_cast<int>(step.chunks.size());
  std::vector<int> wave_of(n), chain_length(n);
  for (size_t w = 0; w < step.waves.size(); ++w)
    for (int c : step.waves[w]) wave_of[c] = static_cast<int>(w);
  for (const auto& chain : step.chains)
    for (int c : chain) chain_length[c] = static_cast<int>(chain.size());

  for (int p = 0; p < d; ++p) {
    const std::vector<Action> computes = computes_of(s.stages[p]);
    std::map<int, int> fpos, bpos;
    for (int i = 0; i < static_cast<int>(computes.size()); ++i) {
      auto& where = computes[i].type == ActionType::kForward ? fpos : bpos;
      ASSERT_TRUE(where.emplace(computes[i].chunk, i).second)
          << "twice: " << computes[i].text() << "\n"
          << s.text();
    }
    ASSERT_EQ(fpos.size(), static_cast<size_t>(n));
    ASSERT_EQ(bpos.size(), static_cast<size_t>(n));
    for (const auto& chain : step.chains) {
      for (size_t i = 1; i < chain.size(); ++i) {
        EXPECT_LT(fpos[chain[i - 1]], fpos[chain[i]]) << "slice order, stage " << p;
        EXPECT_GT(bpos[chain[i - 1]], bpos[chain[i]]) << "reverse slice order, stage " << p;
      }
    }
    // Waves back to back: every compute of wave w before every compute of wave w + 1. Overlapped,
    // a later wave's compute may come before an earlier wave's only as a forward before a
    // backward, and the stage holds no more chunks than the larger warm-up of the two allows.
    std::vector<int> k_max_of(step.waves.size(), 0);
    for (size_t w = 0; w < step.waves.size(); ++w)
      for (int c : step.waves[w]) k_max_of[w] = std::max(k_max_of[w], chain_length[c]);
    const bool overlapped = options.overlap_waves && options.kind == ScheduleKind::kOneFOneB;
    int in_flight = 0;
    for (size_t i = 0; i < computes.size(); ++i) {
      in_flight += computes[i].type == ActionType::kForward ? 1 : -1;
      const int w = wave_of[computes[i].chunk];
      const int holds = (d - 1 - p) + std::max(k_max_of[w], w > 0 ? k_max_of[w - 1] : 0);
      if (overlapped && !options.keep_chain_order)
        EXPECT_LE(in_flight, holds) << "stage " << p << "\n" << s.text();
      for (size_t j = i + 1; j < computes.size(); ++j) {
        if (wave_of[computes[i].chunk] <= wave_of[computes[j].chunk]) continue;
        EXPECT_TRUE(overlapped) << "stage " << p;
        EXPECT_EQ(computes[i].type, ActionType::kForward) << "stage " << p;
        EXPECT_EQ(computes[j].type, ActionType::kBackward) << "stage " << p;
      }
    }

    for (size_t w = 0; w < step.waves.size(); ++w) {
      std::vector<Action> wave;
      for (const Action& a : computes)
        if (wave_of[a.chunk] == static_cast<int>(w)) wave.push_back(a);
      const int wave_chunks = static_cast<int>(step.waves[w].size());
      int forwards_before_first_backward = 0;
      while (wave[forwards_before_first_backward].type == ActionType::kForward)
        ++forwards_before_first_backward;
      if (options.kind == ScheduleKind::kGPipe) {
        EXPECT_EQ(forwards_before_first_backward, wave_chunks);
        continue;
      }
      if (options.keep_chain_order) continue;  // short-first may need extra forwards
      // Longest chain first: chain lengths never grow along the forward order.
      int k_max = 0, previous = 1 << 30;
      for (const Action& a : wave) {
        if (a.type != ActionType::kForward) continue;
        EXPECT_LE(chain_length[a.chunk], previous);
        previous = chain_length[a.chunk];
        k_max = std::max(k_max, chain_length[a.chunk]);
      }
      // Warm-up w_p forwards, then the steady state's first forward, then the first backward.
      const int warmup = std::min(wave_chunks, (d - 1 - p) + (k_max - 1));
      EXPECT_EQ(forwards_before_first_backward, std::min(wave_chunks, warmup + 1))
          << "stage " << p << "\n"
          << s.text();
      // After the warm-up, forwards and backwards alternate until the forwards run out.
      for (int i = forwards_before_first_backward; i + 1 < static_cast<int>(wave.size()); ++i) {
        const bool forwards_left = std::count_if(wave.begin() + i, wave.end(), [](const Action& a) {
          return a.type == ActionType::kForward;
        });
        if (forwards_left)
          EXPECT_NE(wave[i].type, wave[i + 1].type) << "stage " << p << "\n" << s.text();
      }
    }

    // Communication: each compute's RECV at most one compute ahead of it, its SEND right after it.
    const std::vector<Action>& list = s.stages[p];
    for (size_t i = 0; i < list.size(); ++i) {
      const Action& a = list[i];
      if (a.is_recv()) {
        const ActionType compute =
            a.type == ActionType::kRecvForward ? ActionType::kForward : ActionType::kBackward;
        int computes_between = 0;
        size_t j = i + 1;
        for (; j < list.size() && list[j] != Action{compute, a.chunk}; ++j)
          computes_between += list[j].is_compute();
        ASSERT_LT(j, list.size()) << a.text() << " without its compute, stage " << p;
        EXPECT_LE(computes_between, 1) << a.text() << " posted too early, stage " << p;
      }
      if (a.is_compute()) {
        const bool sends = a.type == ActionType::kForward ? p < d - 1 : p > 0;
        if (sends) {
          ASSERT_LT(i + 1, list.size());
          const ActionType send =
              a.type == ActionType::kForward ? ActionType::kSendForward : ActionType::kSendBackward;
          EXPECT_EQ(list[i + 1], (Action{send, a.chunk}));
        }
        const bool receives = a.type == ActionType::kForward ? p > 0 : p < d - 1;
        const ActionType recv =
            a.type == ActionType::kForward ? ActionType::kRecvForward : ActionType::kRecvBackward;
        EXPECT_EQ(std::count(list.begin(), list.begin() + i, Action{recv, a.chunk}),
                  receives ? 1 : 0);
      }
    }
  }
}

TEST(BuildSchedule, RandomStepsAreValidAndHaveThe1F1BShape) {
  std::mt19937_64 rng(2024);
  int built = 0;
  for (int trial = 0; trial < 250; ++trial) {
    const Step step = testing::random_step(rng);
    for (int d : {1, 2, 3, 4, 8}) {
      for (ScheduleKind kind : {ScheduleKind::kOneFOneB, ScheduleKind::kGPipe}) {
        for (bool keep : {false, true}) {
          for (bool overlap : {false, true}) {
            if (overlap && kind == ScheduleKind::kGPipe) continue;
            ScheduleOptions options;
            options.num_stages = d;
            options.kind = kind;
            options.keep_chain_order = keep;
            options.overlap_waves = overlap;
            const Schedule s = build_schedule(step.chunks, step.waves, options);
            ASSERT_NO_THROW(validate_schedule(s, step.chunks))
                << "trial " << trial << " d=" << d << " gpipe=" << (kind == ScheduleKind::kGPipe)
                << " keep=" << keep << " overlap=" << overlap;
            check_properties(step, s, options);
            if (::testing::Test::HasFailure()) return;
            ++built;
          }
        }
      }
    }
  }
  EXPECT_EQ(built, 250 * 5 * (2 * 2 + 2));  // 1F1B: keep x overlap; GPipe: keep
}

TEST(BuildSchedule, OverlappedWavesFillTheCoolDownWithTheNextWarmUp) {
  const Step step = packed_step(5);
  ScheduleOptions options;
  options.num_stages = 3;
  options.overlap_waves = true;
  const Schedule s = build_schedule(step.chunks, {{0, 1, 2}, {3, 4}}, options);
  // Back to back, stage 0 would run F0 F1 F2 B0 B1 B2 | F3 F4 B3 B4: the next wave's two warm-up
  // forwards take the places before the last two backwards of the first wave's cool-down.
  EXPECT_EQ(joined(computes_of(s.stages[0])), "F0 F1 F2 B0 F3 B1 F4 B2 B3 B4");
  EXPECT_EQ(joined(computes_of(s.stages[1])), "F0 F1 B0 F2 B1 F3 B2 F4 B3 B4");
  EXPECT_EQ(joined(computes_of(s.stages[2])), "F0 B0 F1 B1 F2 B2 F3 B3 F4 B4");  // no cool-down
  EXPECT_NO_THROW(validate_schedule(s, step.chunks));
}

TEST(BuildSchedule, ShortFirstPullsInTheForwardsALongerChainNeeds) {
  StepBuilder b;
  b.add_chain(1);  // 0
  b.add_chain(3);  // 1 2 3
  Step& step = b.step();
  ScheduleOptions options;
  options.num_stages = 2;
  options.keep_chain_order = true;
  const Schedule s = build_schedule(step.chunks, {{0, 1, 2, 3}}, options);
  // k_max is the first chain's length (1): stage 1 has no warm-up, but B3 needs F1..F3 first.
  EXPECT_EQ(joined(computes_of(s.stages[1])), "F0 B0 F1 F2 F3 B3 B2 B1");
  EXPECT_EQ(joined(computes_of(s.stages[0])), "F0 F1 B0 F2 F3 B3 B2 B1");
  EXPECT_NO_THROW(validate_schedule(s, step.chunks));
}

}  // namespace
}  // namespace infinipipe

namespace infinipipe {
namespace {

// ZB-H1 (ScheduleOptions::zero_bubble): every B but the first stage's gets its W on its stage,
// right before a compute (after the B's SEND_B and the RECV posted after it), stage p holding back
// at most p of them; without W actions the schedule is the same, and the W actions added change
// nothing else.
void check_weight_actions(const Schedule& plain, const Schedule& split) {
  ASSERT_EQ(plain.num_stages(), split.num_stages());
  for (int p = 0; p < split.num_stages(); ++p) {
    std::vector<Action> without;
    int held = 0, most_held = 0;
    std::map<int, int> backward_at;
    const std::vector<Action>& list = split.stages[p];
    for (size_t i = 0; i < list.size(); ++i) {
      const Action& a = list[i];
      if (a.type != ActionType::kWeight) {
        without.push_back(a);
        if (a.type == ActionType::kBackward) backward_at[a.chunk] = static_cast<int>(i), ++held;
        most_held = std::max(most_held, held);
        continue;
      }
      --held;
      ASSERT_TRUE(backward_at.count(a.chunk)) << a.text() << " before its B, stage " << p;
      // Right before a compute or another W, or at the end of the list.
      ASSERT_TRUE(i + 1 == list.size() || list[i + 1].is_compute())
          << a.text() << " before " << list[i + 1].text() << ", stage " << p;
    }
    if (p == 0) EXPECT_EQ(split.stages[0], plain.stages[0]);
    const int weights = static_cast<int>(std::count_if(
        list.begin(), list.end(), [](const Action& a) { return a.type == ActionType::kWeight; }));
    EXPECT_EQ(weights, p == 0 ? 0 : static_cast<int>(backward_at.size())) << "stage " << p;
    if (p == 0) continue;
    EXPECT_EQ(held, 0) << "stage " << p << " ends with W actions not run";
    EXPECT_LE(most_held, p + 1) << "stage " << p << " holds back more than " << p;
    EXPECT_EQ(without, plain.stages[p]) << "stage " << p;
  }
}

TEST(ZeroBubble, H1GivesEveryBackwardItsWeightActionOnRandomSteps) {
  std::mt19937_64 rng(39);
  for (int trial = 0; trial < 120; ++trial) {
    const Step step = testing::random_step(rng);
    for (int d : {1, 2, 3, 4, 8}) {
      for (bool overlap : {false, true}) {
        ScheduleOptions options;
        options.num_stages = d;
        options.overlap_waves = overlap;
        const Schedule plain = build_schedule(step.chunks, step.waves, options);
        options.zero_bubble = ZeroBubble::kH1;
        const Schedule split = build_schedule(step.chunks, step.waves, options);
        ASSERT_NO_THROW(validate_schedule(split, step.chunks))
            << "trial " << trial << " d=" << d << " overlap=" << overlap;
        check_weight_actions(plain, split);
        if (::testing::Test::HasFailure()) return;
      }
    }
  }
}

TEST(ZeroBubble, H1OnTextbookPackedChunks) {
  const Step step = testing::packed_step(4);
  ScheduleOptions options;
  options.num_stages = 3;
  options.zero_bubble = ZeroBubble::kH1;
  const Schedule s = build_schedule(step.chunks, {{0, 1, 2, 3}}, options);
  // Stage 0 keeps its backwards whole; stage 1 holds one W back, the last stage two.
  EXPECT_EQ(joined(computes_of(s.stages[0])), "F0 F1 F2 B0 F3 B1 B2 B3");
  EXPECT_EQ(joined(computes_of(s.stages[1])), "F0 F1 B0 F2 B1 W0 F3 B2 W1 B3 W2 W3");
  EXPECT_EQ(joined(computes_of(s.stages[2])), "F0 B0 F1 B1 F2 B2 W0 F3 B3 W1 W2 W3");
  // The W goes after the B's send and the receive posted after it.
  EXPECT_NE(joined(s.stages[1]).find("B1 SEND_B1 RECV_B2 W0 F3 SEND_F3"), std::string::npos)
      << joined(s.stages[1]);
}

TEST(ZeroBubble, H2IsH1OnALongerWarmUpOnRandomSteps) {
  // Every extra warm-up the planner tries (1 to d-1 on stage 0), and ZB-H2's own.
  std::mt19937_64 rng(41);
  for (int trial = 0; trial < 60; ++trial) {
    const Step step = testing::random_step(rng);
    for (int d : {1, 2, 3, 4, 8}) {
      for (int extra = 0; extra < std::max(2, d); ++extra) {
        for (bool overlap : {false, true}) {
          ScheduleOptions options;
          options.num_stages = d;
          options.overlap_waves = overlap;
          options.extra_warmup = extra == 0 ? h2_extra_warmup(d) : extra;
          const Schedule plain = build_schedule(step.chunks, step.waves, options);
          ASSERT_NO_THROW(validate_schedule(plain, step.chunks))
              << "trial " << trial << " d=" << d << " extra=" << extra;
          options.zero_bubble = ZeroBubble::kH2;
          options.extra_warmup = extra;
          const Schedule split = build_schedule(step.chunks, step.waves, options);
          ASSERT_NO_THROW(validate_schedule(split, step.chunks))
              << "trial " << trial << " d=" << d << " extra=" << extra << " overlap=" << overlap;
          check_weight_actions(plain, split);
          if (::testing::Test::HasFailure()) return;
        }
      }
    }
  }
}

TEST(ZeroBubble, H2OnTextbookPackedChunks) {
  const Step step = testing::packed_step(6);
  ScheduleOptions options;
  options.num_stages = 4;
  options.zero_bubble = ZeroBubble::kH2;
  ASSERT_EQ(h2_extra_warmup(4), 2);
  const Schedule s = build_schedule(step.chunks, {{0, 1, 2, 3, 4, 5}}, options);
  // 1F1B's warm-up d-1-p, plus 2 on stage 0 and 1 on stage 1: each stage runs one forward more
  // before its first backward.
  EXPECT_EQ(joined(computes_of(s.stages[0])), "F0 F1 F2 F3 F4 F5 B0 B1 B2 B3 B4 B5");
  EXPECT_EQ(joined(computes_of(s.stages[1])),
            "F0 F1 F2 F3 B0 F4 B1 W0 F5 B2 W1 B3 W2 B4 W3 B5 W4 W5");
  EXPECT_EQ(joined(computes_of(s.stages[2])),
            "F0 F1 B0 F2 B1 F3 B2 W0 F4 B3 W1 F5 B4 W2 B5 W3 W4 W5");
  EXPECT_EQ(joined(computes_of(s.stages[3])),
            "F0 B0 F1 B1 F2 B2 F3 B3 W0 F4 B4 W1 F5 B5 W2 W3 W4 W5");
  // Stage 1 posts its forwards' receives 1 + 2 x 2 computes ahead (stage 0 runs 2 more), so
  // stage 0's first five SENDs find theirs posted.
  EXPECT_EQ(joined(s.stages[1]).rfind("RECV_F0 RECV_F1 RECV_F2 RECV_F3 RECV_F4 F0 SEND_F0", 0), 0u)
      << joined(s.stages[1]);
}

TEST(ZeroBubble, ModesHaveTextFormsAndAScheduleIsSplitOnce) {
  EXPECT_EQ(parse_zero_bubble(to_string(ZeroBubble::kH1)), ZeroBubble::kH1);
  EXPECT_EQ(parse_zero_bubble(to_string(ZeroBubble::kH2)), ZeroBubble::kH2);
  EXPECT_EQ(parse_zero_bubble(to_string(ZeroBubble::kOff)), ZeroBubble::kOff);
  EXPECT_THROW(parse_zero_bubble("h3"), Error);
  const Step step = testing::packed_step(2);
  ScheduleOptions options;
  options.num_stages = 2;
  options.zero_bubble = ZeroBubble::kH1;
  const Schedule split = build_schedule(step.chunks, {{0, 1}}, options);
  EXPECT_THROW(with_weight_actions(split, ZeroBubble::kH1), Error);
  EXPECT_EQ(with_weight_actions(split, ZeroBubble::kOff).text(), split.text());
}

}  // namespace
}  // namespace infinipipe
