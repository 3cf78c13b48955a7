#include "infinipipe/cost/profile_grid.h"

#include <algorithm>

#include "infinipipe/core/error.h"

namespace infinipipe {

int timed_runs(int64_t tokens, int repeats, int64_t min_timed_tokens) {
  check(tokens >= 1 && repeats >= 1 && min_timed_tokens >= 0,
        "timed_runs: needs tokens >= 1, repeats >= 1 and min_timed_tokens >= 0");
  return static_cast<int>(std::max<int64_t>(repeats, (min_timed_tokens + tokens - 1) / tokens));
}

std::vector<GridPoint> ProfileGrid::points() const {
  std::vector<GridPoint> out;
  for (int64_t s : tokens)
    for (int64_t c : contexts)
      if (longest_sequence == 0 || c + s <= longest_sequence) out.push_back({s, c});
  return out;
}

ProfileGrid profile_grid(const std::string& name) {
  if (name == "quick") return {{32, 64, 128}, {0, 64, 192}, 3};
  // What a trainer profiles on its first run (PlanConfig(cost_model="profile")): 7 s for the
  // tiny LLaMA on one loaded core of this machine, held-out error 4% forward, 17% backward
  // (the full grid: 200 s; measured 2026-11-25, docs/runtime.md "Profiled by the trainer").
  if (name == "training") return {{128, 512, 2048}, {0, 1024, 4096}, 3};
  // Up to the 8K-token contexts of the measured benchmarks and their 8K-token chunks, so that
  // their slices are inside the fitted range: a batch-level chunk holds a whole sequence cut at
  // 8192, and the fit up to 2048 tokens over-predicted such a layer by 5% forward and backward
  // (docs/benchmarks.md, "Simulator validation"). Sequences up to 10240 tokens, as before.
  if (name == "full")
    return {
        {64, 128, 256, 512, 1024, 2048, 4096, 8192}, {0, 512, 1024, 2048, 4096, 8192}, 7, 10240};
  // A GPU's calibration (issue 37): the chunk sizes a GPU plan uses, 256 to 16K tokens, at the
  // contexts of a 96K-token sequence's later slices; every sequence fits (16K after 96K). Five
  // runs a point from 2K tokens, where the H200's agreed within a few percent; below, as many
  // as hold 10K tokens (40 at 256), where five spread by tens of percent: a few ms more per point.
  if (name == "gpu")
    return {{256, 512, 1024, 2048, 4096, 8192, 16384},
            {0, 4096, 16384, 32768, 65536, 98304},
            5,
            0,
            5 * 2048};
  throw Error("profile grid must be 'quick', 'training', 'full' or 'gpu', got '" + name + "'");
}

}  // namespace infinipipe
