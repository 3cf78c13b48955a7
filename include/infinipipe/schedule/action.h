#pragma once
// A schedule is data: per stage, an ordered list of actions. Each action has a short text form:
//   F3       forward of chunk 3            B3       backward of chunk 3
//   SEND_F3  send chunk 3's activation to the next stage
//   RECV_F3  post the receive of chunk 3's activation from the previous stage
//   SEND_B3  send chunk 3's input gradient to the previous stage
//   RECV_B3  post the receive of chunk 3's output gradient from the next stage
// Communication semantics (what the validator and the simulator assume, and what the executor
// guarantees or exceeds): a RECV only posts the receive, the compute that needs the data waits
// for it; a SEND blocks until the peer has posted the matching RECV (rendezvous). Messages on
// one (sender, receiver, direction) channel are matched in order, as NCCL does.
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

namespace infinipipe {

enum class ActionType {
  kForward,
  kBackward,
  kSendForward,
  kRecvForward,
  kSendBackward,
  kRecvBackward
};

struct Action {
  ActionType type = ActionType::kForward;
  int chunk = 0;

  bool is_compute() const { return type == ActionType::kForward || type == ActionType::kBackward; }
  bool is_send() const {
    return type == ActionType::kSendForward || type == ActionType::kSendBackward;
  }
  bool is_recv() const {
    return type == ActionType::kRecvForward || type == ActionType::kRecvBackward;
  }
  // The stage a SEND goes to or a RECV comes from, seen from `stage`.
  int peer(int stage) const;

  std::string text() const;
  static Action parse(const std::string& text);  // Error on anything that is not a text form

  bool operator==(const Action& o) const { return type == o.type && chunk == o.chunk; }
  bool operator!=(const Action& o) const { return !(*this == o); }
};

// Per stage, the ordered actions of one training step (all waves, back to back).
struct Schedule {
  std::vector<std::vector<Action>> stages;

  int num_stages() const { return static_cast<int>(stages.size()); }
  // One line per stage: "stage 0: F0 SEND_F0 F1 ...".
  std::string text() const;
  // The grid: one column per stage, one row per step of each stage's list; `mark_stage` and
  // `mark_index` put ">>" before one cell (used by validation errors). A marked grid of more than
  // 48 rows shows only the 12 rows either side of the mark.
  std::string grid(int mark_stage = -1, int mark_index = -1) const;
};

void to_json(nlohmann::json& j, const Schedule& s);  // {"stages": [["F0", "SEND_F0", ...], ...]}
void from_json(const nlohmann::json& j, Schedule& s);

}  // namespace infinipipe
