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
// SEND_HG c@d-1 (its B c, which costs nothing, goes). They are merged into o's list in the order
// of the simulated start times, receives first at equal times, so the merged list is one the
// simulated run followed and every receive stays posted as early as it was (a receive posted just
// before its compute deadlocks rendezvous sends: schedule/scheduler.h). On the last stage
// SEND_F c and RECV_B c become SEND_H c@o and RECV_HG c@o. A chunk whose head stays on the last
// stage (o = d-1) runs H c right after F c there and sends nothing.
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
  // Stage 0 holds the most chunks in flight (1F1B's longest warm-up): leaving it out keeps its
  // memory for activations.
  bool exclude_first_stage = false;
};

// A head stage per chunk: heads taken largest first, each to the stage whose predicted busy time
// (its layers' forward and backward of every chunk, the last stage's without the heads, plus the
// heads given to it so far) is least after taking it; ties go to the later stage.
std::vector<int> assign_head_stages(const std::vector<Chunk>& chunks, const CostModel& cost,
                                    const HeadAssignmentOptions& options = {});

}  // namespace infinipipe
