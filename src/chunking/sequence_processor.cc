#include "infinipipe/chunking/sequence_processor.h"

#include <algorithm>
#include <limits>
#include <numeric>
#include <string>

#include "infinipipe/chunking/split_mesh.h"
#include "infinipipe/core/error.h"

namespace infinipipe {

void check_lengths(const std::vector<int64_t>& lengths) {
  check(!lengths.empty(), "the step has no sequences: pass at least one sequence length");
  // Every candidate's chunking checks the step again: the message is built only on failure.
  for (size_t i = 0; i < lengths.size(); ++i)
    if (lengths[i] <= 0)
      throw Error("sequence " + std::to_string(i) + " has length " + std::to_string(lengths[i]) +
                  ": every sequence needs at least one token (drop empty samples)");
}

namespace {

// A chunk being filled by EPP's packing: at most one tail of a long sequence, whole short ones.
struct Bucket {
  std::vector<Slice> slices;  // the tail, if any, first
  int64_t tokens = 0;
  int64_t tail_tokens = 0;
  double time = 0;  // per layer, without the per-chunk overhead (as the mesh's target)
};

void add_slice(Bucket& bucket, const Slice& slice, const CostModel& cost) {
  bucket.slices.push_back(slice);
  bucket.tokens += slice.length();
  bucket.time += cost.slice_layer_time(slice.context(), slice.length());
}

// Bucket for a short sequence of `tokens` and `time` under the limits, or -1. Among the buckets
// that fit, the one with the fewest tail tokens, then the lowest time: tails carry context, so
// they fill their chunk's time faster than their tokens suggest.
int pick_bucket(const std::vector<Bucket>& buckets, int64_t tokens, double time, int64_t token_cap,
                double time_target) {
  int best = -1;
  for (int i = 0; i < static_cast<int>(buckets.size()); ++i) {
    const Bucket& b = buckets[i];
    if (b.tokens + tokens > token_cap || b.time + time > time_target) continue;
    if (best < 0 || b.tail_tokens < buckets[best].tail_tokens ||
        (b.tail_tokens == buckets[best].tail_tokens && b.time < buckets[best].time))
      best = i;
  }
  return best;
}

// The cuts of [from, to) into `pieces` pieces of at most `cap` tokens, each cut as near its
// equal-cost place as the cap allows: clamped so every piece keeps at least one token and the
// pieces left can still hold the rest. Always possible for ceil(tokens / cap) <= pieces <= tokens.
template <typename EqualCostCut>
std::vector<int64_t> capped_cuts(int64_t from, int64_t to, int64_t pieces, int64_t cap,
                                 const EqualCostCut& equal_cost_cut) {
  std::vector<int64_t> cuts{from};
  for (int64_t i = 1; i < pieces; ++i) {
    const int64_t prev = cuts.back(), left = pieces - i;  // pieces after this cut
    const int64_t lowest = std::max(prev + 1, to - left * cap),
                  highest = std::min(prev + cap, to - left);
    cuts.push_back(std::clamp(equal_cost_cut(prev, i, pieces), lowest, highest));
  }
  cuts.push_back(to);
  return cuts;
}

// cap_mesh_slices cuts a mesh slice into at most this many times the fewest pieces the cap
// allows: on the plan tool's default comparison (`infinipipe-plan --distribution wikipedia
// --batch 512 --context 98304 --model llama-13b --hardware a800 --stages 8 --memory-gib 80
// --method epp --steps 5`) the equal-cost pieces needed at most 1.67 times the fewest, in
// tests/chunking (LLaMA-13B, 98,304 tokens, K = 1) at most 2.63; one 400K-token sequence of the
// tiny model asked for 10,712 pieces of a 141,162-token slice under a 1,024 cap (78 times the
// fewest, 13 tokens each), and a whole 960,000-token one for more pieces than tokens.
constexpr int64_t kMaxPiecesPerFewest = 4;
// Counts tried after the fewest whose first piece fits: in every case above the first count
// tried fitted, so this only bounds the work when rounding says otherwise.
constexpr int kMaxPieceCountTries = 8;

}  // namespace

SplitMesh cap_mesh_slices(const SplitMesh& mesh, int64_t max_slice_tokens, const CostModel& cost) {
  check(max_slice_tokens >= 1, "the chunk token cap " + std::to_string(max_slice_tokens) +
                                   " is invalid: it must be at least 1 token");
  check(mesh.boundaries.size() >= 2 && mesh.boundaries.front() == 0,
        "cap_mesh_slices: the mesh needs boundaries 0 = b_0 < ... < b_K");
  auto prefix_cost = [&](int64_t x) { return cost.prefix_layer_time(x); };
  SplitMesh capped;
  capped.time_target = mesh.time_target;
  capped.boundaries.push_back(0);
  for (size_t j = 1; j < mesh.boundaries.size(); ++j) {
    const int64_t from = mesh.boundaries[j - 1], to = mesh.boundaries[j];
    check(from < to, "cap_mesh_slices: the mesh needs boundaries 0 = b_0 < ... < b_K");
    std::vector<int64_t> cuts{from, to};
    const int64_t tokens = to - from;
    if (tokens > max_slice_tokens) {
      const int64_t fewest = (tokens + max_slice_tokens - 1) / max_slice_tokens;
      const double base = prefix_cost(from), total = prefix_cost(to) - base;
      // Cut i of `pieces` equal-cost pieces: the smallest x after the previous cut with
      // F(x) >= F(from) + i * step, kept below `to`.
      auto equal_cost_cut = [&](int64_t after, int64_t i, int64_t pieces) {
        const double step = total / double(pieces);
        int64_t lo = after + 1, hi = to;
        while (lo < hi) {
          const int64_t mid = lo + (hi - lo) / 2;
          if (prefix_cost(mid) >= base + double(i) * step)
            hi = mid;
          else
            lo = mid + 1;
        }
        return std::min(lo, to - 1);
      };
      // Equal-cost pieces put the most tokens in the first one (it has the least context), so the
      // fewest pieces that respect the cap may be more than the token count alone suggests: the
      // fewest whose first piece is within the cap (it shrinks as pieces grow, so bisect), then
      // the first count from there whose every piece fits (integer cuts could leave a middle
      // piece a token over). Near a sequence's start the cost is mostly attention (F(x) ~ a1 x^2),
      // so the first piece alone needs about (tokens / cap)^2 pieces, and at long lengths the
      // last pieces get below one token: no count works (one 960,000-token sequence never
      // finished planning, issue 15). Beyond `most` pieces, or when none works, the pieces are
      // the equal-cost ones of `most` cut to the cap instead.
      const int64_t most = std::min(tokens, kMaxPiecesPerFewest * fewest);
      auto first_fits = [&](int64_t pieces) {
        return equal_cost_cut(from, 1, pieces) - from <= max_slice_tokens;
      };
      bool fits = false;
      if (first_fits(most)) {
        int64_t pieces = fewest, hi = most;
        while (pieces < hi) {
          const int64_t mid = pieces + (hi - pieces) / 2;
          if (first_fits(mid))
            hi = mid;
          else
            pieces = mid + 1;
        }
        for (int tries = 0; tries < kMaxPieceCountTries && pieces <= most; ++tries, ++pieces) {
          cuts.assign(1, from);
          bool empty = false;
          fits = true;
          for (int64_t i = 1; i <= pieces && fits; ++i) {
            const int64_t cut = i < pieces ? equal_cost_cut(cuts.back(), i, pieces) : to;
            empty = cut <= cuts.back();
            fits = !empty && cut - cuts.back() <= max_slice_tokens;
            cuts.push_back(cut);
          }
          if (fits || empty) break;  // more pieces only make an empty one emptier
        }
      }
      if (!fits) cuts = capped_cuts(from, to, most, max_slice_tokens, equal_cost_cut);
    }
    capped.boundaries.insert(capped.boundaries.end(), cuts.begin() + 1, cuts.end());
  }
  for (size_t j = 1; j < capped.boundaries.size(); ++j)
    capped.token_cap = std::max(capped.token_cap, capped.boundaries[j] - capped.boundaries[j - 1]);
  return capped;
}

std::vector<Chunk> epp_chunks(const std::vector<int64_t>& lengths, int k, const CostModel& cost) {
  EppChunkingOptions options;
  options.k = k;
  return epp_chunks(lengths, options, cost);
}

std::vector<Chunk> epp_chunks(const std::vector<int64_t>& lengths,
                              const EppChunkingOptions& options, const CostModel& cost) {
  EppChunkingReport ignored;
  return epp_chunks(lengths, options, cost, ignored);
}

std::vector<Chunk> epp_chunks(const std::vector<int64_t>& lengths,
                              const EppChunkingOptions& options, const CostModel& cost,
                              EppChunkingReport& report) {
  report = EppChunkingReport{};
  check_lengths(lengths);
  check(options.max_chunk_tokens >= 0, "the chunk token cap " +
                                           std::to_string(options.max_chunk_tokens) +
                                           " is invalid: use 0 for none or a positive token count");
  check(options.drain_chunks >= 0 && options.drain_split >= 1,
        "the drain taper needs drain_chunks >= 0 and drain_split >= 1, got " +
            std::to_string(options.drain_chunks) + " and " + std::to_string(options.drain_split));
  const int k = options.k;
  const int64_t longest = *std::max_element(lengths.begin(), lengths.end());
  SplitMesh mesh = cost_balanced_mesh(longest, k, cost);
  int64_t token_cap = mesh.token_cap;
  if (options.max_chunk_tokens > 0 && token_cap > options.max_chunk_tokens) {
    mesh = cap_mesh_slices(mesh, options.max_chunk_tokens, cost);
    token_cap = options.max_chunk_tokens;  // the pieces may be shorter; packing may use it all
  }
  double time_target = mesh.time_target;

  std::vector<int> long_seqs, short_seqs;
  for (int q = 0; q < static_cast<int>(lengths.size()); ++q)
    (lengths[q] > token_cap ? long_seqs : short_seqs).push_back(q);
  std::stable_sort(long_seqs.begin(), long_seqs.end(),
                   [&](int a, int b) { return lengths[a] > lengths[b]; });

  // Steps 2-3: cut long sequences along the mesh; each tail seeds its own bucket, so two tails
  // never share a chunk. Bucket i < long_seqs.size() holds the tail of long_seqs[i].
  std::vector<std::vector<Chunk>> split_chunks(long_seqs.size());
  std::vector<Bucket> buckets(long_seqs.size());
  for (size_t i = 0; i < long_seqs.size(); ++i) {
    const int q = long_seqs[i];
    const int64_t n = lengths[q];
    int64_t start = 0;
    const int slices = static_cast<int>(mesh.boundaries.size()) - 1;
    for (int j = 1; j < slices && mesh.boundaries[j] < n; ++j) {
      split_chunks[i].push_back(Chunk{{Slice{q, start, mesh.boundaries[j], n}}});
      start = mesh.boundaries[j];
    }
    add_slice(buckets[i], Slice{q, start, n, n}, cost);
    buckets[i].tail_tokens = n - start;
  }

  // Step 4: best-fit-decreasing of the short sequences by cost under T_t and T_m.
  std::vector<double> seq_time(lengths.size(), 0);
  for (int q : short_seqs) seq_time[q] = cost.slice_layer_time(0, lengths[q]);
  std::stable_sort(short_seqs.begin(), short_seqs.end(), [&](int a, int b) {
    return seq_time[a] > seq_time[b] || (seq_time[a] == seq_time[b] && lengths[a] > lengths[b]);
  });
  for (int q : short_seqs) {
    const int64_t n = lengths[q];
    int target = pick_bucket(buckets, n, seq_time[q], token_cap, time_target);
    if (target < 0) {
      // No bucket fits both limits. If some bucket still has the token room, the time target is
      // what binds: relax it just enough for the cheapest such bucket, rather than opening a
      // chunk that would run below the token cap.
      double cheapest = std::numeric_limits<double>::infinity();
      for (const Bucket& b : buckets)
        if (b.tokens + n <= token_cap) cheapest = std::min(cheapest, b.time + seq_time[q]);
      if (options.relax_time_target && cheapest < std::numeric_limits<double>::infinity()) {
        report.time_target_relaxed = true;
        time_target = cheapest;
        target = pick_bucket(buckets, n, seq_time[q], token_cap, time_target);
      }
    }
    if (target < 0) {
      target = static_cast<int>(buckets.size());
      buckets.emplace_back();
    }
    add_slice(buckets[target], Slice{q, 0, n, n}, cost);
  }

  if (options.packed_light_first)
    std::stable_sort(buckets.begin() + long_seqs.size(), buckets.end(),
                     [](const Bucket& a, const Bucket& b) { return a.tokens < b.tokens; });
  // Drain taper: the short sequences of the last drain_chunks packed buckets go into
  // drain_split times as many buckets (longest processing time first, within the token cap),
  // heaviest bucket first.
  if (options.drain_chunks > 0 && options.drain_split > 1) {
    const size_t first_packed = long_seqs.size();
    const size_t pooled = std::min<size_t>(options.drain_chunks, buckets.size() - first_packed);
    std::vector<Slice> pool;
    for (size_t i = buckets.size() - pooled; i < buckets.size(); ++i)
      pool.insert(pool.end(), buckets[i].slices.begin(), buckets[i].slices.end());
    buckets.resize(buckets.size() - pooled);
    std::stable_sort(pool.begin(), pool.end(), [&](const Slice& a, const Slice& b) {
      return seq_time[a.seq] > seq_time[b.seq];
    });
    std::vector<Bucket> finer(pooled * options.drain_split);
    for (const Slice& slice : pool) {
      Bucket* lightest = nullptr;
      for (Bucket& b : finer)
        if (b.tokens + slice.length() <= token_cap &&
            (lightest == nullptr || b.time < lightest->time))
          lightest = &b;
      if (lightest == nullptr) lightest = &finer.emplace_back();
      add_slice(*lightest, slice, cost);
    }
    std::stable_sort(finer.begin(), finer.end(),
                     [](const Bucket& a, const Bucket& b) { return a.time > b.time; });
    for (Bucket& b : finer)
      if (!b.slices.empty()) buckets.push_back(std::move(b));
  }

  // Step 5: each long sequence's split chunks then its tail's chunk (hybrid, or split if nothing
  // joined the tail), longest sequence first; then the packed chunks.
  std::vector<Chunk> chunks;
  size_t count = buckets.size();
  for (const std::vector<Chunk>& split : split_chunks) count += split.size();
  chunks.reserve(count);
  for (size_t i = 0; i < buckets.size(); ++i) {
    if (i < long_seqs.size())
      for (Chunk& c : split_chunks[i]) chunks.push_back(std::move(c));
    chunks.push_back(Chunk{std::move(buckets[i].slices)});
  }
  return chunks;
}

std::vector<Chunk> seq1f1b_chunks(const std::vector<int64_t>& lengths, int64_t token_cap, int k,
                                  const CostModel& cost) {
  check(k >= 1,
        "Seq1F1B slice count k = " + std::to_string(k) + " is invalid: k must be at least 1");
  std::vector<Chunk> chunks;
  for (const Chunk& micro_batch : batch_chunks(lengths, token_cap)) {
    std::vector<int64_t> run;
    for (const Slice& s : micro_batch.slices) run.push_back(s.length());
    const int pieces = static_cast<int>(std::min<int64_t>(k, micro_batch.tokens()));
    const std::vector<int64_t> cuts = equal_cost_cuts(run, pieces, cost);
    size_t first_seq = 0;  // first sequence of the run that reaches into the current piece
    int64_t first_offset = 0;
    for (int p = 0; p < pieces; ++p) {
      Chunk chunk;
      int64_t offset = first_offset;
      for (size_t i = first_seq; i < run.size() && offset < cuts[p + 1]; offset += run[i++]) {
        const Slice& whole = micro_batch.slices[i];
        const int64_t from = std::max(cuts[p], offset), to = std::min(cuts[p + 1], offset + run[i]);
        if (from < to)
          chunk.slices.push_back(Slice{whole.seq, from - offset, to - offset, whole.seq_length});
        if (offset + run[i] <= cuts[p + 1]) {  // sequence ends in this piece
          first_seq = i + 1;
          first_offset = offset + run[i];
        }
      }
      chunks.push_back(std::move(chunk));
    }
  }
  return chunks;
}

}  // namespace infinipipe
