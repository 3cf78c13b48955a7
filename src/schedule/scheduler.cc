#include "infinipipe/schedule/scheduler.h"

#include <algorithm>

#include "infinipipe/core/error.h"

namespace infinipipe {

namespace {

// How many computes ahead a stage posts the RECV a compute needs. See scheduler.h for why one
// is enough; the property tests run the deadlock check on many random instances.
constexpr size_t kRecvLookahead = 1;

// One stage's actions for one wave. `warmup` forwards open it and the last `cooldown` backwards
// close it with no forward paired to them: what overlapped waves interleave (overlap_next).
struct StagePart {
  std::vector<Action> actions;
  int warmup = 0;
  int cooldown = 0;
};

// Warm-up w, then one forward one backward, then the remaining backwards. A backward whose chunk
// this stage has not forwarded yet (only when a longer chain follows a shorter one, i.e. with
// keep_chain_order) first pulls in the forwards it needs.
StagePart one_f_one_b(const WaveOrder& order, int warmup, std::vector<char>& forwarded) {
  const int n = static_cast<int>(order.forward.size());
  StagePart part;
  std::vector<Action>& out = part.actions;
  out.reserve(2 * static_cast<size_t>(n));
  int f = 0;
  auto forward_next = [&] {
    forwarded[order.forward[f]] = 1;
    out.push_back({ActionType::kForward, order.forward[f++]});
  };
  while (f < std::min(warmup, n)) forward_next();
  part.warmup = f;
  for (int b = 0; b < n; ++b) {
    const size_t before = out.size();
    if (f < n) forward_next();
    while (!forwarded[order.backward[b]]) forward_next();
    out.push_back({ActionType::kBackward, order.backward[b]});
    // A backward with no forward of its own before it extends the cool-down.
    part.cooldown = out.size() - before == 1 ? part.cooldown + 1 : 0;
  }
  return part;
}

// Appends the next wave's part to a stage's actions so that the next wave's warm-up forwards
// fill this wave's cool-down, one forward before each of the last backwards, instead of
// waiting until it ends. Back to back, the last stage idles while the final backward travels
// down the pipeline and the next wave's first forward travels up: a fill and a drain per wave.
// The forwards go before the *last* backwards of the cool-down, so the two waves hold as few
// chunks at once as that allows (the waves were cut to fit memory apart).
void overlap_next(std::vector<Action>& out, int cooldown, const StagePart& next) {
  const int m = std::min(cooldown, next.warmup);
  std::vector<Action> tail(out.end() - m, out.end());
  out.resize(out.size() - m);
  for (int i = 0; i < m; ++i) {
    out.push_back(next.actions[i]);
    out.push_back(tail[i]);
  }
  out.insert(out.end(), next.actions.begin() + m, next.actions.end());
}

std::vector<Action> gpipe(const WaveOrder& order) {
  std::vector<Action> out;
  out.reserve(order.forward.size() + order.backward.size());
  for (int c : order.forward) out.push_back({ActionType::kForward, c});
  for (int c : order.backward) out.push_back({ActionType::kBackward, c});
  return out;
}

// Adds the point-to-point actions around a stage's computes: each compute's SEND right after
// it, and its RECV posted kRecvLookahead computes ahead, a forward's `forward_lookahead` ahead.
// RECVs are posted in compute order per channel and every stage runs the same forward order and
// the same backward order, so each channel's receives come in the order of the peer's sends.
std::vector<Action> with_communication(const std::vector<Action>& computes, int stage,
                                       int num_stages, size_t forward_lookahead) {
  auto recv_for = [&](const Action& a, Action& recv) {
    if (a.type == ActionType::kForward && stage > 0) {
      recv = {ActionType::kRecvForward, a.chunk};
      return true;
    }
    if (a.type == ActionType::kBackward && stage < num_stages - 1) {
      recv = {ActionType::kRecvBackward, a.chunk};
      return true;
    }
    return false;
  };
  // At most a RECV and a SEND per compute: reserved, since the planner builds a schedule per
  // candidate and per wave it weighs (growing these was 5% of its time at 32 stages).
  std::vector<Action> out;
  out.reserve(3 * computes.size());
  size_t posted = 0;   // computes whose RECV (if any) is already in `out`
  size_t scanned = 0;  // computes the pass for forwards further ahead has looked at
  std::vector<char> early(forward_lookahead > kRecvLookahead ? computes.size() : 0, 0);
  for (size_t i = 0; i < computes.size(); ++i) {
    for (; posted < computes.size() && posted <= i + kRecvLookahead; ++posted) {
      Action recv;
      if ((early.empty() || !early[posted]) && recv_for(computes[posted], recv))
        out.push_back(recv);
    }
    // Forwards further ahead (a longer warm-up's), in order, after the nearer RECVs.
    for (scanned = std::max(scanned, posted);
         !early.empty() && scanned < computes.size() && scanned <= i + forward_lookahead;
         ++scanned) {
      Action recv;
      if (computes[scanned].type == ActionType::kForward && recv_for(computes[scanned], recv)) {
        out.push_back(recv);
        early[scanned] = 1;
      }
    }
    const Action& a = computes[i];
    out.push_back(a);
    if (a.type == ActionType::kForward && stage < num_stages - 1)
      out.push_back({ActionType::kSendForward, a.chunk});
    if (a.type == ActionType::kBackward && stage > 0)
      out.push_back({ActionType::kSendBackward, a.chunk});
  }
  return out;
}

}  // namespace

int h2_extra_warmup(int num_stages) { return num_stages / 2; }

const char* to_string(ZeroBubble mode) {
  switch (mode) {
    case ZeroBubble::kH1:
      return "h1";
    case ZeroBubble::kH2:
      return "h2";
    default:
      return "off";
  }
}

ZeroBubble parse_zero_bubble(const std::string& name) {
  if (name == "off") return ZeroBubble::kOff;
  if (name == "h1") return ZeroBubble::kH1;
  if (name == "h2") return ZeroBubble::kH2;
  throw Error("unknown zero-bubble mode \"" + name + "\": expected off, h1 or h2");
}

Schedule with_weight_actions(const Schedule& schedule, ZeroBubble mode) {
  if (mode == ZeroBubble::kOff) return schedule;
  // ZB-H2 differs from ZB-H1 in its warm-up (build_schedule), not in where its W actions go.
  Schedule out;
  out.stages.resize(schedule.stages.size());
  out.stages[0] = schedule.stages[0];  // the first stage's backwards stay whole (scheduler.h)
  for (int p = 1; p < schedule.num_stages(); ++p) {
    const std::vector<Action>& list = schedule.stages[p];
    std::vector<Action>& result = out.stages[p];
    result.reserve(list.size() + list.size() / 3);
    const size_t held_back = static_cast<size_t>(p);  // ZB-H1's allowance (scheduler.h)
    std::vector<int> pending;  // chunks whose B ran and whose W did not, oldest first
    size_t next_due = 0;       // pending[next_due..] are still pending
    auto run_due = [&](size_t keep) {
      while (pending.size() - next_due > keep)
        result.push_back({ActionType::kWeight, pending[next_due++]});
    };
    for (const Action& a : list) {
      check(a.type != ActionType::kWeight,
            "with_weight_actions: stage " + std::to_string(p) + " already has " + a.text());
      if (a.is_compute()) run_due(held_back);
      result.push_back(a);
      if (a.type == ActionType::kBackward) pending.push_back(a.chunk);
    }
    run_due(0);
  }
  return out;
}

WaveOrder order_wave(const std::vector<Chunk>& chunks, const Wave& wave,
                     const ScheduleOptions& options) {
  const int n = static_cast<int>(chunks.size());
  const ChainList all_chains = chain_list(chunks);
  std::vector<int> chain_of(n, -1);
  for (size_t c = 0; c < all_chains.size(); ++c)
    for (int k = all_chains.start[c]; k < all_chains.start[c + 1]; ++k)
      chain_of[all_chains.ids[k]] = static_cast<int>(c);

  std::vector<char> seen(n, 0);
  std::vector<int> in_wave(all_chains.size(), 0);
  std::vector<int> wave_chains;  // in order of first appearance in `wave`
  for (int id : wave) {
    // Messages are built only on failure: the planner orders a wave for every schedule and bound.
    if (id < 0 || id >= n)
      throw Error("wave holds chunk id " + std::to_string(id) + ", but the step has only " +
                  std::to_string(n) + " chunks");
    if (seen[id]) throw Error("chunk " + std::to_string(id) + " appears twice in one wave");
    seen[id] = 1;
    if (in_wave[chain_of[id]]++ == 0) wave_chains.push_back(chain_of[id]);
  }
  const int* ids = all_chains.ids.data();
  for (int c : wave_chains) {
    if (in_wave[c] == all_chains.length(c)) continue;
    for (int k = all_chains.start[c]; k < all_chains.start[c + 1]; ++k)
      if (!seen[ids[k]])
        throw Error("the wave holds part of the chain starting at chunk " +
                    std::to_string(ids[all_chains.start[c]]) + " but not its chunk " +
                    std::to_string(ids[k]) +
                    ": chunks with slices of one sequence must run in the same wave");
  }
  if (!options.keep_chain_order) {
    // Longest first, so the warm-up of k_max - 1 extra forwards covers every chain (see
    // one_f_one_b); equal lengths by their first chunk.
    sort_longest_first(all_chains, wave_chains);
  }
  WaveOrder order;
  order.forward.reserve(wave.size());
  order.backward.reserve(wave.size());
  for (int c : wave_chains) {
    order.forward.insert(order.forward.end(), ids + all_chains.start[c],
                         ids + all_chains.start[c + 1]);
    for (int k = all_chains.start[c + 1] - 1; k >= all_chains.start[c]; --k)
      order.backward.push_back(ids[k]);
  }
  return order;
}

Schedule build_schedule(const std::vector<Chunk>& chunks, const std::vector<Wave>& waves,
                        const ScheduleOptions& options) {
  const int d = options.num_stages;
  check(d >= 1, "a schedule needs at least one stage (num_stages is " + std::to_string(d) + ")");
  const int n = static_cast<int>(chunks.size());
  std::vector<int> wave_of(n, -1);
  for (size_t w = 0; w < waves.size(); ++w) {
    for (int id : waves[w]) {  // messages built only on failure, as in order_wave
      if (id < 0 || id >= n)
        throw Error("wave " + std::to_string(w) + " holds chunk id " + std::to_string(id) +
                    ", but the step has only " + std::to_string(n) + " chunks");
      if (wave_of[id] != -1 && wave_of[id] != static_cast<int>(w))
        throw Error("chunk " + std::to_string(id) + " is in waves " + std::to_string(wave_of[id]) +
                    " and " + std::to_string(w) + ": every chunk must be in exactly one wave");
      wave_of[id] = static_cast<int>(w);
    }
  }
  for (int id = 0; id < n; ++id)
    if (wave_of[id] == -1)
      throw Error("chunk " + std::to_string(id) +
                  " is in no wave: every chunk must be in exactly one");

  std::vector<std::vector<Action>> computes(d);
  for (std::vector<Action>& actions : computes) actions.reserve(2 * static_cast<size_t>(n));
  std::vector<int> cooldown(d, 0);  // of the stage's previous wave
  const int extra = options.extra_warmup > 0                 ? options.extra_warmup
                    : options.zero_bubble == ZeroBubble::kH2 ? h2_extra_warmup(d)
                                                             : 0;
  for (const Wave& wave : waves) {
    const WaveOrder order = order_wave(chunks, wave, options);
    if (order.forward.empty()) continue;
    // k_max: the length of the wave's first chain, which ends where the first backward's chunk
    // (the first chain's last) stands in the forward order.
    const int first_backward_pos = static_cast<int>(
        std::find(order.forward.begin(), order.forward.end(), order.backward.front()) -
        order.forward.begin());
    const int k_max = first_backward_pos + 1;
    std::vector<char> forwarded(n, 0);
    for (int p = 0; p < d; ++p) {
      for (int id : order.forward) forwarded[id] = 0;
      const int warmup = (d - 1 - p) + std::max(0, extra - p) + (k_max - 1);
      if (options.kind == ScheduleKind::kGPipe) {
        const std::vector<Action> part = gpipe(order);
        computes[p].insert(computes[p].end(), part.begin(), part.end());
        continue;
      }
      const StagePart part = one_f_one_b(order, warmup, forwarded);
      if (options.overlap_waves) {
        overlap_next(computes[p], cooldown[p], part);
      } else {
        computes[p].insert(computes[p].end(), part.actions.begin(), part.actions.end());
      }
      cooldown[p] = part.cooldown;
    }
  }
  Schedule schedule;
  schedule.stages.reserve(d);
  // Stage p-1 runs max(0, extra - (p-1)) forwards more than 1F1B before this stage's forwards
  // catch up, about two computes apart here: their RECVs are posted that much further ahead, so
  // those SENDs find them (a SEND waits for its RECV).
  for (int p = 0; p < d; ++p) {
    const int ahead_of_previous = p > 0 ? std::max(0, extra - (p - 1)) : 0;
    schedule.stages.push_back(
        with_communication(computes[p], p, d, kRecvLookahead + 2 * ahead_of_previous));
  }
  if (options.zero_bubble != ZeroBubble::kOff)
    return with_weight_actions(schedule, options.zero_bubble);
  return schedule;
}

bool waves_overlap(const Schedule& schedule, const std::vector<Wave>& waves) {
  std::vector<int> wave_of;
  for (size_t w = 0; w < waves.size(); ++w)
    for (int c : waves[w]) {
      if (c >= static_cast<int>(wave_of.size())) wave_of.resize(c + 1, -1);
      wave_of[c] = static_cast<int>(w);
    }
  for (const std::vector<Action>& stage : schedule.stages) {
    int latest = -1;
    for (const Action& a : stage) {
      // W actions may run late by design (zero bubble): F and B say whether waves overlap.
      const bool forward_or_backward =
          a.type == ActionType::kForward || a.type == ActionType::kBackward;
      if (!forward_or_backward || a.chunk >= static_cast<int>(wave_of.size())) continue;
      if (wave_of[a.chunk] < latest) return true;
      latest = std::max(latest, wave_of[a.chunk]);
    }
  }
  return false;
}

}  // namespace infinipipe
