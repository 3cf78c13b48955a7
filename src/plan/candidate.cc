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

void pipeline_bound(Candidate& cand, const CostModel& cost, int num_stages, double budget_bytes) {
  ScheduleOptions schedule_options;
  schedule_options.num_stages = num_stages;
  const WaveOrder order = order_wave(cand.chunks, all_chunks(cand.chunks.size()), schedule_options);
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

  int split_seq = -1;
  for (const Slice& s : first.slices)
    if (!s.whole()) split_seq = s.seq;
  int k_max = 1;
  if (split_seq >= 0) {
    k_max = 0;
    for (const Chunk& c : cand.chunks)
      for (const Slice& s : c.slices) k_max += s.seq == split_seq;
  }
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
  // The split sequences of each chunk (split_of[c] .. split_of[c + 1] in split_seqs), numbered
  // 0 .. split_lengths.size() - 1, and how many of each one's chunks are in flight.
  std::vector<int> split_of(n + 1, 0), split_seqs, split_number;
  std::vector<int64_t> split_lengths;
  for (int c = 0; c < n; ++c) {
    for (const Slice& s : cand.chunks[c].slices) {
      if (s.whole()) continue;
      if (s.seq >= static_cast<int>(split_number.size())) split_number.resize(s.seq + 1, -1);
      if (split_number[s.seq] < 0) {
        split_number[s.seq] = static_cast<int>(split_lengths.size());
        split_lengths.push_back(s.seq_length);
      }
      split_seqs.push_back(split_number[s.seq]);
    }
    split_of[c + 1] = static_cast<int>(split_seqs.size());
  }
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
