// Over 400 lines for a reason: one discrete-event loop (actions, their dependencies, transfers,
// memory at binding moments) whose parts share its event state; the memory timeline and the
// Chrome trace have files of their own.
#include "infinipipe/sim/simulator.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <string>

#include "infinipipe/core/error.h"
#include "infinipipe/core/memory_text.h"
#include "infinipipe/sim/memory_timeline.h"
#include "memory_walk.h"

namespace infinipipe {

namespace {

constexpr double kUnknown = -1;  // times are never negative, so this marks "not yet known"
constexpr double kLeaves = -2;   // offload: the chunk's copy out is not timed yet

// A channel is one kind of message between two stages, named by the stage that receives (or,
// for head gradients, sends) and the kind: forward data into stage q is channel q, backward data
// into stage q is channel d + q, a hidden state into head stage o channel 2d + o, its gradient
// from o to the last stage channel 3d + o.
struct Channel {
  std::vector<int> posted_chunks;  // RECVs posted by the receiver, in order
  std::vector<double> posted_at;
  size_t matched = 0;  // SENDs already matched (messages match in order)
  double free_at = 0;  // the link carries one transfer at a time
};

class Simulation {
 public:
  Simulation(const Schedule& schedule, const std::vector<Chunk>& chunks, const CostModel& cost,
             const Recompute& recompute, const SimOptions& options)
      : schedule_(schedule),
        chunks_(chunks),
        cost_(cost),
        recompute_(recompute),
        options_(options),
        d_(schedule.num_stages()),
        n_(static_cast<int>(chunks.size())),
        virtual_head_(options.virtual_head_stage) {}

  SimResult run();

 private:
  enum class Step { kDone, kBlocked };
  Step execute(int stage, const Action& action);
  Step execute_head(int stage, const Action& action);
  Step execute_send(int stage, const Action& action);
  int channel_of(int stage, const Action& action) const;
  bool is_virtual(int stage) const { return virtual_head_ && stage == d_ - 1; }
  // The last stage's F and B leave the chunk's head out when an H (or the virtual stage) runs it.
  bool with_head(int stage, int chunk) const {
    return !(virtual_head_ || head_stage_[chunk] != -1) || stage != cost_.num_stages() - 1;
  }
  void check_chunk(int stage, int index, const Action& action) const;
  [[noreturn]] void fail(int stage, int index, const std::string& what) const;
  // `programs` and `next`: with virtual stages, each rank's program and its next step in it.
  [[noreturn]] void deadlock(const std::vector<std::vector<std::pair<int, int>>>& programs,
                             const std::vector<size_t>& next) const;
  std::string waiting_for(int stage) const;
  // Planners simulate without events: the test inlines, the event is made out of line.
  void record(int stage, const Action& action, const char* category, double start, double end,
              const char* prefix = nullptr) {
    if (options_.record_events) record_event(stage, action, category, start, end, prefix);
  }
  void record_event(int stage, const Action& action, const char* category, double start, double end,
                    const char* prefix);
  // A compute (F, H or W) from `start` for `duration`: the stage's clock and busy time, the
  // action's start, its memory moment (a forward's at its end, when its chunk is held; the others'
  // at their start) and its event.
  void computed(int stage, const Action& action, double start, double duration,
                const char* category);
  // Offload (SimOptions::offload): the earliest start of compute `a` on `stage` from `start` for
  // `duration` once the chunks its moment drops are on the host and, for a B, its chunk is back;
  // then, once it ends at `end`, the copies that follow it.
  double after_copies(int stage, const Action& action, double start, double duration);
  void start_copies(int stage, const Action& action, double end);
  void measure_memory(int stage);
  void measure_rank_memory();  // virtual stages: a rank's stages add up, against its budget
  void report_peak(int stage, double peak, int peak_index);  // peak_index -1: no moment

  size_t cell(int stage, int chunk) const { return static_cast<size_t>(stage) * n_ + chunk; }

  // A chunk's compute costs on one stage. Stages whose per-chunk costs are alike
  // (CostModel::chunk_costs_alike: same layers and link, neither first nor last) give the same
  // numbers, bit for bit, and a chunk's forward reaches stage p right after stage p - 1's, its
  // backward right after stage p + 1's: the neighbour's numbers are taken when alike (and, for a
  // backward, with the same recompute) instead of asking the cost model again.
  struct BackwardCost {
    double duration = 0, recompute = 0, alltoall = 0;
    int stage = -1, layers = -1;  // where, and with how many recomputed layers
  };
  double forward_cost(int stage, int chunk);
  const BackwardCost& backward_cost(int stage, int chunk);

  const Schedule& schedule_;
  const std::vector<Chunk>& chunks_;
  const CostModel& cost_;
  const Recompute& recompute_;
  const SimOptions& options_;
  const int d_;
  const int n_;
  const bool virtual_head_;

  std::vector<int> pc_;
  // Per stage, its rank: clock_ is per rank, so a rank's stages (virtual stages: action.h) run
  // one action at a time. Without virtual stages each stage is its own rank.
  std::vector<int> rank_of_;
  std::vector<double> clock_;
  std::vector<double> arrive_forward_;   // per (stage, chunk): when the activation is there
  std::vector<double> arrive_backward_;  // per (stage, chunk): when the output gradient is there
  std::vector<char> forwarded_;
  std::vector<char> backwarded_;
  std::vector<char> has_weight_;     // per (stage, chunk): a W takes the weight gradients out of B
  std::vector<char> weighted_;       // per (stage, chunk): its W has run
  std::vector<int> head_stage_;      // per chunk: the stage of its H, or -1
  std::vector<char> headed_;         // per chunk: its H has run
  std::vector<double> arrive_head_;  // per chunk: its hidden state at its head stage
  std::vector<double> arrive_head_grad_;  // per chunk: that state's gradient at the last stage
  std::vector<double> layer_forward_;     // per chunk: its slices summed once, for every stage
  std::vector<char> alike_before_;        // per real stage: chunk_costs_alike(p, p - 1)
  std::vector<double> forward_s_;         // per chunk: its latest forward's duration ...
  std::vector<int> forward_at_;           // ... and the stage it ran on (-1: none yet)
  std::vector<BackwardCost> backward_;    // per chunk: its latest backward's costs
  std::vector<Channel> channels_;
  // Per stage and action: end of a forward, start of a backward (the times of memory moments).
  std::vector<std::vector<double>> moment_time_;
  // Offload: per stage its walk (empty when it keeps every chunk), per (stage, chunk) when its
  // copy out and its copy back end, per host link (Offload::stages_per_link) its copies each way.
  std::vector<OffloadWalk> offload_walk_;
  std::vector<double> copied_out_at_;
  std::vector<double> copied_in_at_;
  std::vector<HostLinkWay> out_links_, in_links_;
  SimResult result_;
};

void Simulation::fail(int stage, int index, const std::string& what) const {
  throw Error("simulate: stage " + std::to_string(stage) + " step " + std::to_string(index) + ": " +
              what + "; fix the schedule (validate_schedule explains the rules)\n" +
              schedule_.grid(stage, index));
}

void Simulation::check_chunk(int stage, int index, const Action& action) const {
  if (action.chunk < 0 || action.chunk >= n_)
    fail(stage, index,
         action.text() + " names chunk " + std::to_string(action.chunk) + " but the step has " +
             std::to_string(n_) + " chunks");
  bool peer_missing = (action.type == ActionType::kSendForward && stage == d_ - 1) ||
                      (action.type == ActionType::kRecvBackward && stage == d_ - 1) ||
                      (action.type == ActionType::kSendBackward && stage == 0) ||
                      (action.type == ActionType::kRecvForward && stage == 0);
  if (action.is_head_transfer())
    peer_missing = action.peer_stage < 0 || action.peer_stage >= d_ || action.peer_stage == stage;
  if (peer_missing) fail(stage, index, action.text() + " has no peer stage");
}

void Simulation::record_event(int stage, const Action& action, const char* category, double start,
                              double end, const char* prefix) {
  SimEvent event;
  event.stage = stage;
  event.name = prefix ? std::string(prefix) + action.text() : action.text();
  event.category = category;
  event.start_s = start;
  event.end_s = end;
  result_.events.push_back(std::move(event));
}

void Simulation::computed(int p, const Action& a, double start, double duration,
                          const char* category) {
  start = after_copies(p, a, start, duration);
  const double end = clock_[rank_of_[p]] = start + duration;
  start_copies(p, a, end);
  result_.busy_s[p] += duration;
  if (options_.record_starts) result_.start_s[p][pc_[p]] = start;
  moment_time_[p][pc_[p]] = a.type == ActionType::kForward ? end : start;
  record(p, a, category, start, end);
}

double Simulation::forward_cost(int p, int c) {
  if (!(forward_at_[c] == p - 1 && alike_before_[p]))
    forward_s_[c] = cost_.forward_time_with(chunks_[c], p, layer_forward_[c], with_head(p, c));
  forward_at_[c] = p;
  return forward_s_[c];
}

const Simulation::BackwardCost& Simulation::backward_cost(int p, int c) {
  BackwardCost& costs = backward_[c];
  const int layers = recompute_layers(recompute_, p, c);
  if (!(costs.stage == p + 1 && alike_before_[p + 1] && costs.layers == layers)) {
    costs.duration =
        cost_.backward_time_with(chunks_[c], p, layers, layer_forward_[c], with_head(p, c));
    costs.recompute = layers > 0 ? cost_.recompute_time(chunks_[c], p, layers) : 0.0;
    costs.alltoall = cost_.alltoall_time(chunks_[c], p, layers);
    costs.layers = layers;
  }
  costs.stage = p;
  return costs;
}

Simulation::Step Simulation::execute(int p, const Action& a) {
  const int c = a.chunk;
  double& clock = clock_[rank_of_[p]];
  switch (a.type) {
    case ActionType::kForward: {
      double start = clock;
      if (p > 0) {
        double arrival = arrive_forward_[cell(p, c)];
        if (arrival == kUnknown) return Step::kBlocked;
        start = std::max(start, arrival);
      }
      if (forwarded_[cell(p, c)]) fail(p, pc_[p], a.text() + " runs twice");
      forwarded_[cell(p, c)] = 1;
      computed(p, a, start, is_virtual(p) ? cost_.head_time(chunks_[c]) : forward_cost(p, c),
               "forward");
      return Step::kDone;
    }
    case ActionType::kBackward: {
      double start = clock;
      const int head = head_stage_[c];
      if (p < d_ - 1 || (head != -1 && head != p)) {
        double arrival = p < d_ - 1 ? arrive_backward_[cell(p, c)] : arrive_head_grad_[c];
        if (arrival == kUnknown) return Step::kBlocked;
        start = std::max(start, arrival);
      }
      if (!forwarded_[cell(p, c)]) fail(p, pc_[p], a.text() + " runs before its forward");
      if (backwarded_[cell(p, c)]) fail(p, pc_[p], a.text() + " runs twice");
      if (p == d_ - 1 && head == p && !headed_[c]) fail(p, pc_[p], a.text() + " runs before its H");
      if (is_virtual(p)) {  // the head's backward is part of its F, the virtual H
        backwarded_[cell(p, c)] = 1;
        if (options_.record_starts) result_.start_s[p][pc_[p]] = start;
        clock = start;
        return Step::kDone;
      }
      const BackwardCost& costs = backward_cost(p, c);
      const double recompute = costs.recompute;
      const double duration = has_weight_[cell(p, c)]
                                  ? costs.duration - cost_.weight_gradient_time(chunks_[c], p)
                                  : costs.duration;
      start = after_copies(p, a, start, duration);
      clock = start + duration;
      start_copies(p, a, clock);
      result_.busy_s[p] += duration;
      result_.recompute_s[p] += recompute;
      if (options_.record_starts) result_.start_s[p][pc_[p]] = start;
      result_.alltoall_s[p] += costs.alltoall;
      backwarded_[cell(p, c)] = 1;
      moment_time_[p][pc_[p]] = start;
      if (recompute > 0) record(p, a, "recompute", start, start + recompute, "recompute ");
      record(p, a, "backward", start + recompute, clock);
      return Step::kDone;
    }
    case ActionType::kRecvForward:
    case ActionType::kRecvBackward:
    case ActionType::kRecvHead:
    case ActionType::kRecvHeadGrad: {
      Channel& channel = channels_[channel_of(p, a)];
      channel.posted_chunks.push_back(c);
      channel.posted_at.push_back(clock);
      if (options_.record_starts) result_.start_s[p][pc_[p]] = clock;
      return Step::kDone;
    }
    case ActionType::kSendForward:
    case ActionType::kSendBackward:
    case ActionType::kSendHead:
    case ActionType::kSendHeadGrad:
      return execute_send(p, a);
    case ActionType::kHead:
      return execute_head(p, a);
    case ActionType::kWeight: {
      if (!backwarded_[cell(p, c)]) fail(p, pc_[p], a.text() + " runs before its B");
      if (weighted_[cell(p, c)]) fail(p, pc_[p], a.text() + " runs twice");
      weighted_[cell(p, c)] = 1;
      computed(p, a, clock, is_virtual(p) ? 0.0 : cost_.weight_gradient_time(chunks_[c], p),
               "weight");
      return Step::kDone;
    }
  }
  return Step::kDone;
}

int Simulation::channel_of(int p, const Action& a) const {
  switch (a.type) {
    case ActionType::kRecvForward:
      return p;
    case ActionType::kSendForward:
      return p + 1;
    case ActionType::kRecvBackward:
      return d_ + p;
    case ActionType::kSendBackward:
      return d_ + p - 1;
    case ActionType::kRecvHead:
      return 2 * d_ + p;
    case ActionType::kSendHead:
      return 2 * d_ + a.peer_stage;
    case ActionType::kRecvHeadGrad:
      return 3 * d_ + a.peer_stage;
    case ActionType::kSendHeadGrad:
      return 3 * d_ + p;
    default:
      return -1;
  }
}

// H c: the head's forward, loss and backward on one stage, once its hidden state has arrived
// (or, on the last stage, after F c).
Simulation::Step Simulation::execute_head(int p, const Action& a) {
  const int c = a.chunk;
  double start = clock_[rank_of_[p]];
  if (p != d_ - 1) {
    if (arrive_head_[c] == kUnknown) return Step::kBlocked;
    start = std::max(start, arrive_head_[c]);
  } else if (!forwarded_[cell(p, c)]) {
    fail(p, pc_[p], a.text() + " runs before F" + std::to_string(c));
  }
  if (headed_[c]) fail(p, pc_[p], a.text() + " runs twice");
  headed_[c] = 1;
  computed(p, a, start, cost_.head_time(chunks_[c]), "head");
  return Step::kDone;
}

Simulation::Step Simulation::execute_send(int p, const Action& a) {
  const int c = a.chunk;
  const int peer = a.peer(p);
  Channel& channel = channels_[channel_of(p, a)];
  if (channel.matched >= channel.posted_chunks.size()) return Step::kBlocked;
  const int posted = channel.posted_chunks[channel.matched];
  Action recv{a.type == ActionType::kSendForward    ? ActionType::kRecvForward
              : a.type == ActionType::kSendBackward ? ActionType::kRecvBackward
              : a.type == ActionType::kSendHead     ? ActionType::kRecvHead
                                                    : ActionType::kRecvHeadGrad,
              posted};
  if (a.is_head_transfer()) recv.peer_stage = p;
  if (posted != c)
    fail(p, pc_[p],
         a.text() + " meets " + recv.text() + " on stage " + std::to_string(peer) +
             " (messages on a link match in order)");
  const bool produced = a.type == ActionType::kSendBackward   ? backwarded_[cell(p, c)]
                        : a.type == ActionType::kSendHeadGrad ? headed_[c]
                                                              : forwarded_[cell(p, c)];
  if (!produced) fail(p, pc_[p], a.text() + " sends before the compute that produces it");
  double& clock = clock_[rank_of_[p]];
  clock = std::max(clock, channel.posted_at[channel.matched]);
  ++channel.matched;
  const double start = std::max(clock, channel.free_at);
  // Sends to and from the virtual head stage go over the last real boundary's link.
  // Between two stages of one rank (virtual stages) the data stays in memory.
  const int last_boundary = cost_.num_stages() - 2;
  const double transfer = rank_of_[p] == rank_of_[peer] ? 0.0
                          : a.is_head_transfer()
                              ? cost_.head_transfer_time(chunks_[c], std::min(p, peer))
                          : std::min(p, peer) > last_boundary
                              ? (last_boundary >= 0 ? cost_.p2p_time(chunks_[c], last_boundary) : 0)
                              : cost_.p2p_time(chunks_[c], std::min(p, peer));
  const double arrival = start + transfer;
  result_.p2p_s[p] += transfer;
  channel.free_at = arrival;
  switch (a.type) {
    case ActionType::kSendForward:
      arrive_forward_[cell(peer, c)] = arrival;
      break;
    case ActionType::kSendBackward:
      arrive_backward_[cell(peer, c)] = arrival;
      break;
    case ActionType::kSendHead:
      arrive_head_[c] = arrival;
      break;
    default:
      arrive_head_grad_[c] = arrival;
      break;
  }
  if (options_.record_starts) result_.start_s[p][pc_[p]] = start;
  record(p, a, "send", start, arrival);
  return Step::kDone;
}

std::string Simulation::waiting_for(int p) const {
  const Action& a = schedule_.stages[p][pc_[p]];
  const std::string chunk = std::to_string(a.chunk);
  switch (a.type) {
    case ActionType::kForward:
      return "waits for chunk " + chunk + "'s activation from stage " + std::to_string(p - 1);
    case ActionType::kBackward:
      return "waits for chunk " + chunk + "'s gradient from stage " + std::to_string(p + 1);
    case ActionType::kSendForward:
      return "waits for stage " + std::to_string(p + 1) + " to post RECV_F" + chunk;
    case ActionType::kSendBackward:
      return "waits for stage " + std::to_string(p - 1) + " to post RECV_B" + chunk;
    case ActionType::kHead:
      return "waits for chunk " + chunk + "'s hidden state from stage " + std::to_string(d_ - 1);
    case ActionType::kSendHead:
      return "waits for stage " + std::to_string(a.peer_stage) + " to post RECV_H" + chunk + "@" +
             std::to_string(p);
    case ActionType::kSendHeadGrad:
      return "waits for stage " + std::to_string(a.peer_stage) + " to post RECV_HG" + chunk + "@" +
             std::to_string(p);
    default:
      return "cannot run";
  }
}

void Simulation::deadlock(const std::vector<std::vector<std::pair<int, int>>>& programs,
                          const std::vector<size_t>& next) const {
  std::string message = programs.empty() ? "deadlock: no stage can make progress;"
                                         : "deadlock: no rank can make progress;";
  int first = -1;
  auto stuck = [&](int p, const std::string& rank) {
    if (first < 0) first = p;
    message += rank + " stage " + std::to_string(p) + " is stuck at " +
               schedule_.stages[p][pc_[p]].text() + " (step " + std::to_string(pc_[p]) + ", " +
               waiting_for(p) + ");";
  };
  if (programs.empty()) {
    for (int p = 0; p < d_; ++p)
      if (pc_[p] < static_cast<int>(schedule_.stages[p].size())) stuck(p, "");
  } else {
    for (size_t r = 0; r < programs.size(); ++r)
      if (next[r] < programs[r].size())
        stuck(programs[r][next[r]].first, " rank " + std::to_string(r) + ":");
  }
  message +=
      " each waits on another stuck stage (a SEND blocks until its peer posts the matching RECV,"
      " a compute until its input has been sent); reorder the actions to break the cycle\n";
  throw Error(message + schedule_.grid(first, pc_[first]));
}

double Simulation::after_copies(int p, const Action& a, double start, double duration) {
  if (offload_walk_.empty() || offload_walk_[p].moment_action.empty()) return start;
  const OffloadWalk& walk = offload_walk_[p];
  // A forward's moment is at its end, the others' at their start.
  const double lead = a.type == ActionType::kForward ? duration : 0.0;
  double ready = start;
  for (int c : walk.copied_out_by[pc_[p]])
    ready = std::max(ready, copied_out_at_[cell(p, c)] - lead);
  if (a.type == ActionType::kBackward && copied_out_at_[cell(p, a.chunk)] != kUnknown) {
    // The resident rule keeps a backward's own chunk, so one that left has been sent for.
    check(copied_in_at_[cell(p, a.chunk)] != kUnknown, "simulate: internal: " + a.text() +
                                                           " on stage " + std::to_string(p) +
                                                           " runs while its chunk is on the host");
    ready = std::max(ready, copied_in_at_[cell(p, a.chunk)]);
  }
  result_.offload_wait_s[p] += ready - start;
  return ready;
}

void Simulation::start_copies(int p, const Action& a, double end) {
  if (offload_walk_.empty() || offload_walk_[p].moment_action.empty()) return;
  const OffloadWalk& walk = offload_walk_[p];
  const double rate = options_.offload->bytes_per_s;
  const int link = p / options_.offload->stages_per_link;
  // A chunk is copied out as soon as its forward is done.
  if (a.type == ActionType::kForward && copied_out_at_[cell(p, a.chunk)] == kLeaves)
    copied_out_at_[cell(p, a.chunk)] = out_links_[link].book(end, walk.moved_bytes[a.chunk] / rate);
  for (int c : walk.copied_in_after[pc_[p]])
    copied_in_at_[cell(p, c)] =
        in_links_[link].book(std::max(end, copied_out_at_[cell(p, c)]), walk.moved_bytes[c] / rate);
}

void Simulation::measure_memory(int p) {
  if (!offload_walk_.empty() && !offload_walk_[p].moment_action.empty()) {
    const OffloadWalk& walk = offload_walk_[p];
    if (options_.record_events || !schedule_.ranks.empty())
      for (size_t m = 0; m < walk.bytes.size(); ++m)
        result_.memory[p].emplace_back(moment_time_[p][walk.moment_action[m]], walk.bytes[m]);
    report_peak(p, walk.peak_bytes, walk.peak_action);
    return;
  }
  // Peaks measured already (SimOptions::known_peaks); with events the timeline walks anyway.
  const MemoryPeaks* known = options_.known_peaks;
  const bool timeline_needed = options_.record_events || !schedule_.ranks.empty();
  if (known && !timeline_needed) {
    report_peak(p, known->bytes[p], known->action_index[p]);
    return;
  }
  // Same terms, same order as moment_bytes, so planner and simulator agree to the last bit.
  std::vector<double> activation(n_);
  double total = 0;
  for (int c = 0; c < n_; ++c) {
    activation[c] = cost_.activation_bytes(chunks_[c], p, recompute_layers(recompute_, p, c));
    total += std::abs(activation[c]);
  }
  auto bytes_at = [&](double fixed_bytes, const int* first, const int* last) {
    double bytes = fixed_bytes;
    for (const int* chunk = first; chunk != last; ++chunk) bytes += activation[*chunk];
    return bytes;
  };
  // The walk's running sum of the activations in flight differs from the sum in list order by
  // rounding only: at most 2n additions and subtractions of partial sums no larger than `total`,
  // one more for a pending forward's set, at most n for the list's sum and one for the fixed
  // bytes, each off by half an epsilon of its result. `slack` is twice that bound. A moment whose
  // running sum plus the slack is below the peak so far cannot hold more than it, so only the
  // others are summed exactly (at 32 stages deep the in-flight sets are dozens of chunks long:
  // re-summing each moment was half the simulator's time); the peak and its moment are the same.
  const double rounding = (8.0 * n_ + 16) * std::numeric_limits<double>::epsilon();
  // The peak of all moments is the peak of the binding ones (memory_timeline.h), which are
  // far fewer when many chunks are in flight at once.
  double peak = 0;
  int peak_index = -1;
  for_each_binding_moment(
      schedule_, p, chunks_, cost_,
      [&](int action_index, double fixed_bytes, const int* first, const int* last, double running) {
        if (peak_index >= 0 &&
            fixed_bytes + running + (std::abs(fixed_bytes) + total) * rounding < peak)
          return;
        const double bytes = bytes_at(fixed_bytes, first, last);
        if (peak_index < 0 || bytes > peak) {
          peak = bytes;
          peak_index = action_index;
        }
      },
      activation.data());
  if (timeline_needed) {
    auto& timeline = result_.memory[p];
    timeline.reserve(schedule_.stages[p].size());
    for_each_memory_moment(
        schedule_, p, chunks_, cost_,
        [&](int action_index, double fixed_bytes, const std::vector<int>& in_flight, double) {
          timeline.emplace_back(
              moment_time_[p][action_index],
              bytes_at(fixed_bytes, in_flight.data(), in_flight.data() + in_flight.size()));
        });
  }
  // A stage with nothing to run still holds its model state.
  if (peak_index < 0) peak = stage_model_state_bytes(schedule_, p, cost_);
  report_peak(p, peak, peak_index);
}

void Simulation::measure_rank_memory() {
  std::vector<double> idle(d_);
  for (int p = 0; p < d_; ++p) idle[p] = stage_model_state_bytes(schedule_, p, cost_);
  const std::vector<RankPeak> peaks =
      rank_memory_peaks(result_.memory, idle, rank_of_, schedule_.num_ranks());
  for (int r = 0; r < static_cast<int>(peaks.size()); ++r) {
    result_.rank_peak_memory_bytes.push_back(peaks[r].bytes);
    if (peaks[r].bytes <= options_.memory_budget_bytes) continue;
    char at[32];
    std::snprintf(at, sizeof at, "%.3f s", peaks[r].time_s);
    result_.over_budget_message += std::string(result_.over_budget ? "; " : "") + "rank " +
                                   std::to_string(r) + " needs " + gib_text(peaks[r].bytes) +
                                   " at " + at + " (its stages together), over its budget of " +
                                   gib_text(options_.memory_budget_bytes);
    result_.over_budget = true;
  }
  if (!options_.record_events)
    for (auto& timeline : result_.memory) timeline.clear();
}

void Simulation::report_peak(int p, double peak, int peak_index) {
  result_.peak_memory_bytes[p] = peak;
  if (peak > options_.memory_budget_bytes) {
    result_.over_budget_message +=
        std::string(result_.over_budget ? "; " : "") + "stage " + std::to_string(p) + " needs " +
        gib_text(peak) + " at " +
        (peak_index >= 0 ? schedule_.stages[p][peak_index].text() : std::string("idle")) +
        ", over its budget of " + gib_text(options_.memory_budget_bytes);
    result_.over_budget = true;
  }
}

SimResult Simulation::run() {
  const int real_stages = d_ - (virtual_head_ ? 1 : 0);
  check(real_stages == cost_.num_stages(),
        "simulate: the schedule has " + std::to_string(d_) + " stages but the cost model " +
            std::to_string(cost_.num_stages()) +
            (virtual_head_ ? " (the schedule should have one more: virtual_head_stage)"
                           : "; build both for the same pipeline"));
  if (!recompute_.empty()) {
    check(static_cast<int>(recompute_.size()) == real_stages,
          "simulate: recompute has " + std::to_string(recompute_.size()) + " stages, expected " +
              std::to_string(real_stages));
    for (int p = 0; p < real_stages; ++p)
      check(static_cast<int>(recompute_[p].size()) == n_,
            "simulate: recompute of stage " + std::to_string(p) + " has " +
                std::to_string(recompute_[p].size()) + " chunks, expected " + std::to_string(n_));
  }

  if (const MemoryPeaks* known = options_.known_peaks) {
    check(static_cast<int>(known->bytes.size()) == real_stages &&
              static_cast<int>(known->action_index.size()) == real_stages,
          "simulate: known_peaks must give one peak per stage");
    for (int p = 0; p < real_stages; ++p)
      check(known->action_index[p] < static_cast<int>(schedule_.stages[p].size()),
            "simulate: a known peak names an action outside its stage's list");
  }

  check(schedule_.ranks.empty() || !virtual_head_,
        "simulate: a schedule with virtual stages has no virtual head stage");
  const bool on_ranks = !schedule_.ranks.empty();
  const int ranks = schedule_.num_ranks();
  rank_of_ = schedule_.rank_of_stage();
  for (int& r : rank_of_) r = std::max(r, 0);  // a stage without actions: any rank will do
  pc_.assign(d_, 0);
  clock_.assign(ranks, 0.0);
  size_t cells = static_cast<size_t>(d_) * n_;
  arrive_forward_.assign(cells, kUnknown);
  arrive_backward_.assign(cells, kUnknown);
  forwarded_.assign(cells, 0);
  backwarded_.assign(cells, 0);
  weighted_.assign(cells, 0);
  has_weight_.assign(cells, 0);
  for (int p = 0; p < d_; ++p)
    for (const Action& a : schedule_.stages[p])
      if (a.type == ActionType::kWeight && a.chunk >= 0 && a.chunk < n_)
        has_weight_[cell(p, a.chunk)] = 1;
  layer_forward_.resize(n_);
  for (int c = 0; c < n_; ++c) layer_forward_[c] = cost_.layer_forward_time(chunks_[c]);
  // alike_before_[p + 1] is read for p = real_stages - 1 too (never alike: the last stage).
  alike_before_.assign(real_stages + 1, 0);
  for (int p = 1; p < real_stages; ++p) alike_before_[p] = cost_.chunk_costs_alike(p, p - 1);
  forward_s_.assign(n_, 0.0);
  forward_at_.assign(n_, -1);
  backward_.assign(n_, BackwardCost{});
  channels_.assign(4 * static_cast<size_t>(d_), Channel{});
  head_stage_ = schedule_.head_stages(n_);
  check(!virtual_head_ ||
            std::all_of(head_stage_.begin(), head_stage_.end(), [](int o) { return o == -1; }),
        "simulate: a schedule with a virtual head stage has no H actions");
  headed_.assign(n_, 0);
  arrive_head_.assign(n_, kUnknown);
  arrive_head_grad_.assign(n_, kUnknown);
  if (options_.record_starts) result_.start_s.assign(d_, {});
  moment_time_.resize(d_);
  result_.busy_s.assign(d_, 0.0);
  result_.recompute_s.assign(d_, 0.0);
  result_.alltoall_s.assign(d_, 0.0);
  result_.p2p_s.assign(d_, 0.0);
  result_.peak_memory_bytes.assign(d_, 0.0);
  result_.memory.assign(d_, {});
  size_t total_actions = 0;
  for (int p = 0; p < d_; ++p) {
    for (int i = 0; i < static_cast<int>(schedule_.stages[p].size()); ++i)
      check_chunk(p, i, schedule_.stages[p][i]);
    moment_time_[p].assign(schedule_.stages[p].size(), 0.0);
    if (options_.record_starts) result_.start_s[p].assign(schedule_.stages[p].size(), 0.0);
    total_actions += schedule_.stages[p].size();
  }
  if (options_.record_events) result_.events.reserve(total_actions);
  if (const Offload* offload = options_.offload) {
    check(!on_ranks && !options_.known_peaks,
          "simulate: offload is not modelled with virtual stages or known_peaks");
    offload->validate(d_);
    offload_walk_.assign(d_, OffloadWalk{});
    copied_out_at_.assign(cells, kUnknown);
    copied_in_at_.assign(cells, kUnknown);
    out_links_.assign(d_, HostLinkWay{});  // at most one link per stage
    in_links_.assign(d_, HostLinkWay{});
    result_.offload_bytes.assign(d_, 0.0);
    result_.offload_wait_s.assign(d_, 0.0);
    for (int p = 0; p < real_stages; ++p) {
      if (!offload->offloads(p)) continue;
      std::vector<double> activation(n_);
      for (int c = 0; c < n_; ++c)
        activation[c] = cost_.activation_bytes(chunks_[c], p, recompute_layers(recompute_, p, c));
      offload_walk_[p] = walk_offload(schedule_, p, chunks_, cost_, activation,
                                      offload->resident[p], offload->prefetch);
      for (const std::vector<int>& out : offload_walk_[p].copied_out_by)
        for (int c : out) copied_out_at_[cell(p, c)] = kLeaves;
      result_.offload_bytes[p] = offload_walk_[p].bytes_each_way;
    }
  }

  // Every action's time is a max over its own rank's previous action and data from earlier
  // actions elsewhere, so running each rank as far as it can, sweeping until nothing moves,
  // yields the event times of a time-ordered simulation. Sweeps alternate direction so that
  // activations (downwards) and gradients (upwards) both travel a whole pipeline per pair.
  // Without virtual stages a rank's program is its stage's list, walked directly (the planner
  // simulates thousands of schedules).
  const std::vector<std::vector<std::pair<int, int>>> programs =
      on_ranks ? schedule_.rank_programs() : std::vector<std::vector<std::pair<int, int>>>{};
  std::vector<size_t> next(on_ranks ? ranks : 0, 0);
  auto run_rank = [&](int r, size_t& done) {
    if (!on_ranks) {
      const std::vector<Action>& actions = schedule_.stages[r];
      while (pc_[r] < static_cast<int>(actions.size()) &&
             execute(r, actions[pc_[r]]) == Step::kDone) {
        ++pc_[r];
        ++done;
      }
      return;
    }
    for (; next[r] < programs[r].size(); ++next[r]) {
      const auto [p, i] = programs[r][next[r]];
      if (pc_[p] != i) fail(p, pc_[p], "rank " + std::to_string(r) + " takes it out of order");
      if (execute(p, schedule_.stages[p][i]) != Step::kDone) return;
      ++pc_[p];
      ++done;
    }
  };
  size_t done = 0;
  for (bool upward = true; done < total_actions; upward = !upward) {
    size_t before = done;
    for (int i = 0; i < ranks; ++i) {
      const int r = upward ? i : ranks - 1 - i;
      run_rank(r, done);
      const double least_end = clock_[r] + (options_.stop_floor.empty() || on_ranks
                                                ? 0.0
                                                : options_.stop_floor[r] - result_.busy_s[r]);
      if (std::max(clock_[r], least_end) > options_.stop_above) {
        result_.step_time_s = std::max(clock_[r], least_end);
        result_.stopped_early = true;
        return std::move(result_);
      }
    }
    if (done == before) deadlock(programs, next);
  }

  // Each stage synchronises its gradients once its last action is done; the step ends with the
  // last of them. Not a bubble: the stage is busy communicating. With head replicas on every
  // stage the replicas' gradients are then all-reduced over every rank, which ends every stage's
  // step at once: charged to each stage's sync (the latest end plus it is the step's end).
  result_.gradient_sync_s.assign(d_, 0.0);
  const bool replicas = cost_.head_replicas();
  const double head_sync = replicas ? cost_.head_replica_sync_time() : 0.0;
  for (int p = 0; p < real_stages; ++p)
    result_.gradient_sync_s[p] = cost_.gradient_sync_time(p, replicas) + head_sync;
  // A rank synchronises its stages' gradients one after the other.
  std::vector<double> rank_sync(ranks, 0.0), rank_busy(ranks, 0.0);
  for (int p = 0; p < d_; ++p) {
    rank_sync[rank_of_[p]] += result_.gradient_sync_s[p];
    rank_busy[rank_of_[p]] += result_.busy_s[p];
  }
  for (int r = 0; r < ranks; ++r)
    result_.step_time_s = std::max(result_.step_time_s, clock_[r] + rank_sync[r]);
  // Per stage, its rank's bubble: the rank idles, not a stage.
  result_.bubble_fraction.assign(d_, 0.0);
  for (int p = 0; p < d_; ++p)
    if (result_.step_time_s > 0)
      result_.bubble_fraction[p] =
          1 - (rank_busy[rank_of_[p]] + rank_sync[rank_of_[p]]) / result_.step_time_s;
  for (int p = 0; p < real_stages; ++p) measure_memory(p);
  if (on_ranks) measure_rank_memory();
  if (result_.over_budget)
    result_.over_budget_message +=
        "; checkpoint more layers, use smaller chunks or split the step into more waves";
  return std::move(result_);
}

}  // namespace

double SimResult::mean_bubble_fraction() const {
  if (bubble_fraction.empty()) return 0;
  double total = 0;
  for (double b : bubble_fraction) total += b;
  return total / bubble_fraction.size();
}

double SimResult::total_recompute_s() const {
  double total = 0;
  for (double r : recompute_s) total += r;
  return total;
}

SimResult simulate(const Schedule& schedule, const std::vector<Chunk>& chunks,
                   const CostModel& cost, const Recompute& recompute, const SimOptions& options) {
  return Simulation(schedule, chunks, cost, recompute, options).run();
}

}  // namespace infinipipe
