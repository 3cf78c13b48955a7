#pragma once
// Best-fit-decreasing bin packing by tokens, shared by every chunking that packs whole pieces.
#include <cstdint>
#include <vector>

namespace infinipipe {

// Packs items of the given sizes into bins of at most `capacity`: largest item first, each into
// the bin with the least room that still holds it, a new bin when none does. Returns each bin's
// item indices in the order they were placed; bins in the order they were opened. Every size
// must be in [1, capacity].
std::vector<std::vector<int>> best_fit_decreasing(const std::vector<int64_t>& sizes,
                                                  int64_t capacity);

}  // namespace infinipipe
