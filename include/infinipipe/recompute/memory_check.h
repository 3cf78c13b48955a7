#pragma once
// Checks a recompute assignment against every memory moment of every stage, in bytes, with the
// same moments and sums as the simulator (binding_moments + moment_bytes), and explains failures.
// Internal to the checkpoint part.
#include <string>
#include <vector>

#include "infinipipe/core/chunk.h"
#include "infinipipe/core/recompute.h"
#include "infinipipe/cost/cost_model.h"
#include "infinipipe/schedule/action.h"
#include "infinipipe/sim/memory_timeline.h"

namespace infinipipe {

struct MemoryViolation {
  int stage = -1;           // -1: none
  int moment = -1;          // index into the stage's moments
  double bytes = 0;         // at that moment
  double excess_bytes = 0;  // bytes - budget
};

class MemoryCheck {
 public:
  MemoryCheck(const Schedule& schedule, const std::vector<Chunk>& chunks, const CostModel& cost,
              double budget_bytes);

  // The moment furthest over the budget, or stage -1 when every moment fits. With `peaks`, also
  // each stage's largest moment (MemoryPeaks), from the same sums.
  MemoryViolation worst_violation(const Recompute& recompute, MemoryPeaks* peaks = nullptr) const;
  bool fits(const Recompute& recompute) const { return worst_violation(recompute).stage < 0; }

  // Every layer of every chunk recomputed on every stage.
  Recompute full_recompute() const;
  Recompute uniform_recompute(int layers) const;  // min(layers, layers of the stage)
  Recompute no_recompute() const { return uniform_recompute(0); }

  // For a violation: the stage, the action, the longest sequence in flight, bytes against the
  // budget in GiB, and what to change. `what_failed` opens the message.
  std::string describe(const MemoryViolation& violation, const std::string& what_failed) const;

  const std::vector<std::vector<MemoryMoment>>& moments() const { return moments_; }

 private:
  std::vector<std::vector<double>> held_bytes(const Recompute& recompute) const;  // [stage][chunk]
  double bytes_at(int stage, int moment, const std::vector<std::vector<double>>& held) const;

  const Schedule& schedule_;
  const std::vector<Chunk>& chunks_;
  const CostModel& cost_;
  double budget_;
  std::vector<std::vector<MemoryMoment>> moments_;  // [stage]
  std::vector<std::vector<double>>
      unrecomputed_;  // activation bytes without recompute, [stage][chunk]
};

}  // namespace infinipipe
