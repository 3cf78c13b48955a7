#include "dry_run.h"

#include "infinipipe/core/error.h"

namespace infinipipe {

std::vector<Channel> all_channels(int d) {
  std::vector<Channel> channels;
  for (int p = 0; p + 1 < d; ++p) {
    channels.push_back({p, p + 1, ActionType::kSendForward, ActionType::kRecvForward});
    channels.push_back({p + 1, p, ActionType::kSendBackward, ActionType::kRecvBackward});
  }
  for (int o = 0; o + 1 < d; ++o) {
    channels.push_back({d - 1, o, ActionType::kSendHead, ActionType::kRecvHead});
    channels.push_back({o, d - 1, ActionType::kSendHeadGrad, ActionType::kRecvHeadGrad});
  }
  return channels;
}

int channel_of(int d, int stage, const Action& a) {
  if (a.is_compute()) return -1;
  const int peer = a.peer(stage);
  switch (a.type) {
    case ActionType::kSendForward:
      return 2 * stage;
    case ActionType::kRecvForward:
      return 2 * peer;
    case ActionType::kSendBackward:
      return 2 * peer + 1;
    case ActionType::kRecvBackward:
      return 2 * stage + 1;
    case ActionType::kSendHead:
      return 2 * (d - 1) + 2 * peer;
    case ActionType::kRecvHead:
      return 2 * (d - 1) + 2 * stage;
    case ActionType::kSendHeadGrad:
      return 2 * (d - 1) + 2 * stage + 1;
    case ActionType::kRecvHeadGrad:
      return 2 * (d - 1) + 2 * peer + 1;
    default:
      return -1;
  }
}

Action send_of(const Channel& ch, int chunk) {
  Action a{ch.send, chunk};
  if (a.is_head_transfer()) a.peer_stage = ch.receiver;
  return a;
}

Action recv_of(const Channel& ch, int chunk) {
  Action a{ch.recv, chunk};
  if (a.is_head_transfer()) a.peer_stage = ch.sender;
  return a;
}

Action input_of(int d, int stage, const Action& a, const std::vector<int>& head) {
  const int k = a.chunk;
  if (a.type == ActionType::kForward && stage > 0) return {ActionType::kRecvForward, k};
  if (a.type == ActionType::kBackward && stage < d - 1) return {ActionType::kRecvBackward, k};
  if (a.type == ActionType::kBackward && head[k] != -1 && head[k] != d - 1)
    return {ActionType::kRecvHeadGrad, k, head[k]};
  if (a.type == ActionType::kHead && stage != d - 1) return {ActionType::kRecvHead, k, d - 1};
  return a;
}

DryRun::DryRun(const Schedule& schedule, int num_chunks)
    : schedule_(schedule),
      channels_(all_channels(schedule.num_stages())),
      posted_(channels_.size(), 0),
      sent_(channels_.size(), 0) {
  const int d = schedule.num_stages();
  const std::vector<int> head = schedule.head_stages(num_chunks);
  channel_.resize(d);
  recv_slot_.resize(d);
  input_step_.resize(d);
  for (int p = 0; p < d; ++p) {
    const std::vector<Action>& list = schedule.stages[p];
    std::vector<int> count(channels_.size(), 0);
    // Per RECV type and chunk: its step on this stage (a compute's input is on its own stage).
    std::vector<std::vector<int>> recv_at(kActionTypes);
    for (int i = 0; i < static_cast<int>(list.size()); ++i) {
      const Action& a = list[i];
      const int ch = channel_of(d, p, a);
      channel_[p].push_back(ch);
      recv_slot_[p].push_back(a.is_recv() ? count[ch]++ : -1);
      if (a.is_recv()) {
        std::vector<int>& at = recv_at[static_cast<int>(a.type)];
        if (at.empty()) at.assign(num_chunks, -1);
        at[a.chunk] = i;
      }
    }
    for (const Action& a : list) {
      const Action input = input_of(d, p, a, head);
      const std::vector<int>& at = recv_at[static_cast<int>(input.type)];
      input_step_[p].push_back(input.is_recv() && !at.empty() ? at[a.chunk] : -1);
    }
  }
}

bool DryRun::ready(int p, int i) const {
  const Action& a = schedule_.stages[p][i];
  if (a.is_recv()) return true;
  if (a.is_send()) return posted_[channel_[p][i]] > sent_[channel_[p][i]];
  const int r = input_step_[p][i];
  return r == -1 || sent_[channel_[p][r]] > recv_slot_[p][r];
}

void DryRun::run(int p, int i) {
  const Action& a = schedule_.stages[p][i];
  if (a.is_recv()) ++posted_[channel_[p][i]];
  if (a.is_send()) ++sent_[channel_[p][i]];
}

std::string DryRun::waits_for(int p, int i) const {
  const Action& a = schedule_.stages[p][i];
  if (a.is_send()) {
    const Channel& ch = channels_[channel_[p][i]];
    return "stage " + std::to_string(ch.receiver) + " to post " + recv_of(ch, a.chunk).text();
  }
  const int r = input_step_[p][i];
  if (r == -1) return "nothing";
  const Channel& ch = channels_[channel_[p][r]];
  return "stage " + std::to_string(ch.sender) + " to send " + send_of(ch, a.chunk).text();
}

}  // namespace infinipipe
