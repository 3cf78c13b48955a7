#pragma once
// Chunk sets built by hand for the schedule tests, so these tests do not depend on the sequence
// processor: a chain of length 1 is a packed chunk, a longer chain is one long sequence cut into
// equal slices, its tail possibly sharing its chunk with whole short sequences (hybrid). And
// schedules of them: the scheduler's, or written by hand as text.
#include <algorithm>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "infinipipe/core/chunk.h"
#include "infinipipe/schedule/scheduler.h"

namespace infinipipe::testing {

struct Step {
  std::vector<Chunk> chunks;
  std::vector<std::vector<int>> chains;  // chunk ids, in slice order, as built
  std::vector<Wave> waves;
};

class StepBuilder {
 public:
  // Appends a chain of `length` chunks (in build order) and returns its chunk ids.
  std::vector<int> add_chain(int length, int short_sequences_in_last = 0) {
    std::vector<int> ids;
    if (length == 1) {
      Chunk c;
      for (int s = 0; s < std::max(1, short_sequences_in_last); ++s)
        c.slices.push_back(whole(10 + s));
      ids.push_back(push(c));
    } else {
      const int seq = next_seq_++;
      const int64_t slice = 100, total = slice * length;
      for (int i = 0; i < length; ++i) {
        Chunk c;
        c.slices.push_back({seq, i * slice, (i + 1) * slice, total});
        if (i == length - 1)
          for (int s = 0; s < short_sequences_in_last; ++s) c.slices.push_back(whole(5 + s));
        ids.push_back(push(c));
      }
    }
    step_.chains.push_back(ids);
    return ids;
  }
  Step& step() { return step_; }

 private:
  Slice whole(int64_t length) { return {next_seq_++, 0, length, length}; }
  int push(const Chunk& c) {
    step_.chunks.push_back(c);
    return static_cast<int>(step_.chunks.size()) - 1;
  }
  Step step_;
  int next_seq_ = 0;
};

// `count` chains of one packed chunk each: chunk ids 0 .. count-1.
inline Step packed_step(int count) {
  StepBuilder builder;
  for (int c = 0; c < count; ++c) builder.add_chain(1);
  return builder.step();
}

// The scheduler's schedule of `waves` on `stages` stages, with the other options at their
// defaults.
inline Schedule schedule_on(int stages, const std::vector<Chunk>& chunks,
                            const std::vector<Wave>& waves) {
  ScheduleOptions options;
  options.num_stages = stages;
  return build_schedule(chunks, waves, options);
}

// A schedule written by hand: per stage its actions' text forms, separated by single spaces
// ("F0 SEND_F0 RECV_B0 B0").
inline Schedule parse_schedule(const std::vector<std::string>& stages) {
  Schedule schedule;
  for (const std::string& line : stages) {
    std::vector<Action>& list = schedule.stages.emplace_back();
    for (size_t p = 0; p < line.size();) {
      const size_t q = std::min(line.find(' ', p), line.size());
      list.push_back(Action::parse(line.substr(p, q - p)));
      p = q + 1;
    }
  }
  return schedule;
}

// Renames chunk ids by a permutation, so that slice order is not id order.
inline void shuffle_ids(Step& step, std::mt19937_64& rng) {
  std::vector<int> new_id(step.chunks.size());
  std::iota(new_id.begin(), new_id.end(), 0);
  std::shuffle(new_id.begin(), new_id.end(), rng);
  std::vector<Chunk> chunks(step.chunks.size());
  for (size_t c = 0; c < chunks.size(); ++c) chunks[new_id[c]] = step.chunks[c];
  step.chunks = chunks;
  for (auto& chain : step.chains)
    for (int& id : chain) id = new_id[id];
  for (auto& wave : step.waves)
    for (int& id : wave) id = new_id[id];
}

// 1-12 chains of 1-6 chunks, ids shuffled, chains dealt at random into 1-3 waves (each wave's
// chunk list in random order; empty waves dropped).
inline Step random_step(std::mt19937_64& rng) {
  StepBuilder builder;
  const int num_chains = std::uniform_int_distribution<int>(1, 12)(rng);
  for (int c = 0; c < num_chains; ++c) {
    const int length = std::uniform_int_distribution<int>(1, 6)(rng);
    builder.add_chain(length, std::uniform_int_distribution<int>(0, 2)(rng));
  }
  Step step = builder.step();
  const int num_waves = std::uniform_int_distribution<int>(1, 3)(rng);
  std::vector<Wave> waves(num_waves);
  for (const auto& chain : step.chains) {
    Wave& w = waves[std::uniform_int_distribution<int>(0, num_waves - 1)(rng)];
    w.insert(w.end(), chain.begin(), chain.end());
  }
  for (Wave& w : waves)
    if (!w.empty()) {
      std::shuffle(w.begin(), w.end(), rng);
      step.waves.push_back(w);
    }
  shuffle_ids(step, rng);
  return step;
}

}  // namespace infinipipe::testing
