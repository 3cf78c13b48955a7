#pragma once
// Hand-built steps for the checkpoint planner tests: chunks made directly (no sequence
// processor), scheduled by the real 1F1B scheduler, costed by a hand-made cost model, with a
// budget placed between what full recompute and no recompute need.
#include <algorithm>
#include <numeric>
#include <random>
#include <utility>
#include <vector>

#include "infinipipe/core/chunk.h"
#include "infinipipe/core/recompute.h"
#include "infinipipe/cost/cost_model.h"
#include "infinipipe/schedule/scheduler.h"
#include "infinipipe/sim/memory_timeline.h"
#include "support/small_shape.h"

namespace infinipipe::checkpoint_test {

// Test inputs with round numbers, not a model of any hardware: per layer a token costs 10 us
// plus a quadratic attention term, a chunk 100 us; a layer keeps 4 KiB per token, a
// checkpointed one 512 B, K/V are 1 KiB of the 4 KiB.
inline CostCoefficients test_coefficients() {
  CostCoefficients c;
  c.a1 = 1e-9;
  c.a2 = 1e-5;
  c.b = 1e-4;
  c.backward_ratio = 2;
  c.activation_bytes = 4096;
  c.checkpoint_bytes = 512;
  c.kv_bytes = 1024;
  c.logits_bytes = 2048;
  c.model_state_bytes_per_param = 16;
  c.p2p_bytes_per_token = 16;
  c.p2p_bandwidth = 1e9;
  c.p2p_latency_s = 1e-5;
  return c;
}

// Over a small decoder: only its parameter count (model state, negligible here) reaches the
// planner.
inline CostModel test_cost(std::vector<int> layers_per_stage) {
  return test_support::hand_made_cost("checkpoint-test", std::move(layers_per_stage),
                                      test_coefficients());
}

struct Step {
  std::vector<Chunk> chunks;
  std::vector<Wave> waves;
  Schedule schedule;
};

inline Chunk whole(int seq, int64_t tokens) { return Chunk{{Slice{seq, 0, tokens, tokens}}}; }

// `count` whole sequences of `tokens` tokens, a chunk each.
inline std::vector<Chunk> equal_chunks(int count, int64_t tokens) {
  std::vector<Chunk> chunks;
  for (int k = 0; k < count; ++k) chunks.push_back(whole(k, tokens));
  return chunks;
}

// The real scheduler's 1F1B schedule of the step's waves on `stages` stages.
inline Schedule schedule_of(const Step& step, int stages) {
  ScheduleOptions options;
  options.num_stages = stages;
  return build_schedule(step.chunks, step.waves, options);
}

// `chunks` in one wave, scheduled 1F1B on `stages` stages.
inline Step one_wave_step(std::vector<Chunk> chunks, int stages) {
  Step step;
  step.chunks = std::move(chunks);
  step.waves = {Wave(step.chunks.size())};
  std::iota(step.waves[0].begin(), step.waves[0].end(), 0);
  step.schedule = schedule_of(step, stages);
  return step;
}

// 0-3 long sequences cut into 2-4 equal slices (a chunk each, the tail topped up with short
// sequences when room is left), short sequences packed up to a token cap, chains dealt into one
// or two waves, scheduled 1F1B on `stages` stages.
inline Step random_step(std::mt19937_64& rng, int stages) {
  const int64_t cap = 2048;
  Step step;
  std::vector<int64_t> shorts(std::uniform_int_distribution<int>(1, 10)(rng));
  for (int64_t& s : shorts) s = std::uniform_int_distribution<int64_t>(64, 1500)(rng);
  size_t next_short = 0;
  // Long sequences are 0 .. longs-1, short ones follow.
  const int longs = std::uniform_int_distribution<int>(0, 3)(rng);
  auto short_id = [&](size_t s) { return longs + static_cast<int>(s); };
  for (int seq = 0; seq < longs; ++seq) {
    const int slices = std::uniform_int_distribution<int>(2, 4)(rng);
    const int64_t length = slices * std::uniform_int_distribution<int64_t>(800, 2000)(rng);
    const int64_t slice = length / slices;
    for (int i = 0; i < slices; ++i) {
      const int64_t end = i + 1 == slices ? length : (i + 1) * slice;
      Chunk chunk{{Slice{seq, i * slice, end, length}}};
      for (; i + 1 == slices && next_short < shorts.size() &&
             chunk.tokens() + shorts[next_short] <= cap;
           ++next_short)
        chunk.slices.push_back({short_id(next_short), 0, shorts[next_short], shorts[next_short]});
      step.chunks.push_back(chunk);
    }
  }
  Chunk open;
  for (size_t s = next_short; s < shorts.size(); ++s) {
    if (open.tokens() + shorts[s] > cap) {
      step.chunks.push_back(open);
      open = Chunk{};
    }
    open.slices.push_back({short_id(s), 0, shorts[s], shorts[s]});
  }
  if (!open.slices.empty()) step.chunks.push_back(open);

  const std::vector<std::vector<int>> all_chains = chains(step.chunks);
  const int num_waves =
      std::min<int>(std::uniform_int_distribution<int>(1, 2)(rng), all_chains.size());
  step.waves.assign(num_waves, {});
  for (size_t c = 0; c < all_chains.size(); ++c) {
    const int w = c < static_cast<size_t>(num_waves)
                      ? static_cast<int>(c)
                      : std::uniform_int_distribution<int>(0, num_waves - 1)(rng);
    step.waves[w].insert(step.waves[w].end(), all_chains[c].begin(), all_chains[c].end());
  }
  step.schedule = schedule_of(step, stages);
  return step;
}

// Highest memory of any moment of any stage under `recompute`, computed directly from the
// memory timeline (independently of the planner's own check).
inline double peak_bytes(const Step& step, const CostModel& cost, const Recompute& recompute) {
  double peak = 0;
  for (int p = 0; p < step.schedule.num_stages(); ++p)
    for (const MemoryMoment& m : memory_moments(step.schedule, p, step.chunks, cost))
      peak = std::max(peak, moment_bytes(m, p, step.chunks, cost, recompute));
  return peak;
}

inline Recompute uniform_layers(const CostModel& cost, int num_chunks, int layers) {
  Recompute r(cost.num_stages());
  for (int p = 0; p < cost.num_stages(); ++p)
    r[p].assign(num_chunks, std::min(layers, cost.layers(p)));
  return r;
}

inline Recompute full_layers(const CostModel& cost, int num_chunks) {
  int most = 0;
  for (int l : cost.layers_per_stage()) most = std::max(most, l);
  return uniform_layers(cost, num_chunks, most);
}

// A budget `tightness` of the way from what full recompute needs (1) to what no recompute
// needs (0), so a feasible plan always exists and some recompute is needed when tightness > 0.
inline double budget_between(const Step& step, const CostModel& cost, double tightness) {
  const double low =
      peak_bytes(step, cost, full_layers(cost, static_cast<int>(step.chunks.size())));
  const double high = peak_bytes(step, cost, Recompute{});
  return high - tightness * (high - low);
}

}  // namespace infinipipe::checkpoint_test
