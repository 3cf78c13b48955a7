#include "wave_bounds.h"

#include <algorithm>
#include <string>

#include "infinipipe/core/error.h"
#include "planner_support.h"

namespace infinipipe::planning {

WaveBounds::WaveBounds(const std::vector<Chunk>& chunks, const CostModel& cost, int num_stages)
    : chunks_(chunks), cost_(cost), num_stages_(num_stages) {
  const int n = static_cast<int>(chunks.size());
  const ChainList all_chains = chain_list(chunks);
  std::vector<int> by_order(all_chains.size());
  for (size_t i = 0; i < by_order.size(); ++i) by_order[i] = static_cast<int>(i);
  sort_longest_first(all_chains, by_order);
  chain_start_.assign(1, 0);
  chain_start_.reserve(all_chains.size() + 1);
  chain_ids_.reserve(n);
  chain_of_.assign(n, -1);
  for (int i : by_order) {
    for (int k = all_chains.start[i]; k < all_chains.start[i + 1]; ++k) {
      chain_ids_.push_back(all_chains.ids[k]);
      chain_of_[all_chains.ids[k]] = static_cast<int>(chain_start_.size()) - 1;
    }
    chain_start_.push_back(static_cast<int>(chain_ids_.size()));
  }

  // Split sequences numbered in order of first appearance, and every sequence's slice count.
  split_of_.assign(n + 1, 0);
  std::vector<int> number, slices_of;
  for (int c = 0; c < n; ++c) {
    for (const Slice& s : chunks[c].slices) {
      if (s.seq >= static_cast<int>(number.size())) {
        number.resize(s.seq + 1, -1);
        slices_of.resize(s.seq + 1, 0);
      }
      ++slices_of[s.seq];
      if (s.whole()) continue;
      if (number[s.seq] < 0) {
        number[s.seq] = static_cast<int>(split_lengths_.size());
        split_lengths_.push_back(s.seq_length);
      }
      split_seqs_.push_back(number[s.seq]);
    }
    split_of_[c + 1] = static_cast<int>(split_seqs_.size());
  }
  // A wave holds whole chains, so a split sequence's slices are all in the wave of its chain.
  k_max_of_.assign(n, 1);
  for (int c = 0; c < n; ++c) {
    int split_seq = -1;
    for (const Slice& s : chunks[c].slices)
      if (!s.whole()) split_seq = s.seq;
    if (split_seq >= 0) k_max_of_[c] = slices_of[split_seq];
  }

  int classes = 0;
  class_of_.assign(num_stages, 0);
  for (int p = 0; p < num_stages; ++p)
    class_of_[p] = p > 0 && cost.chunk_costs_alike(p, p - 1) ? class_of_[p - 1] : classes++;
  const size_t cells = static_cast<size_t>(classes) * n;
  compute_.resize(cells);
  saving_rate_.resize(cells);
  activation_.resize(cells);
  least_activation_.resize(cells);
  workspace_.resize(cells);
  const double recompute_ratio = cost.coefficients().checkpointed_forward_ratio;
  std::vector<double> layer_forward(n);
  for (int c = 0; c < n; ++c) layer_forward[c] = cost.layer_forward_time(chunks[c]);
  for (int p = 0; p < num_stages; ++p) {
    if (p > 0 && class_of_[p] == class_of_[p - 1]) continue;
    const size_t at = static_cast<size_t>(class_of_[p]) * n;
    for (int c = 0; c < n; ++c) {
      const Chunk& chunk = chunks[c];
      compute_[at + c] = cost.forward_time_with(chunk, p, layer_forward[c]) +
                         cost.backward_time_with(chunk, p, 0, layer_forward[c]);
      // A recomputed layer costs recompute_ratio forwards or more (all-to-alls besides), so
      // dividing by that part alone keeps the rate an upper bound when the ratio is below 1, as
      // calibrated on CPUs (0.88-0.99).
      saving_rate_[at + c] =
          cost.checkpoint_saving_bytes(chunk, p) / (recompute_ratio * layer_forward[c]);
      activation_[at + c] = cost.activation_bytes(chunk, p, 0);
      least_activation_[at + c] = cost.activation_bytes(chunk, p, cost.layers(p));
      workspace_[at + c] = cost.backward_workspace_bytes(chunk, p);
    }
  }
  const size_t splits = split_lengths_.size();
  kv_bytes_.resize(splits * num_stages);
  for (int p = 0; p < num_stages; ++p)
    for (size_t s = 0; s < splits; ++s)
      kv_bytes_[p * splits + s] = cost.kv_buffer_bytes(split_lengths_[s], p);

  in_wave_.assign(n, 0);
  marked_.assign(n, 0);
  place_.assign(n, -1);
  open_chunks_.assign(splits, 0);
}

void WaveBounds::bound(const Wave& wave, Candidate& out, double budget_bytes) {
  const int n_all = static_cast<int>(chunks_.size());
  const int n = static_cast<int>(wave.size());
  check(n > 0, "a wave to bound needs a chunk");
  // The wave's chains in order_wave's order (longest first, then by first chunk).
  std::vector<int> wave_chains;
  for (int i = 0; i < n; ++i) {
    const int c = wave[i];
    if (c < 0 || c >= n_all || (i > 0 && c <= wave[i - 1]))
      throw Error("a wave to bound holds ascending chunk ids of the step, not " +
                  std::to_string(c) + " at position " + std::to_string(i));
    in_wave_[c] = 1;
    if (chain_ids_[chain_start_[chain_of_[c]]] == c) wave_chains.push_back(chain_of_[c]);
  }
  std::sort(wave_chains.begin(), wave_chains.end());
  forward_.clear();
  backward_.clear();
  bool whole = true;
  for (int chain : wave_chains) {
    for (int k = chain_start_[chain]; k < chain_start_[chain + 1]; ++k) {
      whole = whole && in_wave_[chain_ids_[k]];
      forward_.push_back(chain_ids_[k]);
    }
    for (int k = chain_start_[chain + 1] - 1; k >= chain_start_[chain]; --k)
      backward_.push_back(chain_ids_[k]);
  }
  for (int c : wave) in_wave_[c] = 0;
  if (!whole || static_cast<int>(forward_.size()) != n)
    throw Error("a wave to bound must hold whole chains");
  Candidate* outs[] = {&out};
  walk({n}, {&wave}, outs, budget_bytes);
}

std::vector<int> WaveBounds::length_runs() const {
  std::vector<int> runs;
  const int chains = static_cast<int>(chain_start_.size()) - 1;
  for (int i = 0; i < chains; ++i)
    if (i == 0 || chain_start_[i + 1] - chain_start_[i] != chain_start_[i] - chain_start_[i - 1])
      runs.push_back(i);
  runs.push_back(chains);
  return runs;
}

void WaveBounds::bound_runs(int first_chain, const std::vector<int>& end_chains,
                            std::vector<Candidate>& out, double budget_bytes) {
  const int chains = static_cast<int>(chain_start_.size()) - 1;
  for (size_t k = 0; k < end_chains.size(); ++k)
    if (end_chains[k] <= (k == 0 ? first_chain : end_chains[k - 1]) || end_chains[k] > chains ||
        first_chain < 0)
      throw Error("bound_runs needs ascending chain ends after the first chain, within the step");
  out.resize(end_chains.size());
  if (end_chains.empty()) return;
  forward_.clear();
  backward_.clear();
  std::vector<int> ends;
  std::vector<Wave> waves(end_chains.size());
  std::vector<const Wave*> ids;
  const int n_all = static_cast<int>(chunks_.size());
  int chain = first_chain;
  for (size_t k = 0; k < end_chains.size(); ++k) {
    for (; chain < end_chains[k]; ++chain) {
      for (int i = chain_start_[chain]; i < chain_start_[chain + 1]; ++i) {
        forward_.push_back(chain_ids_[i]);
        in_wave_[chain_ids_[i]] = 1;
      }
      for (int i = chain_start_[chain + 1] - 1; i >= chain_start_[chain]; --i)
        backward_.push_back(chain_ids_[i]);
    }
    ends.push_back(static_cast<int>(forward_.size()));
    waves[k].reserve(forward_.size());
    for (int c = 0; c < n_all; ++c)
      if (in_wave_[c]) waves[k].push_back(c);
    ids.push_back(&waves[k]);
  }
  for (int c : forward_) in_wave_[c] = 0;
  std::vector<Candidate*> outs;
  for (Candidate& cand : out) outs.push_back(&cand);
  walk(ends, ids, outs.data(), budget_bytes);
}

void WaveBounds::walk(const std::vector<int>& ends, const std::vector<const Wave*>& ids,
                      Candidate* const* out, double budget_bytes) {
  const int n_all = static_cast<int>(chunks_.size());
  const int n = ends.back();
  const int d = num_stages_;
  const int waves = static_cast<int>(ends.size());
  const int k_max = k_max_of_[forward_.front()];
  const Chunk& first = chunks_[forward_.front()];
  for (int w = 0; w < waves; ++w) {
    Candidate& bounds = *out[w];
    const Chunk& last = chunks_[backward_[ends[w] - 1]];
    bounds.busy.assign(d, 0);
    bounds.fill.assign(d, 0);
    bounds.drain.assign(d, 0);
    bounds.saving_rate.assign(d, 0);
    for (int p = 0; p < d; ++p) {
      if (p > 0 && class_of_[p] == class_of_[p - 1]) {
        bounds.busy[p] = bounds.busy[p - 1];
        bounds.saving_rate[p] = bounds.saving_rate[p - 1];
      } else {
        // In ascending chunk order, as pipeline_bound sums the chunks of the wave alone.
        const size_t at = static_cast<size_t>(class_of_[p]) * n_all;
        for (int c : *ids[w]) {
          bounds.busy[p] += compute_[at + c];
          bounds.saving_rate[p] = std::max(bounds.saving_rate[p], saving_rate_[at + c]);
        }
      }
      if (p + 1 < d) {
        bounds.fill[p + 1] =
            bounds.fill[p] + cost_.forward_time(first, p) + cost_.p2p_time(first, p);
        bounds.drain[p + 1] =
            bounds.drain[p] + cost_.backward_time(last, p, 0) + cost_.p2p_time(last, p);
      }
    }
    bounds.bound = bound_with(bounds, std::vector<double>(d, 0));
    bounds.optimistic = bounds.bound;
    bounds.excess.assign(d, 0);
    bounds.recompute_floor.assign(d, 0);
    bounds.never_fits_as_is = bounds.never_fits_recomputed = false;
    bounds.never_fits_stage = -1;
  }

  // pipeline_bound's memory walk (candidate.h), once over the longest wave: a shorter wave's
  // moments are the first of its moments (its chains come first, forwards and backwards), but
  // for its last forward while still warming up, after which its first backward follows.
  const double sure_limit = budget_bytes * (1 + 1e-6);
  const size_t splits = split_lengths_.size();
  for (int p = 0; p < d; ++p) {
    const size_t at = static_cast<size_t>(class_of_[p]) * n_all;
    const double* activation = activation_.data() + at;
    const double* least_activation = least_activation_.data() + at;
    const double* workspace = workspace_.data() + at;
    const double* kv_bytes = kv_bytes_.data() + p * splits;
    for (int c : forward_) {
      for (int k = split_of_[c]; k < split_of_[c + 1]; ++k) open_chunks_[split_seqs_[k]] = 0;
      place_[c] = -1;
      marked_[c] = 0;
    }
    flying_.clear();
    double kv_open = 0;
    const int warmup_steps = (d - 1 - p) + (k_max - 1);
    const int warmup = std::min(n, warmup_steps);
    const double fixed = cost_.model_state_bytes(p);
    double in_flight = 0, least_in_flight = 0, most = 0, disjoint_excess = 0;
    bool as_is = false, recomputed = false;
    int marked_left = 0, wave = 0;
    // The fully recomputed floor at a moment, with the backward `next` (-1: none) after it.
    auto least_over = [&](int next) {
      double least = fixed + least_in_flight + kv_open;
      if (next >= 0) {
        least += workspace[next];
        const auto seqs = split_seqs_.begin();
        for (int k = split_of_[next]; k < split_of_[next + 1]; ++k)
          if (std::find(seqs + split_of_[next], seqs + k, seqs[k]) == seqs + k)
            least += kv_bytes[seqs[k]];
      }
      return least > sure_limit;
    };
    for (int i = 0; i < n; ++i) {
      const int added = forward_[i];
      in_flight += activation[added];
      least_in_flight += least_activation[added];
      for (int k = split_of_[added]; k < split_of_[added + 1]; ++k)
        if (open_chunks_[split_seqs_[k]]++ == 0) kv_open += kv_bytes[split_seqs_[k]];
      place_[added] = static_cast<int>(flying_.size());
      flying_.push_back(added);
      if (i > warmup) {
        const int removed = backward_[i - warmup - 1];
        in_flight -= activation[removed];
        least_in_flight -= least_activation[removed];
        for (int k = split_of_[removed]; k < split_of_[removed + 1]; ++k)
          if (--open_chunks_[split_seqs_[k]] == 0) kv_open -= kv_bytes[split_seqs_[k]];
        if (place_[removed] >= 0) {
          place_[flying_.back()] = place_[removed];
          flying_[place_[removed]] = flying_.back();
          flying_.pop_back();
          place_[removed] = -1;
        }
        if (marked_[removed]) {
          marked_[removed] = 0;
          --marked_left;
        }
      }
      most = std::max(most, in_flight);
      if (fixed + in_flight + kv_open > sure_limit) as_is = true;
      // The backward that follows this forward (after the last warm-up forward, the oldest
      // chunk's; all of them once every forward has run) still holds this set, and its workspace
      // and the dK/dV buffers of its split sequences too (memory_timeline.h). Only the first
      // moment over is kept: once one is found, the others need not be added up.
      const int next = i >= warmup ? backward_[i - warmup] : (i == n - 1 ? backward_[0] : -1);
      // A shorter wave ending here while still warming up: its first backward follows.
      const bool own_last = i + 1 == ends[wave] && i + 1 < n && i < warmup_steps;
      const bool recomputed_before = recomputed;
      if (!recomputed && least_over(next)) recomputed = true;
      const double over = fixed + in_flight - budget_bytes;
      if (over > 0 && marked_left == 0) {
        disjoint_excess += over;
        for (int c : flying_) {
          marked_[c] = 1;
          ++marked_left;
        }
      }
      if (i + 1 != ends[wave]) continue;
      Candidate& bounds = *out[wave++];
      bounds.excess[p] = std::max(0.0, fixed + most - budget_bytes);
      const double rate = bounds.saving_rate[p];
      bounds.recompute_floor[p] = rate > 0 ? std::max(disjoint_excess, bounds.excess[p]) / rate
                                           : (bounds.excess[p] > 0 ? kInfinity : 0);
      bounds.never_fits_as_is = bounds.never_fits_as_is || as_is;
      const bool over_here = own_last ? recomputed_before || least_over(backward_[0]) : recomputed;
      if (over_here && !bounds.never_fits_recomputed) {
        bounds.never_fits_recomputed = true;
        bounds.never_fits_stage = p;
      }
    }
  }
  for (int w = 0; w < waves; ++w) out[w]->key = search_key(*out[w]);
}

}  // namespace infinipipe::planning
