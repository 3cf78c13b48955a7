#pragma once
#include <vector>

namespace infinipipe {

// recompute[stage][chunk]: how many of the stage's layers the chunk checkpoints (keeps only the
// layer input) and re-runs in its backward. Empty means no recompute anywhere.
using Recompute = std::vector<std::vector<int>>;

inline int recompute_layers(const Recompute& r, int stage, int chunk) {
  return r.empty() ? 0 : r[stage][chunk];
}

}  // namespace infinipipe
