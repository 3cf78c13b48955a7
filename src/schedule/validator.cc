#include "infinipipe/schedule/validator.h"

#include <algorithm>
#include <map>

#include "infinipipe/core/error.h"

namespace infinipipe {

namespace {

[[noreturn]] void fail(const Schedule& schedule, int stage, int index, const std::string& reason) {
  throw Error("invalid schedule: " + reason + "\n" + schedule.grid(stage, index));
}

std::string at(int stage, int index) {
  return "stage " + std::to_string(stage) + " step " + std::to_string(index);
}

// Where each action stands in its stage's list: position[stage][type][chunk], -1 if absent.
using Positions = std::vector<std::vector<std::vector<int>>>;

int pos(const Positions& p, int stage, ActionType type, int chunk) {
  return p[stage][static_cast<int>(type)][chunk];
}

// Every action names an existing chunk and a stage that exists on its side, appears at most
// once, and every chunk is forwarded, then backwarded, once; a SEND follows the compute whose
// result it sends.
Positions check_structure(const Schedule& schedule, int num_chunks) {
  const int d = schedule.num_stages();
  Positions positions(
      d, std::vector<std::vector<int>>(kActionTypes, std::vector<int>(num_chunks, -1)));
  for (int p = 0; p < d; ++p) {
    const std::vector<Action>& list = schedule.stages[p];
    for (int i = 0; i < static_cast<int>(list.size()); ++i) {
      const Action& a = list[i];
      const std::string name = a.text();
      if (a.chunk < 0 || a.chunk >= num_chunks)
        fail(schedule, p, i,
             name + " at " + at(p, i) + " names chunk " + std::to_string(a.chunk) +
                 ", but the step has only " + std::to_string(num_chunks) + " chunks");
      if (!a.is_compute()) {
        const int peer = a.peer(p);
        if (peer < 0 || peer >= d)
          fail(schedule, p, i,
               name + " at " + at(p, i) + " talks to stage " + std::to_string(peer) +
                   ", which does not exist (" + std::to_string(d) + " stages)");
      }
      int& slot = positions[p][static_cast<int>(a.type)][a.chunk];
      if (slot != -1)
        fail(schedule, p, i,
             name + " appears twice on stage " + std::to_string(p) + " (steps " +
                 std::to_string(slot) + " and " + std::to_string(i) + ")");
      slot = i;
      const std::string chunk = std::to_string(a.chunk);
      auto before = [&](ActionType type) { return pos(positions, p, type, a.chunk) != -1; };
      if (a.type == ActionType::kBackward && !before(ActionType::kForward))
        fail(schedule, p, i,
             name + " at " + at(p, i) + " runs before F" + chunk +
                 ": a chunk's backward needs its forward on the same stage");
      if (a.type == ActionType::kSendForward && !before(ActionType::kForward))
        fail(schedule, p, i,
             name + " at " + at(p, i) + " sends an activation before F" + chunk + " computed it");
      if (a.type == ActionType::kSendBackward && !before(ActionType::kBackward))
        fail(schedule, p, i,
             name + " at " + at(p, i) + " sends a gradient before B" + chunk + " computed it");
    }
    for (int c = 0; c < num_chunks; ++c) {
      const int f = pos(positions, p, ActionType::kForward, c);
      const int b = pos(positions, p, ActionType::kBackward, c);
      const std::string chunk = std::to_string(c);
      if (f == -1)
        fail(schedule, p, static_cast<int>(list.size()),
             "stage " + std::to_string(p) + " never runs F" + chunk + " (nor B" + chunk +
                 "): every chunk goes forward and backward once on every stage");
      if (b == -1)
        fail(schedule, p, f,
             "F" + chunk + " at " + at(p, f) + " is never followed by B" + chunk +
                 ": every chunk goes forward and backward once on every stage");
    }
  }
  return positions;
}

// Per sequence, the chunks holding its slices in token order: (earlier, later, sequence).
struct SliceEdge {
  int earlier, later, seq;
};
std::vector<SliceEdge> slice_edges(const std::vector<Chunk>& chunks) {
  std::map<int, std::vector<std::pair<int64_t, int>>> by_seq;
  for (int c = 0; c < static_cast<int>(chunks.size()); ++c)
    for (const Slice& s : chunks[c].slices) by_seq[s.seq].push_back({s.start, c});
  std::vector<SliceEdge> edges;
  for (auto& [seq, list] : by_seq) {
    std::sort(list.begin(), list.end());
    for (size_t i = 1; i < list.size(); ++i)
      if (list[i].second != list[i - 1].second)
        edges.push_back({list[i - 1].second, list[i].second, seq});
  }
  return edges;
}

void check_slice_order(const Schedule& schedule, const std::vector<Chunk>& chunks,
                       const Positions& positions) {
  const std::vector<SliceEdge> edges = slice_edges(chunks);
  for (int p = 0; p < schedule.num_stages(); ++p) {
    for (const SliceEdge& e : edges) {
      const std::string a = std::to_string(e.earlier), b = std::to_string(e.later);
      const std::string why = "chunk " + b + " holds a later slice of sequence " +
                              std::to_string(e.seq) + " than chunk " + a;
      const int fa = pos(positions, p, ActionType::kForward, e.earlier);
      const int fb = pos(positions, p, ActionType::kForward, e.later);
      if (fb < fa)
        fail(schedule, p, fb,
             "F" + b + " at " + at(p, fb) + " runs before F" + a + ", but " + why +
                 " and attends to its keys/values: forwards go in slice order");
      const int ba = pos(positions, p, ActionType::kBackward, e.earlier);
      const int bb = pos(positions, p, ActionType::kBackward, e.later);
      if (ba < bb)
        fail(schedule, p, ba,
             "B" + a + " at " + at(p, ba) + " runs before B" + b + ", but " + why +
                 ", whose backward adds to chunk " + a +
                 "'s dK/dV: backwards go in reverse slice order");
    }
  }
}

// One direction of one link: the SENDs of `sender` and the RECVs of `receiver`, in list order.
struct Channel {
  int sender, receiver;
  ActionType send, recv;
};

std::vector<Channel> all_channels(int d) {
  std::vector<Channel> channels;
  for (int p = 0; p + 1 < d; ++p) {
    channels.push_back({p, p + 1, ActionType::kSendForward, ActionType::kRecvForward});
    channels.push_back({p + 1, p, ActionType::kSendBackward, ActionType::kRecvBackward});
  }
  return channels;
}

// (chunk, step) of every action of `type` on `stage`, in list order.
std::vector<std::pair<int, int>> occurrences(const Schedule& schedule, int stage, ActionType type) {
  std::vector<std::pair<int, int>> out;
  const std::vector<Action>& list = schedule.stages[stage];
  for (int i = 0; i < static_cast<int>(list.size()); ++i)
    if (list[i].type == type) out.push_back({list[i].chunk, i});
  return out;
}

std::string ordinal(size_t i) {
  const size_t n = i + 1;
  const char* suffix = (n % 100 >= 11 && n % 100 <= 13) ? "th"
                       : n % 10 == 1                    ? "st"
                       : n % 10 == 2                    ? "nd"
                       : n % 10 == 3                    ? "rd"
                                                        : "th";
  return std::to_string(n) + suffix;
}

void check_channels(const Schedule& schedule, const Positions& positions) {
  for (const Channel& ch : all_channels(schedule.num_stages())) {
    const auto sends = occurrences(schedule, ch.sender, ch.send);
    const auto recvs = occurrences(schedule, ch.receiver, ch.recv);
    for (size_t i = 0; i < std::max(sends.size(), recvs.size()); ++i) {
      if (i < sends.size() && i < recvs.size() && sends[i].first == recvs[i].first) continue;
      if (i < sends.size() && pos(positions, ch.receiver, ch.recv, sends[i].first) == -1) {
        const Action send{ch.send, sends[i].first};
        fail(schedule, ch.sender, sends[i].second,
             send.text() + " at " + at(ch.sender, sends[i].second) + " has no matching " +
                 Action{ch.recv, sends[i].first}.text() + " on stage " +
                 std::to_string(ch.receiver) + ": a send blocks until its peer posts the receive");
      }
      if (i < recvs.size() && pos(positions, ch.sender, ch.send, recvs[i].first) == -1) {
        const Action recv{ch.recv, recvs[i].first};
        fail(schedule, ch.receiver, recvs[i].second,
             recv.text() + " at " + at(ch.receiver, recvs[i].second) + " is never sent: stage " +
                 std::to_string(ch.sender) + " has no " + Action{ch.send, recvs[i].first}.text());
      }
      const Action recv{ch.recv, recvs[i].first};
      fail(schedule, ch.receiver, recvs[i].second,
           recv.text() + " at " + at(ch.receiver, recvs[i].second) + " is stage " +
               std::to_string(ch.receiver) + "'s " + ordinal(i) + " receive from stage " +
               std::to_string(ch.sender) + ", but that stage's " + ordinal(i) + " send is " +
               Action{ch.send, sends[i].first}.text() +
               ": messages on one channel are matched in order, so receives must follow the sends' "
               "order");
    }
  }
}

// A compute that needs data from a neighbour has posted its receive before it.
void check_inputs(const Schedule& schedule, const Positions& positions) {
  const int d = schedule.num_stages();
  for (int p = 0; p < d; ++p) {
    const std::vector<Action>& list = schedule.stages[p];
    for (int i = 0; i < static_cast<int>(list.size()); ++i) {
      const Action& a = list[i];
      Action recv;
      if (a.type == ActionType::kForward && p > 0)
        recv = {ActionType::kRecvForward, a.chunk};
      else if (a.type == ActionType::kBackward && p < d - 1)
        recv = {ActionType::kRecvBackward, a.chunk};
      else
        continue;
      const int r = pos(positions, p, recv.type, a.chunk);
      if (r == -1 || r > i)
        fail(schedule, p, i,
             a.text() + " at " + at(p, i) + " has no " + recv.text() + " before it: its " +
                 (a.type == ActionType::kForward ? "activation" : "output gradient") +
                 " from stage " + std::to_string(recv.peer(p)) + " is never received");
    }
  }
}

// Runs every stage's list under action.h's semantics until all are done or none can move.
void check_deadlock(const Schedule& schedule, const Positions& positions) {
  const int d = schedule.num_stages();
  // Channel state, indexed by the lower stage of the link: forward p -> p+1, backward p+1 -> p.
  std::vector<int> fwd_posted(d, 0), fwd_sent(d, 0), bwd_posted(d, 0), bwd_sent(d, 0);
  // The channel position of each RECV: a compute's data has arrived once that many were sent.
  std::vector<std::vector<int>> recv_slot(d);
  for (int p = 0; p < d; ++p) {
    int nf = 0, nb = 0;
    for (const Action& a : schedule.stages[p])
      recv_slot[p].push_back(a.type == ActionType::kRecvForward    ? nf++
                             : a.type == ActionType::kRecvBackward ? nb++
                                                                   : -1);
  }
  auto slot_of = [&](int p, ActionType recv, int chunk) {
    return recv_slot[p][pos(positions, p, recv, chunk)];
  };
  auto ready = [&](int p, const Action& a) {
    switch (a.type) {
      case ActionType::kRecvForward:
      case ActionType::kRecvBackward:
        return true;
      case ActionType::kSendForward:
        return fwd_posted[p] > fwd_sent[p];
      case ActionType::kSendBackward:
        return bwd_posted[p - 1] > bwd_sent[p - 1];
      case ActionType::kForward:
        return p == 0 || fwd_sent[p - 1] > slot_of(p, ActionType::kRecvForward, a.chunk);
      case ActionType::kBackward:
        return p == d - 1 || bwd_sent[p] > slot_of(p, ActionType::kRecvBackward, a.chunk);
    }
    return true;
  };
  auto waits_for = [&](int p, const Action& a) {
    const std::string k = std::to_string(a.chunk);
    switch (a.type) {
      case ActionType::kSendForward:
        return "stage " + std::to_string(p + 1) + " to post RECV_F" + k;
      case ActionType::kSendBackward:
        return "stage " + std::to_string(p - 1) + " to post RECV_B" + k;
      case ActionType::kForward:
        return "stage " + std::to_string(p - 1) + " to send SEND_F" + k;
      case ActionType::kBackward:
        return "stage " + std::to_string(p + 1) + " to send SEND_B" + k;
      default:
        return std::string("nothing");
    }
  };
  auto run = [&](int p, const Action& a) {
    switch (a.type) {
      case ActionType::kRecvForward:
        ++fwd_posted[p - 1];
        break;
      case ActionType::kRecvBackward:
        ++bwd_posted[p];
        break;
      case ActionType::kSendForward:
        ++fwd_sent[p];
        break;
      case ActionType::kSendBackward:
        ++bwd_sent[p - 1];
        break;
      default:
        break;
    }
  };
  std::vector<size_t> next(d, 0);
  for (bool moved = true; moved;) {
    moved = false;
    for (int p = 0; p < d; ++p) {
      const std::vector<Action>& list = schedule.stages[p];
      while (next[p] < list.size() && ready(p, list[next[p]])) {
        run(p, list[next[p]++]);
        moved = true;
      }
    }
  }
  int first_stuck = -1;
  std::string waits;
  for (int p = 0; p < d; ++p) {
    const std::vector<Action>& list = schedule.stages[p];
    if (next[p] == list.size()) continue;
    if (first_stuck == -1) first_stuck = p;
    const int i = static_cast<int>(next[p]);
    waits += (waits.empty() ? "" : "; ") + at(p, i) + " " + list[i].text() + " waits for " +
             waits_for(p, list[i]);
  }
  if (first_stuck != -1)
    fail(schedule, first_stuck, static_cast<int>(next[first_stuck]),
         "deadlock, no stage can move: " + waits);
}

}  // namespace

void validate_schedule(const Schedule& schedule, const std::vector<Chunk>& chunks) {
  check(schedule.num_stages() >= 1, "invalid schedule: it has no stages");
  const Positions positions = check_structure(schedule, static_cast<int>(chunks.size()));
  check_slice_order(schedule, chunks, positions);
  check_channels(schedule, positions);
  check_inputs(schedule, positions);
  check_deadlock(schedule, positions);
}

}  // namespace infinipipe
