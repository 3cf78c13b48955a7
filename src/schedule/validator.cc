// Over 400 lines for a reason: one check of a schedule (coverage, slice order, matching sends and
// receives, the spread head's channels), whose rules share one walk of every stage's actions.
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
      if (a.type == ActionType::kWeight && !before(ActionType::kBackward))
        fail(schedule, p, i,
             name + " at " + at(p, i) + " runs before B" + chunk +
                 ": a chunk's weight gradients need the output gradients its backward computes");
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

// Spread head (docs/design.md): per chunk, the stage running its H action, or -1. Fails when a
// chunk's H runs on more than one stage.
std::vector<int> head_stages(const Schedule& schedule, const Positions& positions, int num_chunks) {
  std::vector<int> head(num_chunks, -1);
  for (int p = 0; p < schedule.num_stages(); ++p)
    for (int c = 0; c < num_chunks; ++c) {
      const int h = pos(positions, p, ActionType::kHead, c);
      if (h == -1) continue;
      if (head[c] != -1)
        fail(schedule, p, h,
             "H" + std::to_string(c) + " at " + at(p, h) + " runs again: stage " +
                 std::to_string(head[c]) + " already runs it, and a chunk's head runs once");
      head[c] = p;
    }
  return head;
}

// Each head transfer is on the stage it belongs to and names the right peer: the last stage
// sends the hidden state to (SEND_H) and takes the gradient from (RECV_HG) the chunk's head stage
// o; o receives from (RECV_H) and sends back to (SEND_HG) the last stage. None when the head runs
// on the last stage itself, or nowhere.
void check_head_transfers(const Schedule& schedule, const std::vector<int>& head) {
  const int d = schedule.num_stages();
  for (int p = 0; p < d; ++p) {
    const std::vector<Action>& list = schedule.stages[p];
    for (int i = 0; i < static_cast<int>(list.size()); ++i) {
      const Action& a = list[i];
      if (!a.is_head_transfer()) continue;
      const std::string name = a.text() + " at " + at(p, i);
      const std::string h = "H" + std::to_string(a.chunk);
      const int o = head[a.chunk];
      if (o == -1)
        fail(schedule, p, i,
             name + " moves chunk " + std::to_string(a.chunk) + "'s head data, but no stage runs " +
                 h + " (the last stage's F" + std::to_string(a.chunk) + " computes its head)");
      if (o == d - 1)
        fail(schedule, p, i,
             name + " moves head data, but " + h + " runs on the last stage (stage " +
                 std::to_string(d - 1) + ") itself: nothing is sent for it");
      const bool on_last = a.type == ActionType::kSendHead || a.type == ActionType::kRecvHeadGrad;
      const int home = on_last ? d - 1 : o;
      const int peer = on_last ? o : d - 1;
      if (p != home)
        fail(schedule, p, i,
             name + " belongs on stage " + std::to_string(home) + ": " +
                 (on_last ? "the last stage"
                          : "the stage running " + h + " (" + h + " runs on stage " +
                                std::to_string(o) + ")") +
                 (on_last ? " sends the hidden state and takes its gradient"
                          : " receives the hidden state and sends its gradient"));
      if (a.peer_stage != peer)
        fail(schedule, p, i,
             name + " names stage " + std::to_string(a.peer_stage) + ", but its peer is stage " +
                 std::to_string(peer) +
                 (on_last ? " (" + h + " runs there)"
                          : " (the last stage, which runs F" + std::to_string(a.chunk) + ")"));
    }
  }
}

// The order of a chunk's head: with H c on stage o != d-1, the last stage runs F c, SEND_H c@o,
// and has posted RECV_HG c@o before B c; stage o has posted RECV_H c@d-1 before H c and sends
// SEND_HG c@d-1 after it. With o = d-1, H c runs between F c and B c on the last stage.
void check_head_order(const Schedule& schedule, const Positions& positions,
                      const std::vector<int>& head) {
  const int d = schedule.num_stages(), last = d - 1;
  for (int c = 0; c < static_cast<int>(head.size()); ++c) {
    const int o = head[c];
    if (o == -1) continue;
    const std::string k = std::to_string(c), on_o = std::to_string(o);
    const int h = pos(positions, o, ActionType::kHead, c);
    const int f = pos(positions, last, ActionType::kForward, c);
    const int b = pos(positions, last, ActionType::kBackward, c);
    if (o == last) {
      if (h < f)
        fail(schedule, o, h,
             "H" + k + " at " + at(o, h) + " runs before F" + k +
                 ", which computes the hidden state its head reads");
      if (b < h)
        fail(schedule, last, b,
             "B" + k + " at " + at(last, b) + " runs before H" + k +
                 ", which computes the gradient its backward starts from");
      continue;
    }
    const int send_h = pos(positions, last, ActionType::kSendHead, c);
    const int recv_hg = pos(positions, last, ActionType::kRecvHeadGrad, c);
    const int recv_h = pos(positions, o, ActionType::kRecvHead, c);
    const int send_hg = pos(positions, o, ActionType::kSendHeadGrad, c);
    const std::string to_o = "@" + on_o, to_last = "@" + std::to_string(last);
    if (send_h == -1)
      fail(schedule, last, f,
           "F" + k + " at " + at(last, f) + " is never followed by SEND_H" + k + to_o + ": H" + k +
               " runs on stage " + on_o + ", which needs the chunk's hidden state");
    if (send_h < f)
      fail(schedule, last, send_h,
           "SEND_H" + k + to_o + " at " + at(last, send_h) + " sends a hidden state before F" + k +
               " computed it");
    if (recv_hg == -1 || recv_hg > b)
      fail(schedule, last, b,
           "B" + k + " at " + at(last, b) + " has no RECV_HG" + k + to_o +
               " before it: its output gradient from stage " + on_o + " (H" + k +
               ") is never received");
    if (recv_h == -1 || recv_h > h)
      fail(schedule, o, h,
           "H" + k + " at " + at(o, h) + " has no RECV_H" + k + to_last +
               " before it: its hidden state from stage " + std::to_string(last) +
               " is never received");
    if (send_hg == -1)
      fail(schedule, o, h,
           "H" + k + " at " + at(o, h) + " is never followed by SEND_HG" + k + to_last +
               ": the last stage's B" + k + " needs its gradient");
    if (send_hg < h)
      fail(schedule, o, send_hg,
           "SEND_HG" + k + to_last + " at " + at(o, send_hg) + " sends a gradient before H" + k +
               " computed it");
  }
}

// One direction of one link for one kind of message: the SENDs of `sender` and the RECVs of
// `receiver`, in list order. Pipeline channels join neighbours; head channels join the last
// stage and each other stage, one per direction.
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
  for (int o = 0; o + 1 < d; ++o) {
    channels.push_back({d - 1, o, ActionType::kSendHead, ActionType::kRecvHead});
    channels.push_back({o, d - 1, ActionType::kSendHeadGrad, ActionType::kRecvHeadGrad});
  }
  return channels;
}

// The channel (index into all_channels) a SEND or RECV on `stage` uses, -1 for a compute.
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

// The action on a channel's other side for `chunk`: its peer stage set for head transfers.
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

// (chunk, step) of every action of `type` on `stage` from `peer`, in list order.
std::vector<std::pair<int, int>> occurrences(const Schedule& schedule, int stage, ActionType type,
                                             int peer) {
  std::vector<std::pair<int, int>> out;
  const std::vector<Action>& list = schedule.stages[stage];
  for (int i = 0; i < static_cast<int>(list.size()); ++i)
    if (list[i].type == type && list[i].peer(stage) == peer) out.push_back({list[i].chunk, i});
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
    const auto sends = occurrences(schedule, ch.sender, ch.send, ch.receiver);
    const auto recvs = occurrences(schedule, ch.receiver, ch.recv, ch.sender);
    const std::string kind = Action{ch.send, 0}.is_head_transfer() ? " head" : "";
    for (size_t i = 0; i < std::max(sends.size(), recvs.size()); ++i) {
      if (i < sends.size() && i < recvs.size() && sends[i].first == recvs[i].first) continue;
      if (i < sends.size() && pos(positions, ch.receiver, ch.recv, sends[i].first) == -1) {
        fail(schedule, ch.sender, sends[i].second,
             send_of(ch, sends[i].first).text() + " at " + at(ch.sender, sends[i].second) +
                 " has no matching " + recv_of(ch, sends[i].first).text() + " on stage " +
                 std::to_string(ch.receiver) + ": a send blocks until its peer posts the receive");
      }
      if (i < recvs.size() && pos(positions, ch.sender, ch.send, recvs[i].first) == -1) {
        fail(schedule, ch.receiver, recvs[i].second,
             recv_of(ch, recvs[i].first).text() + " at " + at(ch.receiver, recvs[i].second) +
                 " is never sent: stage " + std::to_string(ch.sender) + " has no " +
                 send_of(ch, recvs[i].first).text());
      }
      fail(schedule, ch.receiver, recvs[i].second,
           recv_of(ch, recvs[i].first).text() + " at " + at(ch.receiver, recvs[i].second) +
               " is stage " + std::to_string(ch.receiver) + "'s " + ordinal(i) + kind +
               " receive from stage " + std::to_string(ch.sender) + ", but that stage's " +
               ordinal(i) + kind + " send is " + send_of(ch, sends[i].first).text() +
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

// The RECV whose data a compute waits for, or a compute's type when it needs none: F c its
// RECV_F (not on stage 0), B c its RECV_B (not on the last stage; there, with the head on another
// stage, its RECV_HG), H c on a stage other than the last its RECV_H.
Action input_of(int d, int stage, const Action& a, const std::vector<int>& head) {
  const int k = a.chunk;
  if (a.type == ActionType::kForward && stage > 0) return {ActionType::kRecvForward, k};
  if (a.type == ActionType::kBackward && stage < d - 1) return {ActionType::kRecvBackward, k};
  if (a.type == ActionType::kBackward && head[k] != -1 && head[k] != d - 1)
    return {ActionType::kRecvHeadGrad, k, head[k]};
  if (a.type == ActionType::kHead && stage != d - 1) return {ActionType::kRecvHead, k, d - 1};
  return a;
}

// Runs every stage's list under action.h's semantics until all are done or none can move.
void check_deadlock(const Schedule& schedule, const Positions& positions,
                    const std::vector<int>& head) {
  const int d = schedule.num_stages();
  const std::vector<Channel> channels = all_channels(d);
  // Per channel: receives posted and messages sent so far.
  std::vector<int> posted(channels.size(), 0), sent(channels.size(), 0);
  // Per action: its channel, and for a RECV its place on that channel (a compute's data has
  // arrived once that many were sent).
  std::vector<std::vector<int>> channel(d), recv_slot(d);
  for (int p = 0; p < d; ++p) {
    std::vector<int> count(channels.size(), 0);
    for (const Action& a : schedule.stages[p]) {
      const int ch = channel_of(d, p, a);
      channel[p].push_back(ch);
      recv_slot[p].push_back(a.is_recv() ? count[ch]++ : -1);
    }
  }
  // For a compute waiting on data: its RECV's step, or -1 when it needs none.
  auto input_step = [&](int p, const Action& a) {
    const Action recv = input_of(d, p, a, head);
    return recv.is_recv() ? pos(positions, p, recv.type, a.chunk) : -1;
  };
  auto ready = [&](int p, size_t i) {
    const Action& a = schedule.stages[p][i];
    if (a.is_recv()) return true;
    if (a.is_send()) return posted[channel[p][i]] > sent[channel[p][i]];
    const int r = input_step(p, a);
    return r == -1 || sent[channel[p][r]] > recv_slot[p][r];
  };
  auto waits_for = [&](int p, const Action& a) {
    if (a.is_send()) {
      const Channel& ch = channels[channel_of(d, p, a)];
      return "stage " + std::to_string(ch.receiver) + " to post " + recv_of(ch, a.chunk).text();
    }
    const int r = input_step(p, a);
    if (r == -1) return std::string("nothing");
    const Channel& ch = channels[channel[p][r]];
    return "stage " + std::to_string(ch.sender) + " to send " + send_of(ch, a.chunk).text();
  };
  std::vector<size_t> next(d, 0);
  for (bool moved = true; moved;) {
    moved = false;
    for (int p = 0; p < d; ++p) {
      const std::vector<Action>& list = schedule.stages[p];
      while (next[p] < list.size() && ready(p, next[p])) {
        const size_t i = next[p]++;
        if (list[i].is_recv()) ++posted[channel[p][i]];
        if (list[i].is_send()) ++sent[channel[p][i]];
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
  const std::vector<int> head = head_stages(schedule, positions, static_cast<int>(chunks.size()));
  check_head_transfers(schedule, head);
  check_head_order(schedule, positions, head);
  check_slice_order(schedule, chunks, positions);
  check_channels(schedule, positions);
  check_inputs(schedule, positions);
  check_deadlock(schedule, positions, head);
}

}  // namespace infinipipe
