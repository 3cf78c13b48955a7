#include "infinipipe/runtime/message_order.h"

#include <algorithm>
#include <map>
#include <tuple>
#include <utility>
#include <vector>

namespace infinipipe::runtime {

namespace {

// What a message carries, the same for its SEND and its RECV.
int message_kind_of(ActionType type) {
  switch (type) {
    case ActionType::kSendForward:
    case ActionType::kRecvForward:
      return 0;
    case ActionType::kSendBackward:
    case ActionType::kRecvBackward:
      return 1;
    case ActionType::kSendHead:
    case ActionType::kRecvHead:
      return 2;
    default:  // kSendHeadGrad, kRecvHeadGrad
      return 3;
  }
}

bool same_message(const Action& send, const Action& recv) {
  return message_kind_of(send.type) == message_kind_of(recv.type) && send.chunk == recv.chunk;
}

std::string stage_name(int stage) { return "stage " + std::to_string(stage); }

}  // namespace

std::string message_order_conflict(const Schedule& schedule, bool heads_apart) {
  // By (sender, receiver, the head's group or not): the sends in issue order, the receives in
  // posting order.
  using Channel = std::tuple<int, int, bool>;
  std::map<Channel, std::vector<Action>> sends, recvs;
  for (int p = 0; p < schedule.num_stages(); ++p)
    for (const Action& a : schedule.stages[p]) {
      const bool apart = heads_apart && a.is_head_transfer();
      if (a.is_send()) sends[{p, a.peer(p), apart}].push_back(a);
      if (a.is_recv()) recvs[{a.peer(p), p, apart}].push_back(a);
    }
  for (const auto& [channel, sent] : sends) {
    const std::pair<int, int> pair{std::get<0>(channel), std::get<1>(channel)};
    const std::vector<Action>& posted = recvs[channel];
    const size_t common = std::min(sent.size(), posted.size());
    for (size_t i = 0; i < common; ++i) {
      if (same_message(sent[i], posted[i])) continue;
      return stage_name(pair.first) + "'s message " + std::to_string(i + 1) + " to " +
             stage_name(pair.second) + " is " + sent[i].text() + " but " + stage_name(pair.second) +
             "'s receive " + std::to_string(i + 1) + " from " + stage_name(pair.first) + " is " +
             posted[i].text();
    }
    if (sent.size() != posted.size())
      return stage_name(pair.first) + " sends " + std::to_string(sent.size()) + " messages to " +
             stage_name(pair.second) + ", which posts " + std::to_string(posted.size()) +
             " receives from it";
  }
  return "";
}

}  // namespace infinipipe::runtime
