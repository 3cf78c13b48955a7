#pragma once
// Random EPP steps for the simulator tests (scheduled_test.cc, running_sums_test.cc).
#include <algorithm>
#include <random>
#include <vector>

#include "infinipipe/chunking/sequence_processor.h"
#include "infinipipe/cost/cost_model.h"
#include "infinipipe/schedule/scheduler.h"

namespace infinipipe::test {

// A random EPP step: chunks of a random length mix, split into random waves of whole chains,
// scheduled 1F1B (GPipe every fourth trial) on 1..6 stages of the tiny model.
struct RandomStep {
  int d = 0;
  std::vector<int64_t> lengths;
  std::vector<Chunk> chunks;
  Schedule schedule;
};

inline RandomStep random_step(std::mt19937_64& rng, int trial, const ModelShape& shape) {
  RandomStep step;
  step.d = std::uniform_int_distribution<int>(1, std::min(shape.layers, 6))(rng);
  const CostModel cost = CostModel::analytic(shape, Hardware::builtin("cpu"), step.d);
  std::lognormal_distribution<double> length(6.0, 1.2);
  step.lengths.resize(std::uniform_int_distribution<int>(1, 24)(rng));
  for (int64_t& n : step.lengths)
    n = std::max<int64_t>(1, std::min<int64_t>(20000, static_cast<int64_t>(length(rng))));
  const int k = std::uniform_int_distribution<int>(1, 6)(rng);
  step.chunks = epp_chunks(step.lengths, k, cost);
  std::vector<std::vector<int>> all_chains = chains(step.chunks);
  std::shuffle(all_chains.begin(), all_chains.end(), rng);
  const int num_waves =
      std::uniform_int_distribution<int>(1, std::min<int>(3, all_chains.size()))(rng);
  std::vector<Wave> waves(num_waves);
  for (size_t i = 0; i < all_chains.size(); ++i)
    for (int c : all_chains[i]) waves[i % num_waves].push_back(c);
  ScheduleOptions options;
  options.num_stages = step.d;
  options.kind = trial % 4 == 0 ? ScheduleKind::kGPipe : ScheduleKind::kOneFOneB;
  step.schedule = build_schedule(step.chunks, waves, options);
  return step;
}

}  // namespace infinipipe::test
