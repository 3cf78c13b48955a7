#pragma once
// Builds the action lists of a step from its chunks.
//
// EPP's 1F1B over chunks: within a wave, chains (a long sequence's chunks; a packed chunk is a
// chain of one) go longest first; a chain's chunks go forward in order and backward in reverse
// order, chains backward first-in-first-out. Stage p of d runs w_p = (d-1-p) + (k_max-1) warm-up
// forwards, k_max the length of the wave's first chain, then one forward one backward, then the
// remaining backwards. (With keep_chain_order a longer chain can follow a shorter one; a backward
// whose chunk the stage has not forwarded yet is then preceded by the forwards it needs.) Waves
// run back to back: each stage starts wave i+1 when it has finished wave i. With overlap_waves,
// wave i+1's warm-up forwards go between the last backwards of wave i's cool-down instead, as
// one 1F1B over both waves would run them.
// Every compute is followed by its SEND and preceded by the RECV it needs, posted one compute
// ahead: the RECV for compute i+1 comes before compute i (across wave boundaries too). In the
// steady state a stage sends F_k while its neighbour sends B_j, both rendezvous sends; both
// succeed because on each side the compute right after the send is the one that needs the
// other's message, so its RECV is already posted. Posting just before the compute deadlocks there;
// one ahead passed the validator's deadlock check on ~190k random instances (1-16 stages, up to 30
// chains of 1-10 chunks, 1-5 waves; 1F1B, short-first and GPipe). A longer warm-up
// (ScheduleOptions::extra_warmup, ZB-H2) posts forwards' RECVs further ahead, so the previous
// stage's extra SENDs find them (scheduler_test checks every extra count on random steps).
#include <string>
#include <vector>

#include "infinipipe/core/chunk.h"
#include "infinipipe/schedule/action.h"

namespace infinipipe {

// A wave: chunk ids of whole chains, in any order (the scheduler orders them).
using Wave = std::vector<int>;

enum class ScheduleKind {
  kOneFOneB,  // the 1F1B above (EPP, Seq1F1B, batch-level and chunk baselines)
  kGPipe,     // all forwards of a wave, then all backwards (reverse order)
};

// Zero bubble (Qi et al., "Zero Bubble Pipeline Parallelism", ICLR 2024): a backward is split
// into B, its input gradient, which the previous stage waits for, and W, the weight gradients,
// which no one waits for; W actions are then placed where they delay nothing on the critical
// path (docs/design.md, "Zero bubble").
enum class ZeroBubble {
  kOff,  // no W: each B computes the input and the weight gradients
  // ZB-H1: stage p of d runs each W right before its next compute, except that it may hold back
  // up to p of them, which run at the end of its list. 1F1B keeps w_p + 1 chunks in flight on
  // stage p (w_p = (d-1-p) + (k_max-1) warm-up forwards), so with chunks held until their W the
  // stages keep about stage 0's count: the paper's ZB-H1, which needs no more memory than 1F1B's
  // first stage and leaves the downstream stages' W off the backward's critical path.
  kH1,
  // ZB-H2-like: ZB-H1's W actions on a schedule whose first stages run more warm-up forwards
  // (ScheduleOptions::extra_warmup, h2_extra_warmup by default), so they have forwards to run
  // while a wave's first backward travels back, instead of idling: ZB-H2 trades the memory of
  // those chunks for that ramp.
  kH2,
};
const char* to_string(ZeroBubble mode);                 // "off", "h1", "h2"
ZeroBubble parse_zero_bubble(const std::string& name);  // Error listing the valid names
// ZB-H2's extra warm-up forwards on stage 0 of `num_stages` when no count is given: d/2, half of
// the paper's doubling (d-1 on stage 0). Neither is best everywhere: more chunks in flight cost
// recompute where memory binds, so the planner tries every count (zero_bubble_plan.h;
// LLaMA-13B, 96K, 8 stages, 80 GiB, 16 Wikipedia steps: EPP's mean step 27.505 s with ZB-H1
// alone, 27.417 s with ZB-H2 at d-1, 27.394 s at d/2, 27.302 s with every count tried;
// docs/notes/2026-11-29-zero-bubble-gap.md).
int h2_extra_warmup(int num_stages);

struct ScheduleOptions {
  int num_stages = 1;
  ScheduleKind kind = ScheduleKind::kOneFOneB;
  // Keep chains in the order given instead of longest first (to show the cost of short-first).
  bool keep_chain_order = false;
  // 1F1B only: start each wave during the previous one's cool-down (see above). Saves a fill and
  // a drain per wave, but both waves hold chunks at once there: the memory check decides.
  bool overlap_waves = false;
  // Split backwards into B and W (with_weight_actions) after the schedule is built.
  ZeroBubble zero_bubble = ZeroBubble::kOff;
  // 1F1B only: stage 0 runs this many warm-up forwards more than 1F1B's w_0, stage p
  // max(0, extra_warmup - p) more, and each stage posts its forwards' RECVs far enough ahead for
  // the previous stage's extra SENDs. 0 with kH2: h2_extra_warmup(num_stages).
  int extra_warmup = 0;
};

// The order chunks go forward in one wave, and the order they go backward.
struct WaveOrder {
  std::vector<int> forward;
  std::vector<int> backward;
};
WaveOrder order_wave(const std::vector<Chunk>& chunks, const Wave& wave,
                     const ScheduleOptions& options);

Schedule build_schedule(const std::vector<Chunk>& chunks, const std::vector<Wave>& waves,
                        const ScheduleOptions& options);

// The pass that gives a built schedule its W actions: every B c gets a W c on its stage, placed
// as `mode` says, always after B c's SEND_B and the RECV posted after it, right before a compute
// (so the W delays no send and no receive's posting). The first stage is left as it is: it sends
// no input gradient, so none of its B is waited for, and ZB-H1 would run each W right after its
// B anyway; its B computes both (and holds nothing longer). kOff: the schedule as it is. Error
// when the schedule already has W actions.
Schedule with_weight_actions(const Schedule& schedule, ZeroBubble mode);

// True when some stage runs F or B of a chunk of a later wave before one of an earlier wave.
bool waves_overlap(const Schedule& schedule, const std::vector<Wave>& waves);

}  // namespace infinipipe
