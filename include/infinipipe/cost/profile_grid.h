#pragma once
// What a layer profile times: its grid of (tokens, context) points, by name (the timing is
// runtime/layer_profiler.h, the fit of the times cost/calibration.h).
#include <cstdint>
#include <string>
#include <vector>

namespace infinipipe {

struct GridPoint {
  int64_t tokens = 0;   // s: the slice's tokens (the chunk holds this one slice)
  int64_t context = 0;  // c: tokens of the same sequence before the slice
};

// How often a point (or an embedding or head size) of `tokens` tokens is timed: `repeats`, or
// more where its runs are short, so that they hold at least `min_timed_tokens` tokens together
// (0: `repeats` for every size). A short run's time is mostly launch and host jitter: on the
// H200, up to 1K tokens a point's five runs spread by tens of percent
// (docs/notes/2026-11-29-gpu-first-runs.md).
int timed_runs(int64_t tokens, int repeats, int64_t min_timed_tokens);

// A profiling grid: every (tokens, context) pair, each timed timed_runs(tokens, repeats,
// min_timed_tokens) times.
struct ProfileGrid {
  std::vector<int64_t> tokens;
  std::vector<int64_t> contexts;
  int repeats = 1;
  // Points whose sequence (context + tokens) is longer are left out; 0: none is.
  int64_t longest_sequence = 0;
  int64_t min_timed_tokens = 0;
  std::vector<GridPoint> points() const;  // tokens-major
};
// "quick" (seconds; tests), "training" (a trainer's first run), "full" (the calibration) or
// "gpu" (a GPU's calibration: larger chunks, longer contexts).
// Error on another name.
ProfileGrid profile_grid(const std::string& name);

}  // namespace infinipipe
