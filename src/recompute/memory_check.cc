// Byte-exact check of a recompute assignment against every moment of every stage, and the
// message that tells a user which sequence does not fit where.
#include "infinipipe/recompute/memory_check.h"

#include <algorithm>
#include <string>

#include "infinipipe/core/error.h"
#include "infinipipe/core/memory_text.h"
#include "problem_tools.h"

namespace infinipipe {

MemoryCheck::MemoryCheck(const Schedule& schedule, const std::vector<Chunk>& chunks,
                         const CostModel& cost, double budget_bytes)
    : schedule_(schedule), chunks_(chunks), cost_(cost), budget_(budget_bytes) {
  moments_.reserve(schedule.num_stages());
  for (int p = 0; p < schedule.num_stages(); ++p)
    moments_.push_back(binding_moments(schedule, p, chunks, cost));
  unrecomputed_ = held_bytes(Recompute{});
}

std::vector<std::vector<double>> MemoryCheck::held_bytes(const Recompute& recompute) const {
  std::vector<std::vector<double>> held(moments_.size());
  for (int p = 0; p < static_cast<int>(moments_.size()); ++p) {
    held[p].resize(chunks_.size());
    for (size_t k = 0; k < chunks_.size(); ++k)
      held[p][k] = cost_.activation_bytes(chunks_[k], p,
                                          recompute_layers(recompute, p, static_cast<int>(k)));
  }
  return held;
}

double MemoryCheck::bytes_at(int stage, int moment,
                             const std::vector<std::vector<double>>& held) const {
  // moment_bytes' sum, in its order, with each chunk's bytes looked up once rather than at every
  // moment it is in flight (this check runs for every candidate plan of the planner's sweep).
  const MemoryMoment& m = moments_[stage][moment];
  double bytes = m.fixed_bytes;
  for (int k : m.in_flight) bytes += held[stage][k];
  return bytes;
}

MemoryViolation MemoryCheck::worst_violation(const Recompute& recompute, MemoryPeaks* peaks) const {
  MemoryViolation worst;
  const std::vector<std::vector<double>> held = held_bytes(recompute);
  const int stages = static_cast<int>(moments_.size());
  if (peaks) {
    // The simulator's peak (Simulation::measure_memory): the first largest moment, or the model
    // state alone when the stage has none.
    peaks->bytes.resize(stages);
    peaks->action_index.assign(stages, -1);
    for (int p = 0; p < stages; ++p) peaks->bytes[p] = stage_model_state_bytes(schedule_, p, cost_);
  }
  for (int p = 0; p < stages; ++p)
    for (int m = 0; m < static_cast<int>(moments_[p].size()); ++m) {
      const double bytes = bytes_at(p, m, held);
      if (peaks && (m == 0 || bytes > peaks->bytes[p])) {
        peaks->bytes[p] = bytes;
        peaks->action_index[p] = moments_[p][m].action_index;
      }
      if (bytes <= budget_) continue;
      // The planner's rows accept being short by a tolerance relative to what they need, so
      // the check does too (see problem_tools.h); the unrecomputed bytes bound that need.
      if (bytes <= budget_ + row_tolerance(bytes_at(p, m, unrecomputed_) - budget_)) continue;
      if (worst.stage < 0 || bytes - budget_ > worst.excess_bytes) {
        worst.stage = p;
        worst.moment = m;
        worst.bytes = bytes;
        worst.excess_bytes = bytes - budget_;
      }
    }
  return worst;
}

Recompute MemoryCheck::uniform_recompute(int layers) const {
  Recompute recompute(schedule_.num_stages());
  for (int p = 0; p < schedule_.num_stages(); ++p)
    recompute[p].assign(chunks_.size(), std::min(layers, cost_.layers(p)));
  return recompute;
}

Recompute MemoryCheck::full_recompute() const {
  int most = 0;
  for (int p = 0; p < schedule_.num_stages(); ++p) most = std::max(most, cost_.layers(p));
  return uniform_recompute(most);
}

std::string MemoryCheck::describe(const MemoryViolation& violation,
                                  const std::string& what_failed) const {
  check(violation.stage >= 0, "MemoryCheck::describe: no violation to describe");
  const MemoryMoment& moment = moments_[violation.stage][violation.moment];
  const Action& action = schedule_.stages[violation.stage][moment.action_index];

  const Slice* longest = nullptr;
  for (int k : moment.in_flight)
    for (const Slice& s : chunks_[k].slices)
      if (longest == nullptr || s.seq_length > longest->seq_length) longest = &s;

  // Zero bubble: chunks between their B and their W are fixed bytes too (memory_walk.h).
  const std::vector<Action>& list = schedule_.stages[violation.stage];
  const bool weights_pending = std::any_of(
      list.begin(), list.end(), [](const Action& a) { return a.type == ActionType::kWeight; });
  std::string text = what_failed + ": stage " + std::to_string(violation.stage) + " at " +
                     action.text() + " (action " + std::to_string(moment.action_index) +
                     " of its list) needs " + gib_text(violation.bytes) + " against a budget of " +
                     gib_text(budget_) + " (" + gib_text(moment.fixed_bytes) +
                     " of model state, K/V buffers, backward workspace" +
                     (weights_pending ? " and chunks whose W is still to run" : "") +
                     "; chunks in flight: " + std::to_string(moment.in_flight.size()) + ")";
  if (longest != nullptr)
    text += "; the longest sequence in flight is sequence " + std::to_string(longest->seq) + " (" +
            std::to_string(longest->seq_length) + " tokens)";
  text +=
      ". Use more pipeline stages, a larger memory budget, or a larger slice count K so long "
      "sequences are cut into smaller slices.";
  return text;
}

}  // namespace infinipipe
