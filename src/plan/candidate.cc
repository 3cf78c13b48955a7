#include "candidate.h"

#include <algorithm>

#include "infinipipe/schedule/scheduler.h"
#include "planner_support.h"

namespace infinipipe::planning {

double bound_with(const Candidate& cand, const std::vector<double>& extra) {
  double bound = 0;
  for (size_t p = 0; p < cand.busy.size(); ++p)
    bound = std::max(bound, cand.fill[p] + cand.busy[p] + extra[p] + cand.drain[p]);
  return bound;
}

bool over_budget(const Candidate& cand) {
  return std::any_of(cand.excess.begin(), cand.excess.end(), [](double e) { return e > 0; });
}

double one_wave_key(const Candidate& cand) {
  return std::max(cand.optimistic, bound_with(cand, cand.recompute_floor));
}

double waves_key(const Candidate& cand) {
  const size_t last = cand.busy.size() - 1;
  return cand.optimistic + cand.fill[last] + cand.drain[last];
}

double search_key(const Candidate& cand) {
  if (!over_budget(cand)) return std::max(cand.bound, cand.optimistic);
  return std::min(one_wave_key(cand), waves_key(cand));
}

namespace {

// The split sequences of each chunk (split_of[c] .. split_of[c + 1] in seqs), numbered
// 0 .. lengths.size() - 1.
struct SplitIndex {
  std::vector<int> split_of, seqs;
  std::vector<int64_t> lengths;
  explicit SplitIndex(const std::vector<Chunk>& chunks) : split_of(chunks.size() + 1, 0) {
    std::vector<int> number;
    for (size_t c = 0; c < chunks.size(); ++c) {
      for (const Slice& s : chunks[c].slices) {
        if (s.whole()) continue;
        if (s.seq >= static_cast<int>(number.size())) number.resize(s.seq + 1, -1);
        if (number[s.seq] < 0) {
          number[s.seq] = static_cast<int>(lengths.size());
          lengths.push_back(s.seq_length);
        }
        seqs.push_back(number[s.seq]);
      }
      split_of[c + 1] = static_cast<int>(seqs.size());
    }
  }
};

// The 1F1B order of one wave of all chunks and k_max, the first chain's length (a warm-up
// stage p runs (d - 1 - p) + (k_max - 1) forwards).
WaveOrder one_wave_order(const std::vector<Chunk>& chunks, int num_stages, int& k_max) {
  ScheduleOptions schedule_options;
  schedule_options.num_stages = num_stages;
  WaveOrder order = order_wave(chunks, all_chunks(chunks.size()), schedule_options);
  int split_seq = -1;
  for (const Slice& s : chunks[order.forward.front()].slices)
    if (!s.whole()) split_seq = s.seq;
  k_max = 1;
  if (split_seq >= 0) {
    k_max = 0;
    for (const Chunk& c : chunks)
      for (const Slice& s : c.slices) k_max += s.seq == split_seq;
  }
  return order;
}

}  // namespace

bool never_fits_as_is(const std::vector<Chunk>& chunks, const CostModel& cost, int num_stages,
                      double budget_bytes) {
  int k_max = 1;
  const WaveOrder order = one_wave_order(chunks, num_stages, k_max);
  const SplitIndex split(chunks);
  const int n = static_cast<int>(chunks.size());
  // pipeline_bound's walk, its sums added and subtracted in the same order (so the same answer
  // bit for bit), each chunk's bytes computed only once it is reached, stopping at the first
  // moment over the budget.
  std::vector<double> activation(n);
  std::vector<char> known(n);
  std::vector<int> open_chunks(split.lengths.size());
  std::vector<double> kv_bytes(split.lengths.size());
  const double sure_limit = budget_bytes * (1 + 1e-6);
  for (int p = 0; p < num_stages; ++p) {
    if (p > 0 && !cost.chunk_costs_alike(p, p - 1)) std::fill(known.begin(), known.end(), 0);
    for (size_t s = 0; s < split.lengths.size(); ++s)
      kv_bytes[s] = cost.kv_buffer_bytes(split.lengths[s], p);
    std::fill(open_chunks.begin(), open_chunks.end(), 0);
    double kv_open = 0, in_flight = 0;
    const int warmup = std::min(n, (num_stages - 1 - p) + (k_max - 1));
    const double fixed = cost.model_state_bytes(p);
    auto bytes = [&](int c) {
      if (!known[c]) {
        activation[c] = cost.activation_bytes(chunks[c], p, 0);
        known[c] = 1;
      }
      return activation[c];
    };
    for (int i = 0; i < n; ++i) {
      const int added = order.forward[i];
      in_flight += bytes(added);
      for (int k = split.split_of[added]; k < split.split_of[added + 1]; ++k)
        if (open_chunks[split.seqs[k]]++ == 0) kv_open += kv_bytes[split.seqs[k]];
      if (i > warmup) {
        const int removed = order.backward[i - warmup - 1];
        in_flight -= bytes(removed);
        for (int k = split.split_of[removed]; k < split.split_of[removed + 1]; ++k)
          if (--open_chunks[split.seqs[k]] == 0) kv_open -= kv_bytes[split.seqs[k]];
      }
      if (fixed + in_flight + kv_open > sure_limit) return true;
    }
  }
  return false;
}

void pipeline_bound(Candidate& cand, const CostModel& cost, int num_stages, double budget_bytes) {
  int k_max = 1;
  const WaveOrder order = one_wave_order(cand.chunks, num_stages, k_max);
  const Chunk& first = cand.chunks[order.forward.front()];
  const Chunk& last = cand.chunks[order.backward.back()];
  cand.busy.assign(num_stages, 0);
  cand.fill.assign(num_stages, 0);
  cand.drain.assign(num_stages, 0);
  cand.saving_rate.assign(num_stages, 0);
  // Each chunk's slices summed once, not once per stage and use.
  std::vector<double> layer_forward(cand.chunks.size());
  for (size_t c = 0; c < cand.chunks.size(); ++c)
    layer_forward[c] = cost.layer_forward_time(cand.chunks[c]);
  for (int p = 0; p < num_stages; ++p) {
    // A stage whose costs are the previous one's (chunk_costs_alike) has its sums too.
    if (p > 0 && cost.chunk_costs_alike(p, p - 1)) {
      cand.busy[p] = cand.busy[p - 1];
      cand.saving_rate[p] = cand.saving_rate[p - 1];
    } else {
      for (size_t i = 0; i < cand.chunks.size(); ++i) {
        const Chunk& c = cand.chunks[i];
        cand.busy[p] += cost.forward_time_with(c, p, layer_forward[i]) +
                        cost.backward_time_with(c, p, 0, layer_forward[i]);
        cand.saving_rate[p] =
            std::max(cand.saving_rate[p], cost.checkpoint_saving_bytes(c, p) / layer_forward[i]);
      }
    }
    if (p + 1 < num_stages) {
      cand.fill[p + 1] = cand.fill[p] + cost.forward_time(first, p) + cost.p2p_time(first, p);
      cand.drain[p + 1] = cand.drain[p] + cost.backward_time(last, p, 0) + cost.p2p_time(last, p);
    }
  }
  cand.bound = bound_with(cand, std::vector<double>(num_stages, 0));
  cand.optimistic = cand.bound;

  const int n = static_cast<int>(cand.chunks.size());
  cand.excess.assign(num_stages, 0);
  // Recompute of l layers of chunk c saves l * saving(c) bytes at every moment c is in flight
  // and costs l * time(c). Moments whose in-flight sets share no chunk each need their excess
  // saved by different chunks, so the recompute is at least the sum of their excesses over the
  // best saving rate (a feasible dual of the covering program). The walk picks each moment
  // over the budget whose set shares nothing with the last one picked.
  cand.recompute_floor.assign(num_stages, 0);
  std::vector<double> activation(n);
  std::vector<char> marked(n, 0);
  // The chunks in flight, unordered, with each one's place in the list: marking them all costs
  // the list's length, not n (n^2 over a step of thousands of chunks).
  std::vector<int> flying, place(n, -1);
  // The split sequences of each chunk, and how many of each one's chunks are in flight.
  const SplitIndex split(cand.chunks);
  const std::vector<int>& split_of = split.split_of;
  const std::vector<int>& split_seqs = split.seqs;
  const std::vector<int64_t>& split_lengths = split.lengths;
  std::vector<int> open_chunks(split_lengths.size());
  std::vector<double> kv_bytes(split_lengths.size());
  // Sums updated by adding and subtracting: a margin keeps rounding from calling a fit a miss.
  const double sure_limit = budget_bytes * (1 + 1e-6);
  cand.never_fits_as_is = cand.never_fits_recomputed = false;
  cand.never_fits_stage = -1;
  // With every layer recomputed, what any recompute holds at the least (activation bytes fall
  // as layers are recomputed: checkpoint_bytes <= activation_bytes).
  std::vector<double> least_activation(n), workspace(n);
  for (int p = 0; p < num_stages; ++p) {
    if (p == 0 || !cost.chunk_costs_alike(p, p - 1))
      for (int c = 0; c < n; ++c) {
        activation[c] = cost.activation_bytes(cand.chunks[c], p, 0);
        least_activation[c] = cost.activation_bytes(cand.chunks[c], p, cost.layers(p));
        workspace[c] = cost.backward_workspace_bytes(cand.chunks[c], p);
      }
    for (size_t s = 0; s < split_lengths.size(); ++s)
      kv_bytes[s] = cost.kv_buffer_bytes(split_lengths[s], p);
    std::fill(open_chunks.begin(), open_chunks.end(), 0);
    double kv_open = 0;
    const int warmup = std::min(n, (num_stages - 1 - p) + (k_max - 1));
    const double fixed = cost.model_state_bytes(p);
    flying.clear();
    std::fill(place.begin(), place.end(), -1);
    std::fill(marked.begin(), marked.end(), 0);
    double in_flight = 0, least_in_flight = 0, most = 0, disjoint_excess = 0;
    int marked_left = 0;
    for (int i = 0; i < n; ++i) {
      const int added = order.forward[i];
      in_flight += activation[added];
      least_in_flight += least_activation[added];
      for (int k = split_of[added]; k < split_of[added + 1]; ++k)
        if (open_chunks[split_seqs[k]]++ == 0) kv_open += kv_bytes[split_seqs[k]];
      place[added] = static_cast<int>(flying.size());
      flying.push_back(added);
      if (i > warmup) {
        const int removed = order.backward[i - warmup - 1];
        in_flight -= activation[removed];
        least_in_flight -= least_activation[removed];
        for (int k = split_of[removed]; k < split_of[removed + 1]; ++k)
          if (--open_chunks[split_seqs[k]] == 0) kv_open -= kv_bytes[split_seqs[k]];
        if (place[removed] >= 0) {
          place[flying.back()] = place[removed];
          flying[place[removed]] = flying.back();
          flying.pop_back();
          place[removed] = -1;
        }
        if (marked[removed]) {
          marked[removed] = 0;
          --marked_left;
        }
      }
      most = std::max(most, in_flight);
      if (fixed + in_flight + kv_open > sure_limit) cand.never_fits_as_is = true;
      // The backward that follows this forward (after the last warm-up forward, the oldest
      // chunk's; all of them once every forward has run) still holds this set, and its workspace
      // and the dK/dV buffers of its split sequences too (memory_timeline.h).
      const int next =
          i >= warmup ? order.backward[i - warmup] : (i == n - 1 ? order.backward[0] : -1);
      double least = fixed + least_in_flight + kv_open;
      if (next >= 0) {
        least += workspace[next];
        for (int k = split_of[next]; k < split_of[next + 1]; ++k)
          if (std::find(split_seqs.begin() + split_of[next], split_seqs.begin() + k,
                        split_seqs[k]) == split_seqs.begin() + k)
            least += kv_bytes[split_seqs[k]];
      }
      if (least > sure_limit && !cand.never_fits_recomputed) {
        cand.never_fits_recomputed = true;
        cand.never_fits_stage = p;
      }
      const double over = fixed + in_flight - budget_bytes;
      if (over > 0 && marked_left == 0) {
        disjoint_excess += over;
        for (int c : flying) {
          marked[c] = 1;
          ++marked_left;
        }
      }
    }
    cand.excess[p] = std::max(0.0, fixed + most - budget_bytes);
    const double rate = cand.saving_rate[p];
    cand.recompute_floor[p] = rate > 0 ? std::max(disjoint_excess, cand.excess[p]) / rate
                                       : (cand.excess[p] > 0 ? kInfinity : 0);
  }
  cand.key = search_key(cand);
}

}  // namespace infinipipe::planning
