#pragma once
// Spread head (docs/design.md, "Spread head"): each chunk's LM head, loss and the head's
// backward run as one H action on a stage the planner assigns, instead of inside the last
// stage's F and B.
//
// The schedule treats the head as a virtual stage d: the 1F1B schedule is built for d + 1
// stages (the last real stage becomes a middle one, with one more chunk in flight, so the
// head's round trip overlaps its other work), simulated with the virtual stage running the
// heads (SimOptions::virtual_head_stage), and the virtual stage's actions for chunk c move to
// c's head stage o: its RECV_F c becomes RECV_H c@d-1, F c becomes H c, SEND_B c becomes
// SEND_HG c@d-1 (its B c, which costs nothing, goes). They are merged into o's list by the
// simulated times, the receives at theirs (so every receive stays posted as early as it was: a
// receive posted just before its compute deadlocks rendezvous sends, schedule/scheduler.h), each
// H halfway through its window (from its hidden state's arrival to the latest start that returns
// the gradient before the last stage's B needs it; head_spread.cc says why), its SEND_HG after
// it; receives first at equal times, each list keeping its order. On the last stage SEND_F c and
// RECV_B c become SEND_H c@o and RECV_HG c@o. A chunk whose head stays on the last stage (o = d-1)
// runs H c right after F c there and sends nothing.
#include <vector>

#include "infinipipe/core/chunk.h"
#include "infinipipe/core/recompute.h"
#include "infinipipe/cost/cost_model.h"
#include "infinipipe/schedule/scheduler.h"

namespace infinipipe {

// The schedule above for `head_stages` (one stage in [0, d) per chunk; d = options.num_stages).
// The simulation that orders the merge runs with `recompute` ([stage][chunk], or empty). When
// every head is on the last stage, the last stage stays the last of a d-stage 1F1B.
Schedule spread_head_schedule(const std::vector<Chunk>& chunks, const std::vector<Wave>& waves,
                              const ScheduleOptions& options, const std::vector<int>& head_stages,
                              const CostModel& cost, const Recompute& recompute = {});

struct HeadAssignmentOptions {
  // Heads go to stages first_stage .. d-1 only. The first stages hold the most chunks in flight
  // (1F1B's longest warm-ups) and every stage running heads holds the head's replica: leaving
  // them out keeps their memory for activations where it is short.
  int first_stage = 0;
};

// A head stage per chunk. Each stage's share of the heads' work is what water filling gives it
// over its other compute (its layers' forward and backward of every chunk, the first stage's
// embedding; the last stage's without heads), so the stages end equally busy where whole chunks
// allow; the heads are then dealt in `forward_order` (the order every stage forwards the chunks)
// to the stage furthest behind its share so far, so each stage's heads come evenly through the
// step rather than in a lump: a stage running a head delays its neighbours, which a tightly
// coupled 1F1B absorbs only when such delays are small and spread out. Measured on LLaMA-3-8B,
// 8 stages, wikipedia batch 512 at 96K (EPP's step 0): dealt 23.22 s, round robin in forward
// order 22.90 s (not balanced on uneven stages), largest head first to the least busy stage
// 23.81 s, against 30.60 s with the head on the last stage.
// The order a schedule's first stage forwards its chunks (every stage forwards in one order).
std::vector<int> forward_order(const Schedule& schedule);

std::vector<int> assign_head_stages(const std::vector<Chunk>& chunks,
                                    const std::vector<int>& forward_order, const CostModel& cost,
                                    const HeadAssignmentOptions& options = {});

}  // namespace infinipipe
