#pragma once
// Checks a schedule before any rank runs it.
#include <string>
#include <vector>

#include "infinipipe/core/chunk.h"
#include "infinipipe/schedule/action.h"

namespace infinipipe {

// Throws Error when the schedule is wrong, with the schedule grid and the bad step marked:
// - every chunk forwarded and backwarded exactly once on every stage, forward before backward;
// - zero bubble: a W at most once per chunk and stage, after that stage's B (B then computes the
//   input gradient only; the step ends with every stage's list, so every W runs before the
//   optimizer); W waits for nothing, so it adds no deadlock;
// - slice order: on every stage, a chunk holding a later slice of a sequence forwards after,
//   and backwards before, the chunks holding its earlier slices;
// - every compute has its input: a RECV_F before F (not on stage 0), a RECV_B before B (not on
//   the last stage); every SEND matched by a RECV on the peer, in the same order per channel;
// - spread head (docs/design.md, "Spread head"): H c on at most one stage o; with o != d-1 the
//   last stage runs F c, then SEND_H c@o, and posts RECV_HG c@o before B c, while stage o posts
//   RECV_H c@d-1 before H c and sends SEND_HG c@d-1 after it; with o = d-1, H c runs between F c
//   and B c on the last stage and nothing is sent; no head transfer for a chunk without H, nor
//   on another stage or naming another peer;
// - virtual stages (Schedule::ranks): each stage on one rank, whose order takes each of the
//   stage's actions once;
// - no deadlock under the semantics of action.h (RECV posts, compute waits for data, SEND waits
//   for the posted RECV), head messages included, each (sender, receiver, kind) channel in order;
//   ranks run their programs, so two stages on one rank wait for each other's steps.
void validate_schedule(const Schedule& schedule, const std::vector<Chunk>& chunks);

}  // namespace infinipipe
