#pragma once
// Checks a schedule before any rank runs it.
#include <string>
#include <vector>

#include "infinipipe/core/chunk.h"
#include "infinipipe/schedule/action.h"

namespace infinipipe {

// Throws Error when the schedule is wrong, with the schedule grid and the bad step marked:
// - every chunk forwarded and backwarded exactly once on every stage, forward before backward;
// - slice order: on every stage, a chunk holding a later slice of a sequence forwards after,
//   and backwards before, the chunks holding its earlier slices;
// - every compute has its input: a RECV_F before F (not on stage 0), a RECV_B before B (not on
//   the last stage); every SEND matched by a RECV on the peer, in the same order per channel;
// - no deadlock under the semantics of action.h (RECV posts, compute waits for data, SEND waits
//   for the posted RECV).
void validate_schedule(const Schedule& schedule, const std::vector<Chunk>& chunks);

}  // namespace infinipipe
