#include "infinipipe/chunking/packing.h"

#include <algorithm>
#include <map>
#include <numeric>
#include <string>

#include "infinipipe/chunking/sequence_processor.h"
#include "infinipipe/core/error.h"

namespace infinipipe {

std::vector<std::vector<int>> best_fit_decreasing(const std::vector<int64_t>& sizes,
                                                  int64_t capacity) {
  std::vector<int> order(sizes.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return sizes[a] > sizes[b]; });
  std::vector<std::vector<int>> bins;
  std::multimap<int64_t, int> bins_by_room;  // equal room: the older bin first
  for (int item : order) {
    if (sizes[item] < 1 || sizes[item] > capacity)
      throw Error("cannot pack an item of " + std::to_string(sizes[item]) +
                  " tokens into bins of " + std::to_string(capacity) + " tokens");
    auto fit = bins_by_room.lower_bound(sizes[item]);
    int bin;
    int64_t room;
    if (fit == bins_by_room.end()) {
      bin = static_cast<int>(bins.size());
      bins.emplace_back();
      room = capacity;
    } else {
      bin = fit->second;
      room = fit->first;
      bins_by_room.erase(fit);
    }
    bins[bin].push_back(item);
    room -= sizes[item];
    if (room > 0) bins_by_room.emplace(room, bin);
  }
  return bins;
}

std::vector<Chunk> batch_chunks(const std::vector<int64_t>& lengths, int64_t token_cap) {
  check_lengths(lengths);
  check(token_cap >= 1, "micro-batch token cap " + std::to_string(token_cap) +
                            " is invalid: it must be at least 1 token");
  for (size_t i = 0; i < lengths.size(); ++i) {
    if (lengths[i] > token_cap)
      throw Error("sequence " + std::to_string(i) + " has " + std::to_string(lengths[i]) +
                  " tokens, more than the micro-batch token cap of " + std::to_string(token_cap) +
                  "; batch-level pipelining never splits a sequence: raise the cap to at least " +
                  std::to_string(lengths[i]) + " or truncate the sequence");
  }
  std::vector<Chunk> chunks;
  for (const std::vector<int>& bin : best_fit_decreasing(lengths, token_cap)) {
    Chunk chunk;
    for (int q : bin) chunk.slices.push_back(Slice{q, 0, lengths[q], lengths[q]});
    chunks.push_back(std::move(chunk));
  }
  return chunks;
}

std::vector<Chunk> fixed_size_chunks(const std::vector<int64_t>& lengths, int64_t chunk_tokens) {
  check_lengths(lengths);
  check(chunk_tokens >= 1,
        "chunk size " + std::to_string(chunk_tokens) + " is invalid: it must be at least 1 token");
  std::vector<int> longest_first(lengths.size());
  std::iota(longest_first.begin(), longest_first.end(), 0);
  std::stable_sort(longest_first.begin(), longest_first.end(),
                   [&](int a, int b) { return lengths[a] > lengths[b]; });
  std::vector<Chunk> chunks;
  std::vector<Slice> to_pack;  // short sequences and the last piece of every long one
  for (int q : longest_first) {
    const int64_t n = lengths[q];
    int64_t start = 0;
    for (; n - start > chunk_tokens; start += chunk_tokens)
      chunks.push_back(Chunk{{Slice{q, start, start + chunk_tokens, n}}});
    to_pack.push_back(Slice{q, start, n, n});
  }
  std::vector<int64_t> sizes;
  for (const Slice& s : to_pack) sizes.push_back(s.length());
  for (const std::vector<int>& bin : best_fit_decreasing(sizes, chunk_tokens)) {
    Chunk chunk;
    for (int piece : bin) chunk.slices.push_back(to_pack[piece]);
    chunks.push_back(std::move(chunk));
  }
  return chunks;
}

}  // namespace infinipipe
