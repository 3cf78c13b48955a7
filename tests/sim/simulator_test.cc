#include "infinipipe/sim/simulator.h"

#include <algorithm>
#include <cstdio>
#include <map>
#include <random>
#include <string>

#include <gtest/gtest.h>

#include "infinipipe/core/error.h"
#include "infinipipe/schedule/placement.h"
#include "infinipipe/sim/memory_timeline.h"
#include "sim/random_step.h"
#include "sim/sim_fixtures.h"

namespace infinipipe {
namespace {

using test::B;
using test::F;

const SimEvent* find_event(const SimResult& r, int stage, const std::string& name) {
  for (const SimEvent& e : r.events)
    if (e.stage == stage && e.name == name) return &e;
  return nullptr;
}

TEST(Simulator, OneStageStepTimeIsTheSumOfItsCompute) {
  // 3 layers, 1 ms per token per layer forward, backward twice that: chunks of 10, 25 and 7
  // tokens take 3 * 42 * 1 ms forward and twice that backward, 0.378 s in all.
  CostModel cost = test::simple_cost({3});
  std::vector<Chunk> chunks = {test::whole(0, 10), test::whole(1, 25), test::whole(2, 7)};
  Schedule s;
  s.stages = {{F(0), F(1), B(0), F(2), B(1), B(2)}};
  SimResult r = simulate(s, chunks, cost, {}, {});
  EXPECT_NEAR(r.step_time_s, 0.378, 1e-12);
  EXPECT_NEAR(r.busy_s[0], 0.378, 1e-12);
  EXPECT_NEAR(r.bubble_fraction[0], 0.0, 1e-12);
  EXPECT_EQ(r.events.size(), 6u);
}

// Uniform stages (2 layers each, no embedding or head time), equal chunks of 50 tokens:
// tf = 2 * 50 * 1 ms = 0.1 s, tb = 0.2 s, free point-to-point.
constexpr double kTf = 0.1, kTb = 0.2;

TEST(Simulator, OneFOneBMatchesTheClassicFormula) {
  for (int d : {1, 2, 3, 4, 8}) {
    for (int m : {1, 2, d, 2 * d + 1, 3 * d}) {
      CostModel cost = test::simple_cost(std::vector<int>(d, 2));
      SimResult r = simulate(test::one_f_one_b(d, m), test::equal_chunks(m, 50), cost, {}, {});
      EXPECT_NEAR(r.step_time_s, (m + d - 1) * (kTf + kTb), 1e-9) << "d=" << d << " m=" << m;
      double expected_bubble = (d - 1.0) / (m + d - 1.0);
      for (int p = 0; p < d; ++p) EXPECT_NEAR(r.bubble_fraction[p], expected_bubble, 1e-9);
    }
  }
}

TEST(Simulator, GPipeMatchesTheClassicFormula) {
  for (int d : {1, 2, 4, 8}) {
    for (int m : {1, 3, 2 * d}) {
      CostModel cost = test::simple_cost(std::vector<int>(d, 2));
      SimResult r = simulate(test::gpipe(d, m), test::equal_chunks(m, 50), cost, {}, {});
      EXPECT_NEAR(r.step_time_s, (m + d - 1) * (kTf + kTb), 1e-9) << "d=" << d << " m=" << m;
    }
  }
}

TEST(Simulator, PointToPointTimeAddsOnTheCriticalPath) {
  // Stage layers 1 and 3, one chunk of 10 tokens, 0.5 ms per token on the link:
  // tf0 10 ms + p2p 5 ms + tf1 30 ms + tb1 60 ms + p2p 5 ms + tb0 20 ms = 130 ms.
  CostModel cost = test::simple_cost({1, 3}, 0.5e-3);
  SimResult r = simulate(test::one_f_one_b(2, 1), {test::whole(0, 10)}, cost, {}, {});
  EXPECT_NEAR(r.step_time_s, 0.130, 1e-12);
  const SimEvent* send = find_event(r, 0, "SEND_F0");
  ASSERT_NE(send, nullptr);
  EXPECT_EQ(send->category, "send");
  EXPECT_NEAR(send->start_s, 0.010, 1e-12);
  EXPECT_NEAR(send->end_s, 0.015, 1e-12);
  EXPECT_NEAR(find_event(r, 1, "F0")->start_s, 0.015, 1e-12);
  EXPECT_NEAR(find_event(r, 0, "B0")->start_s, 0.110, 1e-12);
}

TEST(Simulator, TransfersOnOneLinkAreSerialised) {
  // Stage 0 forwards two 10-token chunks in 10 ms each; each transfer takes 50 ms. The second
  // transfer waits for the link: it starts at 60 ms (not 20) and lands at 110 ms.
  CostModel cost = test::simple_cost({1, 1}, 5e-3);
  Schedule s;
  s.stages = {
      {F(0), Action{ActionType::kSendForward, 0}, F(1), Action{ActionType::kSendForward, 1}},
      {Action{ActionType::kRecvForward, 0}, Action{ActionType::kRecvForward, 1}, F(0), F(1)}};
  SimResult r = simulate(s, test::equal_chunks(2, 10), cost, {}, {});
  EXPECT_NEAR(find_event(r, 0, "SEND_F1")->start_s, 0.060, 1e-12);
  EXPECT_NEAR(find_event(r, 1, "F1")->start_s, 0.110, 1e-12);
  EXPECT_NEAR(r.step_time_s, 0.120, 1e-12);
}

TEST(Simulator, SendWaitsUntilThePeerPostsItsReceive) {
  // Stage 1 posts RECV_F1 only after its F0, at 10 (F0 on stage 0) + 50 (link) + 10 = 70 ms,
  // so stage 0 is held in SEND_F1 until then and its F2 starts at 70 ms, not 20 ms.
  CostModel cost = test::simple_cost({1, 1}, 5e-3);
  Schedule s;
  s.stages = {
      {F(0), Action{ActionType::kSendForward, 0}, F(1), Action{ActionType::kSendForward, 1}, F(2)},
      {Action{ActionType::kRecvForward, 0}, F(0), Action{ActionType::kRecvForward, 1}, F(1)}};
  SimResult r = simulate(s, test::equal_chunks(3, 10), cost, {}, {});
  EXPECT_NEAR(find_event(r, 0, "F2")->start_s, 0.070, 1e-12);
  EXPECT_NEAR(find_event(r, 1, "F1")->start_s, 0.120, 1e-12);
}

TEST(Simulator, RecomputeAddsItsLayerTimeAndShowsAsAnEvent) {
  // 4 layers, one 10-token chunk: forward 40 ms, backward 80 ms, recomputing 3 layers adds
  // 3 * 10 ms before the backward proper.
  CostModel cost = test::simple_cost({4});
  Schedule s;
  s.stages = {{F(0), B(0)}};
  SimResult r = simulate(s, {test::whole(0, 10)}, cost, Recompute{{3}}, {});
  EXPECT_NEAR(r.step_time_s, 0.150, 1e-12);
  EXPECT_NEAR(r.recompute_s[0], 0.030, 1e-12);
  EXPECT_NEAR(r.busy_s[0], 0.150, 1e-12);
  const SimEvent* rec = find_event(r, 0, "recompute B0");
  const SimEvent* bwd = find_event(r, 0, "B0");
  ASSERT_NE(rec, nullptr);
  ASSERT_NE(bwd, nullptr);
  EXPECT_EQ(rec->category, "recompute");
  EXPECT_NEAR(rec->start_s, 0.040, 1e-12);
  EXPECT_NEAR(rec->end_s, 0.070, 1e-12);
  EXPECT_NEAR(bwd->start_s, 0.070, 1e-12);
  EXPECT_NEAR(bwd->end_s, 0.150, 1e-12);
}

TEST(Simulator, RecomputeOnTheLastBackwardOfStageZeroDelaysTheStep) {
  const int d = 2, m = 3;
  CostModel cost = test::simple_cost({2, 2});
  std::vector<Chunk> chunks = test::equal_chunks(m, 50);
  SimResult plain = simulate(test::one_f_one_b(d, m), chunks, cost, {}, {});
  Recompute recompute(d, std::vector<int>(m, 0));
  recompute[0][m - 1] = 1;
  SimResult with = simulate(test::one_f_one_b(d, m), chunks, cost, recompute, {});
  EXPECT_NEAR(with.step_time_s - plain.step_time_s, cost.layer_forward_time(chunks[m - 1]), 1e-12);
  EXPECT_NEAR(with.total_recompute_s(), cost.layer_forward_time(chunks[m - 1]), 1e-12);
}

TEST(Simulator, PeakMemoryOfTwoStageOneFOneB) {
  // Stage 0 runs F0 F1 B0 F2 B1 F3 B2 B3: two chunks in flight from F1 on; its peak is during
  // a backward with two chunks held. Stage 1 alternates F and B: one chunk at a time.
  CostModel cost = test::simple_cost({2, 2});
  std::vector<Chunk> chunks = test::equal_chunks(4, 10);
  SimResult r = simulate(test::one_f_one_b(2, 4), chunks, cost, {}, {});
  const double act0 = cost.activation_bytes(chunks[0], 0, 0),
               act1 = cost.activation_bytes(chunks[0], 1, 0);
  const double ws0 = cost.backward_workspace_bytes(chunks[0], 0);
  const double ws1 = cost.backward_workspace_bytes(chunks[0], 1);
  const double ms0 = cost.model_state_bytes(0), ms1 = cost.model_state_bytes(1);
  EXPECT_DOUBLE_EQ(r.peak_memory_bytes[0], ms0 + 2 * act0 + ws0);
  EXPECT_DOUBLE_EQ(r.peak_memory_bytes[1], ms1 + act1 + ws1);

  std::vector<double> expected0 = {ms0 + act0,           ms0 + 2 * act0,       ms0 + 2 * act0 + ws0,
                                   ms0 + 2 * act0,       ms0 + 2 * act0 + ws0, ms0 + 2 * act0,
                                   ms0 + 2 * act0 + ws0, ms0 + act0 + ws0};
  ASSERT_EQ(r.memory[0].size(), expected0.size());
  const std::vector<std::string> names = {"F0", "F1", "B0", "F2", "B1", "F3", "B2", "B3"};
  for (size_t i = 0; i < expected0.size(); ++i) {
    EXPECT_DOUBLE_EQ(r.memory[0][i].second, expected0[i]) << i;
    const SimEvent* e = find_event(r, 0, names[i]);
    EXPECT_DOUBLE_EQ(r.memory[0][i].first, names[i][0] == 'F' ? e->end_s : e->start_s) << names[i];
  }
}

TEST(Simulator, OverBudgetNamesTheStageTheMomentAndTheBytes) {
  // Activations large enough for GiB figures: 1e8 bytes per token per layer.
  CostCoefficients c = test::simple_coefficients();
  c.activation_bytes = 1e8;
  const CostModel cost = test::cost_with(c, {2, 2});
  std::vector<Chunk> chunks = test::equal_chunks(4, 10);
  Schedule s = test::one_f_one_b(2, 4);
  SimResult free_run = simulate(s, chunks, cost, {}, {});
  EXPECT_FALSE(free_run.over_budget);
  // Stage 0 holds two chunks, stage 1 one: stage 0 peaks higher.
  ASSERT_GT(free_run.peak_memory_bytes[0], free_run.peak_memory_bytes[1]);

  SimOptions options;
  options.memory_budget_bytes = (free_run.peak_memory_bytes[0] + free_run.peak_memory_bytes[1]) / 2;
  SimResult r = simulate(s, chunks, cost, {}, options);
  ASSERT_TRUE(r.over_budget);
  EXPECT_NE(r.over_budget_message.find("stage 0"), std::string::npos) << r.over_budget_message;
  EXPECT_EQ(r.over_budget_message.find("stage 1"), std::string::npos) << r.over_budget_message;
  EXPECT_NE(r.over_budget_message.find("B0"), std::string::npos)
      << r.over_budget_message;  // first peak moment
  char peak[32], budget[32];
  std::snprintf(peak, sizeof peak, "%.2f GiB", r.peak_memory_bytes[0] / (1024.0 * 1024 * 1024));
  std::snprintf(budget, sizeof budget, "%.2f GiB",
                options.memory_budget_bytes / (1024.0 * 1024 * 1024));
  EXPECT_NE(r.over_budget_message.find(peak), std::string::npos) << r.over_budget_message;
  EXPECT_NE(r.over_budget_message.find(budget), std::string::npos) << r.over_budget_message;

  options.memory_budget_bytes = free_run.peak_memory_bytes[0];
  EXPECT_FALSE(simulate(s, chunks, cost, {}, options).over_budget);
}

TEST(Simulator, DeadlockIsReportedWithTheStuckStepMarked) {
  // Stage 0 waits for chunk 0's gradient before it sends chunk 0's activation.
  CostModel cost = test::simple_cost({1, 1});
  Schedule s;
  s.stages = {
      {F(0), Action{ActionType::kRecvBackward, 0}, B(0), Action{ActionType::kSendForward, 0}},
      {Action{ActionType::kRecvForward, 0}, F(0), B(0), Action{ActionType::kSendBackward, 0}}};
  try {
    simulate(s, {test::whole(0, 10)}, cost, {}, {});
    FAIL() << "expected a deadlock";
  } catch (const Error& e) {
    std::string message = e.what();
    EXPECT_NE(message.find("deadlock"), std::string::npos) << message;
    EXPECT_NE(message.find(">>"), std::string::npos) << message;
    EXPECT_NE(message.find("stage 0 is stuck at B0"), std::string::npos) << message;
    EXPECT_NE(message.find("stage 1 is stuck at F0"), std::string::npos) << message;
  }
}

TEST(Simulator, MessagesMatchInOrderOnALink) {
  CostModel cost = test::simple_cost({1, 1});
  Schedule s;
  s.stages = {
      {F(0), Action{ActionType::kSendForward, 0}, F(1), Action{ActionType::kSendForward, 1}},
      {Action{ActionType::kRecvForward, 1}, Action{ActionType::kRecvForward, 0}, F(0), F(1)}};
  try {
    simulate(s, test::equal_chunks(2, 10), cost, {}, {});
    FAIL() << "expected a mismatch";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("SEND_F0 meets RECV_F1"), std::string::npos) << e.what();
  }
}

TEST(Simulator, RejectsAScheduleForAnotherPipeline) {
  CostModel cost = test::simple_cost({1, 1, 1});
  EXPECT_THROW(simulate(test::one_f_one_b(2, 2), test::equal_chunks(2, 10), cost, {}, {}), Error);
}

// Longest path through the compute dependencies alone (stage order, activations down,
// gradients up), each compute starting as soon as they allow: a lower bound for the simulation
// with free transfers (equal to it when no SEND waits for its RECV).
std::vector<std::vector<double>> compute_only_end_times(const Schedule& s,
                                                        const std::vector<Chunk>& chunks,
                                                        const CostModel& cost,
                                                        const Recompute& recompute) {
  const int d = s.num_stages(), m = static_cast<int>(chunks.size());
  std::vector<std::vector<double>> f_end(d, std::vector<double>(m, -1)), b_end = f_end;
  std::vector<size_t> pc(d, 0);
  std::vector<double> clock(d, 0);
  for (bool moved = true; moved;) {
    moved = false;
    for (int p = 0; p < d; ++p) {
      for (; pc[p] < s.stages[p].size(); ++pc[p]) {
        const Action& a = s.stages[p][pc[p]];
        if (!a.is_compute()) continue;
        double ready = clock[p];
        if (a.type == ActionType::kForward) {
          if (p > 0 && f_end[p - 1][a.chunk] < 0) break;
          if (p > 0) ready = std::max(ready, f_end[p - 1][a.chunk]);
          clock[p] = f_end[p][a.chunk] = ready + cost.forward_time(chunks[a.chunk], p);
        } else {
          if (p < d - 1 && b_end[p + 1][a.chunk] < 0) break;
          if (p < d - 1) ready = std::max(ready, b_end[p + 1][a.chunk]);
          clock[p] = b_end[p][a.chunk] =
              ready +
              cost.backward_time(chunks[a.chunk], p, recompute_layers(recompute, p, a.chunk));
        }
        moved = true;
      }
    }
  }
  return b_end;
}

// Random pipelines: the event times obey every dependency of the semantics, busy time is the
// cost model's compute, memory equals the timeline's moments, and turning events off changes
// nothing else.
TEST(Simulator, RandomPipelinesRespectEveryDependency) {
  std::mt19937_64 rng(20240531);
  for (int trial = 0; trial < 300; ++trial) {
    const int d = std::uniform_int_distribution<int>(1, 6)(rng);
    const int m = std::uniform_int_distribution<int>(1, 12)(rng);
    std::vector<int> layers(d);
    for (int& l : layers) l = std::uniform_int_distribution<int>(1, 3)(rng);
    const double p2p = std::uniform_real_distribution<double>(0, 2e-3)(rng);
    CostModel cost = test::simple_cost(layers, p2p);
    std::vector<Chunk> chunks;
    for (int c = 0; c < m; ++c)
      chunks.push_back(test::whole(c, std::uniform_int_distribution<int>(1, 100)(rng)));
    Recompute recompute(d, std::vector<int>(m));
    for (int p = 0; p < d; ++p)
      for (int c = 0; c < m; ++c)
        recompute[p][c] = std::uniform_int_distribution<int>(0, layers[p])(rng);
    const bool use_gpipe = trial % 3 == 0;
    Schedule s = use_gpipe ? test::gpipe(d, m) : test::one_f_one_b(d, m);
    SCOPED_TRACE("trial " + std::to_string(trial) + "\n" + s.text());

    SimResult r = simulate(s, chunks, cost, recompute, {});
    std::map<std::pair<int, std::string>, const SimEvent*> by_name;
    double last_end = 0;
    for (const SimEvent& e : r.events) {
      by_name[{e.stage, e.name}] = &e;
      EXPECT_LE(e.start_s, e.end_s);
      last_end = std::max(last_end, e.end_s);
    }
    EXPECT_NEAR(r.step_time_s, last_end, 1e-12);
    {
      // With free transfers a compute can start no earlier than the compute-only longest path
      // allows; it can start later when a SEND waits for its peer to post the RECV.
      CostModel free_links = test::simple_cost(layers, 0);
      SimResult z = simulate(s, chunks, free_links, recompute, {});
      auto b_end = compute_only_end_times(s, chunks, free_links, recompute);
      double longest = 0;
      for (int c = 0; c < m; ++c) longest = std::max(longest, b_end[0][c]);
      EXPECT_GE(z.step_time_s, longest - 1e-9);
      EXPECT_LE(z.step_time_s, r.step_time_s + 1e-9);  // transfer time never shortens a step
      for (const SimEvent& e : z.events)
        if (e.category == "backward")
          EXPECT_GE(e.end_s, b_end[e.stage][std::stoi(e.name.substr(1))] - 1e-9);
    }
    for (int p = 0; p < d; ++p) {
      EXPECT_GE(r.bubble_fraction[p], -1e-12);
      EXPECT_LE(r.bubble_fraction[p], 1.0);
      double busy = 0, rec = 0, previous_end = 0;
      for (const Action& a : s.stages[p]) {
        if (!a.is_compute()) continue;
        const Chunk& chunk = chunks[a.chunk];
        const SimEvent* e = by_name.at({p, a.text()});
        if (a.type == ActionType::kForward) {
          busy += cost.forward_time(chunk, p);
          EXPECT_GE(e->start_s, previous_end - 1e-12);
          if (p > 0)
            EXPECT_GE(e->start_s,
                      by_name.at({p - 1, a.text()})->end_s + cost.p2p_time(chunk, p - 1) - 1e-12);
        } else {
          int k = recompute[p][a.chunk];
          busy += cost.backward_time(chunk, p, k);
          rec += k * cost.layer_forward_time(chunk);
          double start = k > 0 ? by_name.at({p, "recompute " + a.text()})->start_s : e->start_s;
          EXPECT_GE(start, previous_end - 1e-12);
          EXPECT_GE(start, by_name.at({p, "F" + std::to_string(a.chunk)})->end_s - 1e-12);
          if (p < d - 1)
            EXPECT_GE(start,
                      by_name.at({p + 1, a.text()})->end_s + cost.p2p_time(chunk, p) - 1e-12);
        }
        previous_end = e->end_s;
      }
      EXPECT_NEAR(r.busy_s[p], busy, 1e-9);
      EXPECT_NEAR(r.recompute_s[p], rec, 1e-9);

      std::vector<MemoryMoment> moments = memory_moments(s, p, chunks, cost);
      ASSERT_EQ(moments.size(), r.memory[p].size());
      double peak = 0;
      for (size_t i = 0; i < moments.size(); ++i) {
        double bytes = moment_bytes(moments[i], p, chunks, cost, recompute);
        EXPECT_EQ(r.memory[p][i].second, bytes);  // bit for bit: planner and simulator agree
        if (i > 0) EXPECT_GE(r.memory[p][i].first, r.memory[p][i - 1].first);
        peak = std::max(peak, bytes);
      }
      EXPECT_EQ(r.peak_memory_bytes[p], peak);
    }

    SimOptions quiet;
    quiet.record_events = false;
    SimResult q = simulate(s, chunks, cost, recompute, quiet);
    EXPECT_TRUE(q.events.empty());
    EXPECT_EQ(q.step_time_s, r.step_time_s);
    EXPECT_EQ(q.busy_s, r.busy_s);
    EXPECT_EQ(q.peak_memory_bytes, r.peak_memory_bytes);
    for (const auto& timeline : q.memory) EXPECT_TRUE(timeline.empty());  // traces only
  }
}

// Virtual stages (docs/design.md, "Virtual stages"): both stages of a 2-stage 1F1B on one rank.
// Nothing waits on a link or a peer, so the step is all the compute, one action at a time, and the
// transfers between the two stages are free even on a slow link.
TEST(Simulator, TwoStagesOnOneRankRunOneActionAtATimeWithFreeHandovers) {
  const CostModel cost = test::simple_cost({1, 3}, 0.5e-3);
  const std::vector<Chunk> chunks = test::equal_chunks(4, 10);
  const Schedule apart = test::one_f_one_b(2, 4);
  const Schedule together = place_on_ranks(apart, {0, 0}, 4);
  const SimResult r = simulate(together, chunks, cost, {}, {});
  const double compute = r.busy_s[0] + r.busy_s[1];
  EXPECT_NEAR(r.step_time_s, compute, 1e-12);
  EXPECT_EQ(r.p2p_s, (std::vector<double>{0, 0}));
  EXPECT_NEAR(r.bubble_fraction[0], 0, 1e-12);
  EXPECT_NEAR(r.bubble_fraction[1], 0, 1e-12);
  const SimResult two_ranks = simulate(apart, chunks, cost, {}, {});
  EXPECT_EQ(two_ranks.busy_s, r.busy_s);
  EXPECT_GT(two_ranks.p2p_s[0], 0);
  EXPECT_LT(two_ranks.step_time_s, r.step_time_s);  // two ranks overlap their work
}

TEST(Simulator, ARanksMemoryIsItsStagesAddedUpOverTime) {
  const CostModel cost = test::simple_cost({2, 2});
  const std::vector<Chunk> chunks = test::equal_chunks(1, 10);
  const Schedule s = place_on_ranks(test::one_f_one_b(2, 1), {0, 0}, 1);
  const SimResult r = simulate(s, chunks, cost, {}, {});
  // Moments in time: stage 0's F0, stage 1's F0, stage 1's B0, stage 0's B0. At stage 1's B0
  // stage 0 still holds what its F0 left; at stage 0's B0, stage 1 is taken to hold its B0's
  // bytes (rank_memory_peaks' upper bound).
  ASSERT_EQ(r.memory[0].size(), 2u);
  ASSERT_EQ(r.memory[1].size(), 2u);
  const double expected = std::max(r.memory[0][0].second + r.memory[1][1].second,
                                   r.memory[0][1].second + r.memory[1][1].second);
  ASSERT_EQ(r.rank_peak_memory_bytes.size(), 1u);
  EXPECT_DOUBLE_EQ(r.rank_peak_memory_bytes[0], expected);
  EXPECT_GT(expected, std::max(r.peak_memory_bytes[0], r.peak_memory_bytes[1]));
  SimOptions options;
  options.memory_budget_bytes = std::max(r.peak_memory_bytes[0], r.peak_memory_bytes[1]);
  const SimResult over = simulate(s, chunks, cost, {}, options);
  ASSERT_TRUE(over.over_budget);
  EXPECT_NE(over.over_budget_message.find("rank 0 needs"), std::string::npos)
      << over.over_budget_message;
  EXPECT_EQ(over.over_budget_message.find("stage "), std::string::npos)
      << over.over_budget_message;  // each stage alone fits
  options.memory_budget_bytes = expected;
  EXPECT_FALSE(simulate(s, chunks, cost, {}, options).over_budget);
  EXPECT_TRUE(
      simulate(test::one_f_one_b(2, 1), chunks, cost, {}, {}).rank_peak_memory_bytes.empty());
}

TEST(Simulator, ARankWaitingOnItselfIsADeadlock) {
  const CostModel cost = test::simple_cost({1, 1});
  Schedule s = test::one_f_one_b(1 + 1, 1);
  ASSERT_EQ(s.text(), "stage 0: RECV_B0 F0 SEND_F0 B0\nstage 1: RECV_F0 F0 B0 SEND_B0\n");
  s.ranks = {{0, 0, 0, 1, 1, 1, 1, 0}};  // stage 0 sends before the rank posts stage 1's receive
  try {
    simulate(s, test::equal_chunks(1, 10), cost, {}, {});
    FAIL() << "expected a deadlock";
  } catch (const Error& e) {
    const std::string message = e.what();
    EXPECT_NE(message.find("no rank can make progress; rank 0: stage 0 is stuck at SEND_F0"),
              std::string::npos)
        << message;
  }
}

// Random V-shaped steps on 1-4 ranks: a rank runs one compute at a time, a compute starts after
// what it needs (plus the link's time between ranks, none within one), and a rank's memory lies
// between its largest stage's peak and the sum of its stages' peaks.
TEST(Simulator, RandomVShapedStepsKeepEveryDependencyAndOneComputePerRank) {
  std::mt19937_64 rng(91);
  for (int trial = 0; trial < 100; ++trial) {
    const int ranks = std::uniform_int_distribution<int>(1, 4)(rng);
    const int d = 2 * ranks;
    const int m = std::uniform_int_distribution<int>(1, 10)(rng);
    std::vector<int> layers(d);
    for (int& l : layers) l = std::uniform_int_distribution<int>(1, 3)(rng);
    const CostModel cost =
        test::simple_cost(layers, std::uniform_real_distribution<double>(0, 2e-3)(rng));
    std::vector<Chunk> chunks;
    for (int c = 0; c < m; ++c)
      chunks.push_back(test::whole(c, std::uniform_int_distribution<int>(1, 100)(rng)));
    const std::vector<int> rank_of = v_shape(ranks);
    const Schedule s = place_on_ranks(test::one_f_one_b(d, m), rank_of, m);
    SCOPED_TRACE("trial " + std::to_string(trial) + "\n" + s.text());
    const SimResult r = simulate(s, chunks, cost, {}, {});
    std::map<std::pair<int, std::string>, const SimEvent*> by_name;
    std::vector<std::vector<std::pair<double, double>>> computes(ranks);
    for (const SimEvent& e : r.events) {
      by_name[{e.stage, e.name}] = &e;
      if (e.category != "send") computes[rank_of[e.stage]].push_back({e.start_s, e.end_s});
    }
    for (auto& spans : computes) {
      std::sort(spans.begin(), spans.end());
      for (size_t i = 1; i < spans.size(); ++i)
        EXPECT_GE(spans[i].first, spans[i - 1].second - 1e-12);
    }
    for (int p = 0; p < d; ++p)
      for (int c = 0; c < m; ++c) {
        const std::string k = std::to_string(c);
        const double f = by_name.at({p, "F" + k})->start_s, b = by_name.at({p, "B" + k})->start_s;
        EXPECT_GE(b, by_name.at({p, "F" + k})->end_s - 1e-12);
        if (p > 0) {
          const double link = rank_of[p] == rank_of[p - 1] ? 0 : cost.p2p_time(chunks[c], p - 1);
          EXPECT_GE(f, by_name.at({p - 1, "F" + k})->end_s + link - 1e-12);
        }
        if (p < d - 1) {
          const double link = rank_of[p] == rank_of[p + 1] ? 0 : cost.p2p_time(chunks[c], p);
          EXPECT_GE(b, by_name.at({p + 1, "B" + k})->end_s + link - 1e-12);
        }
      }
    ASSERT_EQ(r.rank_peak_memory_bytes.size(), static_cast<size_t>(ranks));
    for (int q = 0; q < ranks; ++q) {
      const int a = q, b = d - 1 - q;
      EXPECT_GE(r.rank_peak_memory_bytes[q],
                std::max(r.peak_memory_bytes[a], r.peak_memory_bytes[b]) - 1e-3);
      EXPECT_LE(r.rank_peak_memory_bytes[q],
                r.peak_memory_bytes[a] + r.peak_memory_bytes[b] + 1e-3);
    }
    SimOptions quiet;
    quiet.record_events = false;
    const SimResult q = simulate(s, chunks, cost, {}, quiet);
    EXPECT_EQ(q.step_time_s, r.step_time_s);
    EXPECT_EQ(q.rank_peak_memory_bytes, r.rank_peak_memory_bytes);
    for (const auto& timeline : q.memory) EXPECT_TRUE(timeline.empty());
    if (::testing::Test::HasFailure()) return;
  }
}

TEST(Simulator, SpreadHeadChargesHOnItsStageAndTheTransfersAsSends) {
  // Two stages of one layer, the head one layer's forward, sends 1 ms per token: chunk 0's head
  // runs on stage 0. F0 on stage 0: 10 ms; on stage 1 (without the head) 10 ms; SEND_H 10 ms;
  // H0 on stage 0: 30 ms (forward and twice that backward); SEND_HG 10 ms; B0 on stage 1 20 ms;
  // SEND_B 10 ms; B0 on stage 0 20 ms.
  CostCoefficients c = test::simple_coefficients(1e-3);
  c.head_s_per_token = 1e-3;
  c.logits_bytes = 1000;
  // A trainer with head replicas on every stage (the spread head's).
  const CostModel cost = test::cost_with(c, {1, 1}).with_head_replicas();
  const std::vector<Chunk> chunks = {test::whole(0, 10)};
  Schedule s;
  s.stages = {{F(0),
               {ActionType::kSendForward, 0},
               {ActionType::kRecvHead, 0, 1},
               {ActionType::kRecvBackward, 0},
               {ActionType::kHead, 0},
               {ActionType::kSendHeadGrad, 0, 1},
               B(0)},
              {{ActionType::kRecvForward, 0},
               {ActionType::kRecvHeadGrad, 0, 0},
               F(0),
               {ActionType::kSendHead, 0, 0},
               B(0),
               {ActionType::kSendBackward, 0}}};
  SimOptions options;
  options.record_starts = true;
  const SimResult r = simulate(s, chunks, cost, {}, options);
  // Then both stages all-reduce the head replicas' gradients (one group of one rank each: no
  // other gradient sync), which ends the step.
  const double head_sync = cost.head_replica_sync_time();
  EXPECT_GT(head_sync, 0);
  EXPECT_EQ(r.gradient_sync_s, (std::vector<double>{head_sync, head_sync}));
  EXPECT_NEAR(r.step_time_s,
              0.010 + 0.010 + 0.010 + 0.010 + 0.030 + 0.010 + 0.020 + 0.010 + 0.020 + head_sync,
              1e-9);
  // Without replicas (a model that keeps no head on other stages) nothing is synced.
  const SimResult plain = simulate(s, chunks, test::cost_with(c, {1, 1}), {}, options);
  EXPECT_EQ(plain.gradient_sync_s, (std::vector<double>{0.0, 0.0}));
  EXPECT_NEAR(plain.step_time_s, r.step_time_s - head_sync, 1e-9);
  EXPECT_NEAR(r.busy_s[0], 0.010 + 0.030 + 0.020, 1e-12);
  EXPECT_NEAR(r.busy_s[1], 0.010 + 0.020, 1e-12);
  const SimEvent* h = find_event(r, 0, "H0");
  ASSERT_NE(h, nullptr);
  EXPECT_EQ(h->category, "head");
  EXPECT_NEAR(h->start_s, 0.040, 1e-12);
  EXPECT_NEAR(r.start_s[0][4], 0.040, 1e-12);
  // Stage 0 holds the head's replica and, while H0 runs, the chunk's logits, the hidden state it
  // received and the buffer its RECV_B0 posted.
  const double state = cost.model_state_bytes(0) + cost.head_replica_bytes();
  EXPECT_GT(cost.message_bytes(chunks[0]), 0);
  EXPECT_NEAR(r.peak_memory_bytes[0],
              state + cost.activation_bytes(chunks[0], 0, 0) + cost.head_logits_bytes(chunks[0]) +
                  2 * cost.message_bytes(chunks[0]),
              1e-6);
  EXPECT_EQ(stage_model_state_bytes(s, 0, cost), state);
  EXPECT_EQ(stage_model_state_bytes(s, 1, cost), cost.model_state_bytes(1));
  // The trainer builds the replica whatever the step's heads: a step whose heads all run on the
  // last stage still holds it on stage 0; a model without replicas holds it only where H runs.
  Schedule last_only = s;
  std::vector<Action>& stage0 = last_only.stages[0];
  stage0.erase(std::remove_if(stage0.begin(), stage0.end(),
                              [](const Action& a) {
                                return a.type == ActionType::kHead ||
                                       a.type == ActionType::kRecvHead ||
                                       a.type == ActionType::kSendHeadGrad;
                              }),
               stage0.end());
  EXPECT_EQ(stage_model_state_bytes(last_only, 0, cost), state);
  const CostModel no_replicas = test::cost_with(c, {1, 1});
  EXPECT_EQ(stage_model_state_bytes(last_only, 0, no_replicas), no_replicas.model_state_bytes(0));
  EXPECT_EQ(stage_model_state_bytes(s, 0, no_replicas), state);
}

TEST(Simulator, AVirtualHeadStageRunsEveryHead) {
  // One real stage of one layer and the virtual head stage: F0 10 ms without the head, the
  // virtual F0 (the whole head) 30 ms, B0 20 ms; free sends.
  CostCoefficients c = test::simple_coefficients();
  c.head_s_per_token = 1e-3;
  const CostModel cost = test::cost_with(c, {1});
  const std::vector<Chunk> chunks = {test::whole(0, 10)};
  Schedule s;
  s.stages = {{F(0), {ActionType::kSendForward, 0}, {ActionType::kRecvBackward, 0}, B(0)},
              {{ActionType::kRecvForward, 0}, F(0), B(0), {ActionType::kSendBackward, 0}}};
  SimOptions options;
  options.virtual_head_stage = true;
  const SimResult r = simulate(s, chunks, cost, {}, options);
  EXPECT_NEAR(r.step_time_s, 0.060, 1e-12);
  EXPECT_NEAR(r.busy_s[1], 0.030, 1e-12);
  EXPECT_THROW(simulate(s, chunks, cost, {}, {}), Error);  // two stages, a one-stage model
}

TEST(Simulator, SequenceParallelismAddsAlltoallsAndDividesCompute) {
  // LLaMA-7B on 2 stages, 3 chunks of 4096 tokens in 1F1B; with d_s = 8 per stage each rank
  // computes an eighth and runs its all-to-alls, counted per stage; sends are counted by sender.
  ParallelLayout sp;
  sp.sequence = 8;
  const ModelShape shape = ModelShape::builtin("llama-7b");
  const Hardware hw = Hardware::builtin("a800");
  const CostModel one = CostModel::analytic(shape, hw, 2),
                  eight = CostModel::analytic(shape, hw, 2, sp);
  const std::vector<Chunk> chunks = test::equal_chunks(3, 4096);
  const Schedule s = test::one_f_one_b(2, 3);
  const Recompute recompute = {{0, 2, 0}, {0, 0, 0}};
  const SimResult r1 = simulate(s, chunks, one, recompute, {});
  const SimResult r8 = simulate(s, chunks, eight, recompute, {});
  for (int p = 0; p < 2; ++p) {
    EXPECT_EQ(r1.alltoall_s[p], 0);
    double alltoall = 0;
    for (int c = 0; c < 3; ++c) alltoall += eight.alltoall_time(chunks[c], p, recompute[p][c]);
    EXPECT_NEAR(r8.alltoall_s[p], alltoall, 1e-12);
    EXPECT_GT(r8.alltoall_s[p], 0);
    // Forward sends from stage 0, backward sends from stage 1, one per chunk each.
    EXPECT_NEAR(r8.p2p_s[p], 3 * eight.p2p_time(chunks[0], 0), 1e-12);
    EXPECT_NEAR(r1.p2p_s[p], 3 * one.p2p_time(chunks[0], 0), 1e-12);
  }
  EXPECT_NEAR(r8.recompute_s[0], eight.recompute_time(chunks[1], 0, 2), 1e-12);
  EXPECT_LT(r8.step_time_s, r1.step_time_s / 4);
  EXPECT_GT(r8.step_time_s, r1.step_time_s / 8);
}

TEST(Simulator, TheStepEndsWithTheLastStagesGradientSync) {
  // One stage of LLaMA-7B on d_s = 8 ranks, never idle: the step is its compute and all-to-alls,
  // then its gradient sync (ZeRO-1), which is not a bubble.
  ParallelLayout sp8;
  sp8.sequence = 8;
  const CostModel cost =
      CostModel::analytic(ModelShape::builtin("llama-7b"), Hardware::builtin("a800"), 1, sp8);
  const SimResult r =
      simulate(test::one_f_one_b(1, 2), test::equal_chunks(2, 4096), cost, {{0, 0}}, {});
  ASSERT_GT(cost.gradient_sync_time(0), 0);
  EXPECT_EQ(r.gradient_sync_s[0], cost.gradient_sync_time(0));
  EXPECT_NEAR(r.step_time_s, r.busy_s[0] + cost.gradient_sync_time(0), 1e-12);
  EXPECT_NEAR(r.bubble_fraction[0], 0, 1e-12);
}

// The simulator takes a chunk's forward and backward costs from the stage before (after) when
// the two stages' costs are alike (CostModel::chunk_costs_alike) rather than asking the cost
// model again: every stage's busy, recompute and all-to-all time is still the sum of the cost
// model's own numbers, in the order the stage runs them, bit for bit. Random EPP steps on 1-6
// stages of uneven layers (alike and not), with random recompute, without and with sequence
// parallelism over nodes of 3 GPUs (all-to-all links that differ between stages).
TEST(Simulator, ComputeCostsAreTheCostModelsBitForBit) {
  std::mt19937_64 rng(23);
  const ModelShape shape = ModelShape::builtin("tiny");
  ParallelLayout sp;
  sp.sequence = 2;
  sp.gpus_per_node = 3;
  int alike = 0;
  for (int trial = 0; trial < 80; ++trial) {
    const test::RandomStep step = test::random_step(rng, trial, shape);
    for (const ParallelLayout& layout : {ParallelLayout{}, sp}) {
      const CostModel cost = CostModel::analytic(shape, Hardware::builtin("cpu"), step.d, layout);
      Recompute recompute(step.d, std::vector<int>(step.chunks.size(), 0));
      for (int p = 0; p < step.d; ++p)
        for (int& layers : recompute[p])
          if (trial % 3 != 0) layers = std::uniform_int_distribution<int>(0, cost.layers(p))(rng);
      SimOptions options;
      options.record_events = false;
      const SimResult r = simulate(step.schedule, step.chunks, cost, recompute, options);
      SCOPED_TRACE("trial " + std::to_string(trial) + ", d_s " + std::to_string(layout.sequence));
      for (int p = 0; p < step.d; ++p) {
        if (p > 0) alike += cost.chunk_costs_alike(p, p - 1);
        double busy = 0, recomputed = 0, alltoall = 0;
        for (const Action& a : step.schedule.stages[p]) {
          const Chunk& chunk = step.chunks[a.chunk];
          const double layer_forward = cost.layer_forward_time(chunk);
          if (a.type == ActionType::kForward)
            busy += cost.forward_time_with(chunk, p, layer_forward);
          if (a.type != ActionType::kBackward) continue;
          const int layers = recompute[p][a.chunk];
          busy += cost.backward_time_with(chunk, p, layers, layer_forward);
          recomputed += layers > 0 ? cost.recompute_time(chunk, p, layers) : 0.0;
          alltoall += cost.alltoall_time(chunk, p, layers);
        }
        EXPECT_EQ(r.busy_s[p], busy) << "stage " << p;
        EXPECT_EQ(r.recompute_s[p], recomputed) << "stage " << p;
        EXPECT_EQ(r.alltoall_s[p], alltoall) << "stage " << p;
      }
    }
  }
  EXPECT_GT(alike, 50) << "too few alike stages: the test shows little";
}

}  // namespace
}  // namespace infinipipe

namespace infinipipe {
namespace {

using test::B;
using test::F;

// Zero bubble on uniform stages: with the simple cost model a layer's weight gradients are half
// its backward (CostModel::weight_gradient_time), so B = W = F = 0.1 s. ZB-H1's step is then
// m (F + B + W) + (d - 1)(F + B - W) (Qi et al., ICLR 2024, section 3: 1F1B's bubble is
// (d - 1)(F + B + W), ZB-H1's (d - 1)(F + B - W)), against 1F1B's (m + d - 1)(F + B + W).
TEST(Simulator, ZeroBubbleH1MatchesThePublishedBubble) {
  for (int d : {2, 3, 4, 8}) {
    for (int m : {d, 2 * d, 3 * d + 1}) {
      const CostModel cost = test::simple_cost(std::vector<int>(d, 2));
      const std::vector<Chunk> chunks = test::equal_chunks(m, 50);
      const double w = cost.weight_gradient_time(chunks[0], 0);
      ASSERT_NEAR(w, 0.1, 1e-12);
      const Schedule split = with_weight_actions(test::one_f_one_b(d, m), ZeroBubble::kH1);
      const SimResult plain = simulate(test::one_f_one_b(d, m), chunks, cost, {}, {});
      const SimResult zb = simulate(split, chunks, cost, {}, {});
      EXPECT_NEAR(zb.step_time_s, m * 0.3 + (d - 1) * (0.1 + 0.1 - 0.1), 1e-9)
          << "d=" << d << " m=" << m;
      EXPECT_NEAR(plain.step_time_s, (m + d - 1) * 0.3, 1e-9);
      for (int p = 0; p < d; ++p) EXPECT_NEAR(zb.busy_s[p], plain.busy_s[p], 1e-9);
      // The W is an event of its own, the B shorter by as much (on the first stage, B is whole).
      const SimEvent* b0 = find_event(zb, 1, "B0");
      const SimEvent* w0 = find_event(zb, 1, "W0");
      EXPECT_NEAR(find_event(zb, 0, "B0")->end_s - find_event(zb, 0, "B0")->start_s, 0.2, 1e-12);
      EXPECT_EQ(find_event(zb, 0, "W0"), nullptr);
      ASSERT_TRUE(b0 && w0);
      EXPECT_NEAR(b0->end_s - b0->start_s, 0.1, 1e-12);
      EXPECT_NEAR(w0->end_s - w0->start_s, 0.1, 1e-12);
      EXPECT_EQ(w0->category, "weight");
    }
  }
}

TEST(Simulator, AChunkHoldsWhatItsWeightActionNeedsFromItsBackwardToIt) {
  // One stage of 2 layers, both recomputed: F0 holds the checkpoints only; a split B holds what a
  // whole one does and what its W needs (the parameter-feeding nodes' inputs and the gradients
  // that reach them), which the chunk then keeps until its W.
  const CostModel cost = test::simple_cost({2});
  const std::vector<Chunk> chunks = test::equal_chunks(2, 10);
  Schedule s;
  s.stages = {{F(0), F(1), B(0), B(1), {ActionType::kWeight, 1}, {ActionType::kWeight, 0}}};
  const Recompute recompute = {{2, 2}};
  const SimResult r = simulate(s, chunks, cost, recompute, {});
  const double ms = cost.model_state_bytes(0), kept = cost.activation_bytes(chunks[0], 0, 2),
               held =
                   cost.weight_input_bytes(chunks[0], 0) + cost.weight_gradient_bytes(chunks[0], 0),
               ws = cost.backward_workspace_bytes(chunks[0], 0);
  const std::vector<double> expected = {
      ms + kept,     ms + 2 * kept, ms + 2 * kept + ws + held, ms + held + kept + ws + held,
      ms + 2 * held, ms + held};
  ASSERT_EQ(r.memory[0].size(), expected.size());
  for (size_t i = 0; i < expected.size(); ++i)
    EXPECT_DOUBLE_EQ(r.memory[0][i].second, expected[i]) << s.stages[0][i].text();
  EXPECT_DOUBLE_EQ(r.peak_memory_bytes[0],
                   std::max(ms + 2 * kept + ws + held, ms + 2 * held + kept + ws));
  // Without W actions the same chunks never hold more than their checkpoints and a workspace.
  Schedule plain;
  plain.stages = {{F(0), F(1), B(0), B(1)}};
  EXPECT_DOUBLE_EQ(simulate(plain, chunks, cost, recompute, {}).peak_memory_bytes[0],
                   ms + 2 * kept + ws);
}

TEST(Simulator, AWeightActionBeforeItsBackwardIsAnError) {
  const CostModel cost = test::simple_cost({2});
  Schedule s;
  s.stages = {{F(0), {ActionType::kWeight, 0}, B(0)}};
  try {
    simulate(s, test::equal_chunks(1, 10), cost, {}, {});
    FAIL() << "W before B was simulated";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("W0 runs before its B"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace infinipipe
