#pragma once
// A schedule is data: per stage, an ordered list of actions. Each action has a short text form:
//   F3       forward of chunk 3            B3       backward of chunk 3
//   W3       weight gradients of chunk 3 (zero-bubble: B3 then computes only what the previous
//            stage needs, its input gradient; without a W3 on the stage, B3 computes both)
//   SEND_F3  send chunk 3's activation to the next stage
//   RECV_F3  post the receive of chunk 3's activation from the previous stage
//   SEND_B3  send chunk 3's input gradient to the previous stage
//   RECV_B3  post the receive of chunk 3's output gradient from the next stage
// Spread head (docs/design.md, "Spread head"): chunk 3's LM head and loss run on stage 5, not on
// the last stage 7. The last stage's F3/B3 then cover its layers only, and
//   H3          on stage 5: the head's forward, the loss and the head's backward of chunk 3
//   SEND_H3@5   on stage 7: send chunk 3's last hidden state to stage 5
//   RECV_H3@7   on stage 5: post its receive from stage 7
//   SEND_HG3@7  on stage 5: send that hidden state's gradient back to stage 7
//   RECV_HG3@5  on stage 7: post its receive from stage 5
// (with the head on the last stage itself, H3 runs there and nothing is sent).
// Communication semantics (what the validator and the simulator assume, and what the executor
// guarantees or exceeds): a RECV only posts the receive, the compute that needs the data waits
// for it; a SEND blocks until the peer has posted the matching RECV (rendezvous). Messages on
// one (sender, receiver, direction) channel are matched in order, as NCCL does.
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json_fwd.hpp>

namespace infinipipe {

enum class ActionType {
  kForward,
  kBackward,
  kSendForward,
  kRecvForward,
  kSendBackward,
  kRecvBackward,
  kHead,          // spread head: forward, loss and backward of the chunk's LM head
  kSendHead,      // last stage -> head stage: the chunk's last hidden state
  kRecvHead,      // head stage <- last stage
  kSendHeadGrad,  // head stage -> last stage: that hidden state's gradient
  kRecvHeadGrad,  // last stage <- head stage
  kWeight,        // zero-bubble: the weight gradients its B left (docs/design.md, "Zero bubble")
};

constexpr int kActionTypes = 12;  // the values of ActionType

struct Action {
  ActionType type = ActionType::kForward;
  int chunk = 0;
  int peer_stage = -1;  // head transfers only (the @ of their text): the other stage

  bool is_compute() const {
    return type == ActionType::kForward || type == ActionType::kBackward ||
           type == ActionType::kHead || type == ActionType::kWeight;
  }
  bool is_send() const {
    return type == ActionType::kSendForward || type == ActionType::kSendBackward ||
           type == ActionType::kSendHead || type == ActionType::kSendHeadGrad;
  }
  bool is_recv() const {
    return type == ActionType::kRecvForward || type == ActionType::kRecvBackward ||
           type == ActionType::kRecvHead || type == ActionType::kRecvHeadGrad;
  }
  bool is_head_transfer() const {
    return type == ActionType::kSendHead || type == ActionType::kRecvHead ||
           type == ActionType::kSendHeadGrad || type == ActionType::kRecvHeadGrad;
  }
  // The stage a SEND goes to or a RECV comes from, seen from `stage`.
  int peer(int stage) const;

  std::string text() const;
  static Action parse(const std::string& text);  // Error on anything that is not a text form

  bool operator==(const Action& o) const {
    return type == o.type && chunk == o.chunk && peer_stage == o.peer_stage;
  }
  bool operator!=(const Action& o) const { return !(*this == o); }
};

// Per stage, the ordered actions of one training step (all waves, back to back).
//
// Virtual stages (docs/design.md, "Virtual stages"): a rank may hold several stages, as in
// interleaved and V-shaped pipelines (ZB-V puts stages r and 2d-1-r of 2d on rank r). `stages`
// then lists every stage's actions as if each had a rank of its own, and `ranks` says how the
// ranks run them: per rank, the stage of each of its steps in order, so that the k-th time stage
// s appears there the rank runs stage s's k-th action. Stages are kept whole because every rule
// of a pipeline (coverage, slice order, channels, inputs) is a rule of stages; only the deadlock
// check and the clock belong to ranks. Messages between two stages of one rank stay SEND/RECV
// pairs (the executor hands them over locally). Empty `ranks`: stage p runs alone on rank p.
struct Schedule {
  std::vector<std::vector<Action>> stages;
  std::vector<std::vector<int>> ranks;

  int num_stages() const { return static_cast<int>(stages.size()); }
  int num_ranks() const { return ranks.empty() ? num_stages() : static_cast<int>(ranks.size()); }
  // Per stage, the rank that runs it: the first rank whose order names it (validate_schedule
  // checks that exactly one does), -1 for a stage no rank names.
  std::vector<int> rank_of_stage() const;
  // Per rank, its program: (stage, index into that stage's list) of each step, in order.
  std::vector<std::vector<std::pair<int, int>>> rank_programs() const;
  // Per chunk, the stage that runs its H action, or -1 where the last stage's F computes the
  // head and the loss itself (every chunk when the head is not spread).
  std::vector<int> head_stages(int num_chunks) const;
  // One line per stage: "stage 0: F0 SEND_F0 F1 ..."; with virtual stages, then one line per
  // rank, each step written stage:action: "rank 0: 0:F0 0:SEND_F0 7:RECV_F0 7:F0 ...".
  std::string text() const;
  // The grid: one column per stage, one row per step of each stage's list; `mark_stage` and
  // `mark_index` put ">>" before one cell (used by validation errors). A marked grid of more than
  // 48 rows shows only the 12 rows either side of the mark.
  std::string grid(int mark_stage = -1, int mark_index = -1) const;
};

// {"stages": [["F0", "SEND_F0", ...], ...]}; with virtual stages also "ranks": [[0, 0, 7, ...]].
void to_json(nlohmann::json& j, const Schedule& s);
void from_json(const nlohmann::json& j, Schedule& s);

}  // namespace infinipipe
