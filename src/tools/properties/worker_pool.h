#pragma once
// Runs items 0..count-1 in forked worker processes, so that an item that never returns (the
// planner has had unbounded loops) or crashes costs one item, not the run: a worker past the
// per-item limit is killed and replaced, and the item is reported timed out. Processes rather
// than threads also keep the planner's solvers (CBC) out of each other's way.
#include <cstdint>
#include <functional>
#include <string>

namespace infinipipe::properties {

struct PoolOptions {
  int workers = 2;
  double item_timeout_s = 60;
};

enum class ItemStatus { kDone, kTimedOut, kCrashed };

struct ItemOutcome {
  int64_t index = 0;
  ItemStatus status = ItemStatus::kDone;
  std::string line;    // what evaluate returned (kDone)
  std::string reason;  // why not (kTimedOut, kCrashed)
  double seconds = 0;  // wall clock, as the parent saw it
};

// `evaluate` runs in a worker and returns one line (no newline) for the parent; `report` runs
// in the parent, once per item, in completion order.
void run_pool(int64_t count, const PoolOptions& options,
              const std::function<std::string(int64_t)>& evaluate,
              const std::function<void(const ItemOutcome&)>& report);

}  // namespace infinipipe::properties
