#pragma once
// Hand-made cost models, chunks and schedules for the simulator tests: simple enough that
// expected times and bytes follow from the coefficients by hand.
#include <utility>
#include <vector>

#include "infinipipe/core/chunk.h"
#include "infinipipe/cost/cost_model.h"
#include "infinipipe/schedule/action.h"
#include "support/small_shape.h"

namespace infinipipe::test {

// Forward of a chunk on a stage = layers * tokens * 1 ms (linear only, no overhead, no
// embedding or head time), backward = 2 x forward, so stage times are uniform when layers are.
// Test inputs, not a model of any hardware.
inline CostCoefficients simple_coefficients(double p2p_s_per_token = 0) {
  CostCoefficients c;
  c.a2 = 1e-3;
  c.backward_ratio = 2;
  c.activation_bytes = 100;
  c.checkpoint_bytes = 10;
  c.kv_bytes = 20;
  c.model_state_bytes_per_param = 16;
  c.p2p_bytes_per_token = p2p_s_per_token;
  c.p2p_bandwidth = 1;  // so p2p time = tokens * p2p_s_per_token
  return c;
}

// A cost model with the coefficients `c` over a small decoder; only its parameter count (model
// state) matters to the simulator.
inline CostModel cost_with(const CostCoefficients& c, std::vector<int> layers_per_stage) {
  return test_support::hand_made_cost("sim-test", std::move(layers_per_stage), c);
}

inline CostModel simple_cost(std::vector<int> layers_per_stage, double p2p_s_per_token = 0) {
  return cost_with(simple_coefficients(p2p_s_per_token), std::move(layers_per_stage));
}

// A chunk holding one whole sequence.
inline Chunk whole(int seq, int64_t tokens) { return Chunk{{Slice{seq, 0, tokens, tokens}}}; }

inline std::vector<Chunk> equal_chunks(int m, int64_t tokens) {
  std::vector<Chunk> chunks;
  for (int i = 0; i < m; ++i) chunks.push_back(whole(i, tokens));
  return chunks;
}

inline Action F(int c) { return {ActionType::kForward, c}; }
inline Action B(int c) { return {ActionType::kBackward, c}; }

// Adds the communication around per-stage compute lists the way the scheduler does: the RECV a
// compute needs is posted one compute ahead (so a blocking SEND never waits on a stage that is
// itself waiting), and every compute is followed by its SEND.
inline Schedule with_communication(const std::vector<std::vector<Action>>& computes) {
  const int d = static_cast<int>(computes.size());
  Schedule schedule;
  schedule.stages.resize(d);
  for (int p = 0; p < d; ++p) {
    auto& out = schedule.stages[p];
    auto post_recv = [&](const Action& a) {
      if (a.type == ActionType::kForward && p > 0)
        out.push_back({ActionType::kRecvForward, a.chunk});
      if (a.type == ActionType::kBackward && p < d - 1)
        out.push_back({ActionType::kRecvBackward, a.chunk});
    };
    const auto& list = computes[p];
    if (!list.empty()) post_recv(list[0]);
    for (size_t i = 0; i < list.size(); ++i) {
      if (i + 1 < list.size()) post_recv(list[i + 1]);
      out.push_back(list[i]);
      if (list[i].type == ActionType::kForward && p < d - 1)
        out.push_back({ActionType::kSendForward, list[i].chunk});
      if (list[i].type == ActionType::kBackward && p > 0)
        out.push_back({ActionType::kSendBackward, list[i].chunk});
    }
  }
  return schedule;
}

// Classic 1F1B over chunks 0..m-1: stage p warms up with min(d - 1 - p, m) forwards.
inline Schedule one_f_one_b(int d, int m) {
  std::vector<std::vector<Action>> computes(d);
  for (int p = 0; p < d; ++p) {
    int warmup = std::min(d - 1 - p, m);
    int next_f = 0, next_b = 0;
    for (; next_f < warmup; ++next_f) computes[p].push_back(F(next_f));
    while (next_f < m) {
      computes[p].push_back(F(next_f++));
      computes[p].push_back(B(next_b++));
    }
    while (next_b < m) computes[p].push_back(B(next_b++));
  }
  return with_communication(computes);
}

// GPipe: all forwards, then all backwards in reverse order.
inline Schedule gpipe(int d, int m) {
  std::vector<std::vector<Action>> computes(d);
  for (int p = 0; p < d; ++p) {
    for (int c = 0; c < m; ++c) computes[p].push_back(F(c));
    for (int c = m - 1; c >= 0; --c) computes[p].push_back(B(c));
  }
  return with_communication(computes);
}

}  // namespace infinipipe::test
