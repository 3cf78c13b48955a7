// Over 400 lines for a reason: one check of a schedule (coverage, slice order, matching sends and
// receives, the spread head's channels), whose rules share one walk of every stage's actions.
#include "infinipipe/schedule/validator.h"

#include <algorithm>
#include <map>

#include "dry_run.h"
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

// Runs every stage's list under action.h's semantics until all are done or none can move.
void check_deadlock(const Schedule& schedule, int num_chunks) {
  DryRun run(schedule, num_chunks);
  // Ranks run their programs; without virtual stages a rank's program is its stage's list.
  const std::vector<std::vector<std::pair<int, int>>> programs = schedule.rank_programs();
  std::vector<size_t> next(programs.size(), 0);
  for (bool moved = true; moved;) {
    moved = false;
    for (size_t r = 0; r < programs.size(); ++r) {
      while (next[r] < programs[r].size()) {
        const auto [p, i] = programs[r][next[r]];
        if (!run.ready(p, i)) break;
        ++next[r];
        run.run(p, i);
        moved = true;
      }
    }
  }
  std::pair<int, int> first_stuck{-1, -1};
  std::string waits;
  for (size_t r = 0; r < programs.size(); ++r) {
    if (next[r] == programs[r].size()) continue;
    const auto [p, i] = programs[r][next[r]];
    if (first_stuck.first == -1) first_stuck = {p, i};
    const std::string rank = schedule.ranks.empty() ? ""
                                                    : "rank " + std::to_string(r) + " step " +
                                                          std::to_string(next[r]) + ", ";
    waits += (waits.empty() ? "" : "; ") + rank + at(p, i) + " " + schedule.stages[p][i].text() +
             " waits for " + run.waits_for(p, i);
  }
  if (first_stuck.first != -1)
    fail(schedule, first_stuck.first, first_stuck.second,
         std::string("deadlock, no ") + (schedule.ranks.empty() ? "stage" : "rank") +
             " can move: " + waits);
}

// Virtual stages (action.h): every stage runs on exactly one rank, which takes each of its
// actions once (a stage without actions, as in an empty step, may be named by none).
void check_ranks(const Schedule& schedule) {
  if (schedule.ranks.empty()) return;
  const int d = schedule.num_stages();
  std::vector<int> rank_of(d, -1), count(d, 0);
  for (int r = 0; r < schedule.num_ranks(); ++r) {
    for (int s : schedule.ranks[r]) {
      check(s >= 0 && s < d, "invalid schedule: rank " + std::to_string(r) + " names stage " +
                                 std::to_string(s) + ", which does not exist (" +
                                 std::to_string(d) + " stages)");
      if (rank_of[s] != -1 && rank_of[s] != r)
        throw Error("invalid schedule: stage " + std::to_string(s) + " runs on rank " +
                    std::to_string(rank_of[s]) + " and on rank " + std::to_string(r) +
                    "; a stage's layers live on one rank");
      rank_of[s] = r;
      ++count[s];
    }
  }
  for (int s = 0; s < d; ++s)
    if (count[s] != static_cast<int>(schedule.stages[s].size()))
      fail(schedule, s, std::min(count[s], static_cast<int>(schedule.stages[s].size())),
           "stage " + std::to_string(s) + " has " + std::to_string(schedule.stages[s].size()) +
               " actions but " +
               (rank_of[s] == -1 ? std::string("no rank runs it")
                                 : "rank " + std::to_string(rank_of[s]) + " takes " +
                                       std::to_string(count[s]) + " steps of it") +
               ": each rank's order names its stages once per action");
}

}  // namespace

void validate_schedule(const Schedule& schedule, const std::vector<Chunk>& chunks) {
  check(schedule.num_stages() >= 1, "invalid schedule: it has no stages");
  check_ranks(schedule);
  const Positions positions = check_structure(schedule, static_cast<int>(chunks.size()));
  const std::vector<int> head = head_stages(schedule, positions, static_cast<int>(chunks.size()));
  check_head_transfers(schedule, head);
  check_head_order(schedule, positions, head);
  check_slice_order(schedule, chunks, positions);
  check_channels(schedule, positions);
  check_inputs(schedule, positions);
  check_deadlock(schedule, static_cast<int>(chunks.size()));
}

}  // namespace infinipipe
