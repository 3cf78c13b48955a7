#pragma once
// Cutting token runs into pieces of equal per-layer forward cost. The split mesh of EPP itself
// (cost_balanced_mesh) is declared in sequence_processor.h; this is the variant for several
// sequences laid end to end, which Seq1F1B cuts.
#include <cstdint>
#include <vector>

#include "infinipipe/cost/cost_model.h"

namespace infinipipe {

// Sequences of the given lengths laid end to end, each attending only to itself (a packed
// micro-batch), cut into `pieces` runs of near-equal per-layer forward cost. Returns positions
// 0 = x_0 < x_1 < ... < x_pieces = total tokens; needs 1 <= pieces <= total tokens.
std::vector<int64_t> equal_cost_cuts(const std::vector<int64_t>& lengths, int pieces,
                                     const CostModel& cost);

}  // namespace infinipipe
