#pragma once
// A schedule run without time under action.h's semantics: a RECV posts at once, a SEND waits for
// its peer's posted RECV, a compute waits until its input was sent. The validator's deadlock check
// and the placement of stages on ranks (place_on_ranks) both step through a schedule this way.
#include <string>
#include <vector>

#include "infinipipe/schedule/action.h"

namespace infinipipe {

// One direction of one link for one kind of message: the SENDs of `sender` and the RECVs of
// `receiver`, in list order. Pipeline channels join neighbours; head channels join the last
// stage and each other stage, one per direction.
struct Channel {
  int sender, receiver;
  ActionType send, recv;
};

std::vector<Channel> all_channels(int num_stages);
// The channel (index into all_channels) a SEND or RECV on `stage` uses, -1 for a compute.
int channel_of(int num_stages, int stage, const Action& a);
// The action on a channel's other side for `chunk`: its peer stage set for head transfers.
Action send_of(const Channel& ch, int chunk);
Action recv_of(const Channel& ch, int chunk);
// The RECV whose data a compute waits for, or the compute itself when it needs none: F c its
// RECV_F (not on stage 0), B c its RECV_B (not on the last stage; there, with the head on another
// stage, its RECV_HG), H c on a stage other than the last its RECV_H. `head`: per chunk, the
// stage of its H or -1 (Schedule::head_stages).
Action input_of(int num_stages, int stage, const Action& a, const std::vector<int>& head);

class DryRun {
 public:
  // The schedule's structure must be checked already (validate_schedule does so first): every
  // chunk id in range, each action at most once per stage.
  DryRun(const Schedule& schedule, int num_chunks);

  // Whether stage `stage`'s action at `index` could run now (its earlier actions having run).
  bool ready(int stage, int index) const;
  void run(int stage, int index);
  // What a step that is not ready waits for, e.g. "stage 2 to send SEND_F4".
  std::string waits_for(int stage, int index) const;

 private:
  const Schedule& schedule_;
  std::vector<Channel> channels_;
  std::vector<int> posted_, sent_;  // per channel
  // Per stage and step: its channel; for a RECV its place on it (the data is there once that
  // many were sent); for a compute the step of the RECV it waits for, or -1.
  std::vector<std::vector<int>> channel_, recv_slot_, input_step_;
};

}  // namespace infinipipe
