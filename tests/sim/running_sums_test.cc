// The memory walk's running sums against the straightforward sums they replace (docs/planning.md,
// "Search speed"): the fixed bytes of every moment equal the sum of the open buffers in opening
// order, and the simulator's peak equals the largest moment_bytes over the binding moments, bit
// for bit, on cost models whose bytes are whole numbers (the running sum) and not (summed again).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <random>
#include <set>
#include <string>

#include "infinipipe/core/memory_text.h"
#include "infinipipe/sim/memory_timeline.h"
#include "infinipipe/sim/simulator.h"
#include "sim/random_step.h"

namespace infinipipe {
namespace {

using test::random_step;
using test::RandomStep;

// The tiny model's analytic cost, and the same with its bytes scaled: by a fraction (bytes no
// longer whole) or by 2^40 (whole, but the sums pass 2^53).
CostModel scaled_cost(int stages, double kv_scale, double activation_scale) {
  const ModelShape shape = ModelShape::builtin("tiny");
  CostCoefficients c = CostCoefficients::analytic(shape, Hardware::builtin("cpu"));
  c.kv_bytes *= kv_scale;
  c.activation_bytes *= activation_scale;
  return CostModel(shape, even_layer_split(shape.layers, stages), c);
}

// Every moment's fixed bytes as the walk once summed them: model state, then the open K/V
// buffers in opening order, then the open dK/dV buffers, then the posted receives' buffers
// (whole numbers of bytes here, so their running sum is exact), then the workspace.
std::vector<double> fixed_in_opening_order(const RandomStep& step, int p, const CostModel& cost) {
  std::vector<int> kv, grad;
  std::set<int> closed;
  auto has = [](const std::vector<int>& list, int seq) {
    return std::find(list.begin(), list.end(), seq) != list.end();
  };
  std::vector<double> fixed;
  std::map<std::pair<bool, int>, double> posted;  // (for a backward, chunk) -> bytes
  double receiving = 0;
  for (const Action& a : step.schedule.stages[p]) {
    if (a.is_recv()) {
      const double message = cost.message_bytes(step.chunks[a.chunk]);
      EXPECT_EQ(message, std::floor(message));
      posted[{a.type == ActionType::kRecvBackward, a.chunk}] += message;
      receiving += message;
    }
    if (!a.is_compute()) continue;
    const Chunk& chunk = step.chunks[a.chunk];
    const bool backward = a.type == ActionType::kBackward;
    receiving -= posted[{backward, a.chunk}];
    posted[{backward, a.chunk}] = 0;
    for (const Slice& s : chunk.slices) {
      if (s.whole()) continue;
      if (!backward && !has(kv, s.seq) && !closed.count(s.seq)) kv.push_back(s.seq);
      if (backward && has(kv, s.seq) && !has(grad, s.seq)) grad.push_back(s.seq);
    }
    double bytes = cost.model_state_bytes(p);
    for (int seq : kv) bytes += cost.kv_buffer_bytes(step.lengths[seq], p);
    for (int seq : grad) bytes += cost.kv_buffer_bytes(step.lengths[seq], p);
    bytes += receiving;
    if (backward) bytes += cost.backward_workspace_bytes(chunk, p);
    fixed.push_back(bytes);
    if (!backward) continue;
    for (const Slice& s : chunk.slices)
      if (!s.whole() && s.start == 0) {
        kv.erase(std::remove(kv.begin(), kv.end(), s.seq), kv.end());
        grad.erase(std::remove(grad.begin(), grad.end(), s.seq), grad.end());
        closed.insert(s.seq);
      }
  }
  return fixed;
}

struct Scale {
  double kv, activation;
};
const Scale kScales[] = {{1, 1}, {4.0 / 3, 1.1}, {1099511627776.0, 1099511627776.0}};

TEST(RunningSums, FixedBytesEqualTheSumInOpeningOrder) {
  std::mt19937_64 rng(5);
  const ModelShape shape = ModelShape::builtin("tiny");
  int split_slices = 0;
  for (int trial = 0; trial < 60; ++trial) {
    const RandomStep step = random_step(rng, trial, shape);
    for (const Scale& scale : kScales) {
      const CostModel cost = scaled_cost(step.d, scale.kv, scale.activation);
      SCOPED_TRACE("trial " + std::to_string(trial) + " kv x" + std::to_string(scale.kv));
      for (int p = 0; p < step.d; ++p) {
        const std::vector<double> expected = fixed_in_opening_order(step, p, cost);
        const std::vector<MemoryMoment> moments =
            memory_moments(step.schedule, p, step.chunks, cost);
        ASSERT_EQ(moments.size(), expected.size());
        for (size_t i = 0; i < expected.size(); ++i)
          EXPECT_EQ(moments[i].fixed_bytes, expected[i]) << "moment " << i;
      }
    }
    for (const Chunk& chunk : step.chunks)
      for (const Slice& s : chunk.slices) split_slices += !s.whole();
  }
  EXPECT_GT(split_slices, 0) << "no buffer was ever open: the test shows nothing";
  // The unscaled model's bytes are whole numbers: the running sum is what was tested.
  const CostModel cost = scaled_cost(2, 1, 1);
  for (double bytes : {cost.model_state_bytes(0), cost.kv_buffer_bytes(12345, 1)})
    EXPECT_EQ(bytes, std::floor(bytes));
}

// The simulator's peak skips the exact sum of moments whose running sum is clearly below the
// peak so far: the peak, and the moment it names, are the straightforward ones.
TEST(RunningSums, SimulatedPeakIsTheLargestBindingMoment) {
  std::mt19937_64 rng(9);
  const ModelShape shape = ModelShape::builtin("tiny");
  for (int trial = 0; trial < 60; ++trial) {
    const RandomStep step = random_step(rng, trial, shape);
    for (const Scale& scale : kScales) {
      const CostModel cost = scaled_cost(step.d, scale.kv, scale.activation);
      SCOPED_TRACE("trial " + std::to_string(trial) + " kv x" + std::to_string(scale.kv));
      Recompute recompute(step.d, std::vector<int>(step.chunks.size(), 0));
      for (int p = 0; p < step.d; ++p)
        for (int& layers : recompute[p])
          layers = std::uniform_int_distribution<int>(0, cost.layers(p))(rng);
      SimOptions options;
      options.memory_budget_bytes = 1;  // every stage over: the message names each peak
      options.record_events = trial % 2 == 0;
      const SimResult r = simulate(step.schedule, step.chunks, cost, recompute, options);
      for (int p = 0; p < step.d; ++p) {
        double peak = 0;
        int first = -1;
        for (const MemoryMoment& m : binding_moments(step.schedule, p, step.chunks, cost)) {
          const double bytes = moment_bytes(m, p, step.chunks, cost, recompute);
          if (first < 0 || bytes > peak) {
            peak = bytes;
            first = m.action_index;
          }
        }
        ASSERT_GE(first, 0);
        EXPECT_EQ(r.peak_memory_bytes[p], peak) << "stage " << p;
        const std::string named = "stage " + std::to_string(p) + " needs " + gib_text(peak) +
                                  " at " + step.schedule.stages[p][first].text() + ",";
        EXPECT_NE(r.over_budget_message.find(named), std::string::npos)
            << named << " not in: " << r.over_budget_message;
      }
    }
  }
}

}  // namespace
}  // namespace infinipipe
