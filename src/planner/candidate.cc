#include "candidate.h"

#include <algorithm>
#include <numeric>

#include "infinipipe/schedule/scheduler.h"
#include "planner_support.h"
#include "wave_bounds.h"

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
// stage p runs (d - 1 - p) + (k_max - 1) forwards). order_wave's order, made without its checks
// of the wave (every chain is whole in the wave of all chunks) and its chain lookups: the chains
// longest first, each forward in order and backward in reverse.
WaveOrder one_wave_order(const std::vector<Chunk>& chunks, int& k_max) {
  const ChainList list = chain_list(chunks);
  std::vector<int> longest_first(list.size());
  std::iota(longest_first.begin(), longest_first.end(), 0);
  sort_longest_first(list, longest_first);
  WaveOrder order;
  order.forward.reserve(chunks.size());
  order.backward.reserve(chunks.size());
  const int* ids = list.ids.data();
  for (int c : longest_first) {
    order.forward.insert(order.forward.end(), ids + list.start[c], ids + list.start[c + 1]);
    for (int k = list.start[c + 1] - 1; k >= list.start[c]; --k) order.backward.push_back(ids[k]);
  }
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
  const WaveOrder order = one_wave_order(chunks, k_max);
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
  WaveBounds(cand.chunks, cost, num_stages)
      .bound(all_chunks(cand.chunks.size()), cand, budget_bytes);
}

}  // namespace infinipipe::planning
