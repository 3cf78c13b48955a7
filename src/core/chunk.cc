#include "infinipipe/core/chunk.h"

#include <algorithm>
#include <functional>
#include <numeric>

#include "infinipipe/core/error.h"

namespace infinipipe {

const char* to_string(ChunkKind kind) {
  switch (kind) {
    case ChunkKind::kPacked:
      return "packed";
    case ChunkKind::kSplit:
      return "split";
    case ChunkKind::kHybrid:
      return "hybrid";
  }
  return "?";
}

namespace {

int find_root(std::vector<int>& parent, int x) {
  while (parent[x] != x) x = parent[x] = parent[parent[x]];
  return x;
}

// The chains when every sequence's slices lie in one run of consecutive chunks, their starts
// rising with the chunk (the chunkers' layout): then they are runs of consecutive chunks in
// ascending order, which is what the general search below finds (its edges all go from a chunk
// to the next, and its topological order takes the smallest ready chunk first) at a fraction of
// its cost: a uniform step's candidates have tens of thousands of chunks, and the search's
// never-fits checks ask for all their chains (docs/planning.md, "Search speed", ninth round).
// False, with `result` unspecified, for any other layout.
bool consecutive_chains(const std::vector<Chunk>& chunks, ChainList& result) {
  const int n = static_cast<int>(chunks.size());
  std::vector<int> last_chunk;  // per sequence: the chunk of its latest slice so far, or -1
  std::vector<int64_t> last_start;
  result.start.assign(1, 0);
  for (int c = 0; c < n; ++c) {
    bool linked = false;  // to chunk c - 1, by a sequence they share
    for (const Slice& s : chunks[c].slices) {
      if (s.seq < 0) return false;
      if (s.seq >= static_cast<int>(last_chunk.size())) {
        const size_t size = std::max<size_t>(s.seq + 1, 2 * last_chunk.size());
        last_chunk.resize(size, -1);
        last_start.resize(size, 0);
      }
      int& last = last_chunk[s.seq];
      if (last >= 0) {
        if (last < c - 1 || s.start <= last_start[s.seq]) return false;
        linked = linked || last == c - 1;
      }
      last = c;
      last_start[s.seq] = s.start;
    }
    if (c > 0 && !linked) result.start.push_back(c);
  }
  if (n > 0) result.start.push_back(n);
  result.ids.resize(n);
  std::iota(result.ids.begin(), result.ids.end(), 0);
  return true;
}

}  // namespace

ChainList chain_list(const std::vector<Chunk>& chunks) {
  {
    ChainList runs;
    if (consecutive_chains(chunks, runs)) return runs;
  }
  // Union chunks that share a sequence; within a component, order by the earliest slice start
  // of any sequence they share, which for valid chunkings is the forward order. Flat arrays, not
  // maps: the planner asks for the chains of every candidate several times (docs/planning.md,
  // "Search speed").
  const int n = static_cast<int>(chunks.size());
  struct Piece {
    int seq;
    int64_t start;
    int chunk;
  };
  // Every slice, by sequence, then start, then chunk: placed by sequence (a counting sort; a
  // uniform step's candidates have tens of thousands of slices, and sorting them all was most of
  // the search's bounds there), then each sequence's few pieces sorted.
  auto by_start = [](const Piece& a, const Piece& b) {
    if (a.start != b.start) return a.start < b.start;
    return a.chunk < b.chunk;
  };
  int max_seq = -1;
  bool negative = false;
  size_t total = 0;
  for (const Chunk& chunk : chunks)
    for (const Slice& s : chunk.slices) {
      max_seq = std::max(max_seq, s.seq);
      negative = negative || s.seq < 0;
      ++total;
    }
  std::vector<Piece> pieces(total);
  if (negative) {  // not a valid chunking, but ordered all the same
    size_t i = 0;
    for (int c = 0; c < n; ++c)
      for (const Slice& s : chunks[c].slices) pieces[i++] = {s.seq, s.start, c};
    std::sort(pieces.begin(), pieces.end(), [&](const Piece& a, const Piece& b) {
      return a.seq != b.seq ? a.seq < b.seq : by_start(a, b);
    });
  } else {
    std::vector<size_t> first(max_seq + 2, 0);  // pieces of sequence q: [first[q], first[q + 1])
    for (const Chunk& chunk : chunks)
      for (const Slice& s : chunk.slices) ++first[s.seq + 1];
    for (int q = 0; q <= max_seq; ++q) first[q + 1] += first[q];
    std::vector<size_t> next(first.begin(), first.end() - 1);
    for (int c = 0; c < n; ++c)
      for (const Slice& s : chunks[c].slices) pieces[next[s.seq]++] = {s.seq, s.start, c};
    for (int q = 0; q <= max_seq; ++q)
      if (first[q + 1] - first[q] > 1)
        std::sort(pieces.begin() + first[q], pieces.begin() + first[q + 1], by_start);
  }
  // Per sequence, the chunk with the earlier slice comes first: an edge between neighbours in
  // the order above (repeated when two chunks share several sequences, as counted below).
  std::vector<int> parent(n);
  std::iota(parent.begin(), parent.end(), 0);
  std::vector<std::pair<int, int>> edges;
  std::vector<int> indegree(n, 0), out_start(n + 1, 0);
  for (size_t i = 1; i < pieces.size(); ++i) {
    const Piece& a = pieces[i - 1];
    const Piece& b = pieces[i];
    if (a.seq != b.seq) continue;
    parent[find_root(parent, b.chunk)] = find_root(parent, a.chunk);
    if (a.chunk == b.chunk) continue;
    edges.push_back({a.chunk, b.chunk});
    ++indegree[b.chunk];
    ++out_start[a.chunk + 1];
  }
  for (int c = 0; c < n; ++c) out_start[c + 1] += out_start[c];
  std::vector<int> after(edges.size());
  {
    std::vector<int> fill(out_start.begin(), out_start.end() - 1);
    for (const auto& [from, to] : edges) after[fill[from]++] = to;
  }
  // Components in order of their smallest chunk, each one's chunks ascending: flat arrays, the
  // component's members at [member_start[i], member_start[i + 1]) (most chunks are chains of
  // their own, and a vector each was most of the time left here).
  std::vector<int> component_of_root(n, -1), component_of(n);
  int components = 0;
  for (int c = 0; c < n; ++c) {
    int& component = component_of_root[find_root(parent, c)];
    if (component < 0) component = components++;
    component_of[c] = component;
  }
  std::vector<int> member_start(components + 1, 0), members(n);
  for (int c = 0; c < n; ++c) ++member_start[component_of[c] + 1];
  for (int i = 0; i < components; ++i) member_start[i + 1] += member_start[i];
  {
    std::vector<int> fill(member_start.begin(), member_start.end() - 1);
    for (int c = 0; c < n; ++c) members[fill[component_of[c]]++] = c;
  }
  // The chains written one after another into one list (most chunks are chains of their own:
  // a vector each was most of what the search's never-fits checks spent here).
  ChainList result;
  result.start.assign(1, 0);
  result.start.reserve(components + 1);
  result.ids.reserve(n);
  std::vector<int> ready;
  for (int i = 0; i < components; ++i) {
    const int* first = members.data() + member_start[i];
    const int* last = members.data() + member_start[i + 1];
    const size_t begin = result.ids.size();
    if (last - first == 1) {  // a chain of its own (no edges): most chunks
      result.ids.push_back(*first);
      result.start.push_back(static_cast<int>(result.ids.size()));
      continue;
    }
    ready.clear();
    for (const int* c = first; c != last; ++c)
      if (indegree[*c] == 0) ready.push_back(*c);
    while (!ready.empty()) {
      if (ready.size() > 1) std::sort(ready.begin(), ready.end(), std::greater<int>());
      int c = ready.back();
      ready.pop_back();
      result.ids.push_back(c);
      for (int e = out_start[c]; e < out_start[c + 1]; ++e)
        if (--indegree[after[e]] == 0) ready.push_back(after[e]);
    }
    if (static_cast<long>(result.ids.size() - begin) != last - first)
      throw Error("chunks " + std::to_string(*first) +
                  "... hold slices of the same sequences in contradictory order");
    result.start.push_back(static_cast<int>(result.ids.size()));
  }
  return result;
}

void sort_longest_first(const ChainList& list, std::vector<int>& chains) {
  int longest = 0;
  for (int c : chains) longest = std::max(longest, list.length(c));
  // Bucket b = longest - length holds [end[b - 1], end[b]) once placed (end[-1] = 0).
  std::vector<size_t> end(longest + 1, 0);
  for (int c : chains) ++end[longest - list.length(c)];
  for (int b = 1; b <= longest; ++b) end[b] += end[b - 1];
  std::vector<int> sorted(chains.size());
  {
    std::vector<size_t> next(longest + 1, 0);
    for (int b = 1; b <= longest; ++b) next[b] = end[b - 1];
    for (int c : chains) sorted[next[longest - list.length(c)]++] = c;
  }
  auto by_first = [&](int a, int b) { return list.ids[list.start[a]] < list.ids[list.start[b]]; };
  size_t begin = 0;
  for (int b = 0; b <= longest; ++b) {
    const auto first = sorted.begin() + begin, last = sorted.begin() + end[b];
    if (!std::is_sorted(first, last, by_first)) std::sort(first, last, by_first);
    begin = end[b];
  }
  chains.swap(sorted);
}

std::vector<std::vector<int>> chains(const std::vector<Chunk>& chunks) {
  const ChainList list = chain_list(chunks);
  std::vector<std::vector<int>> result(list.size());
  for (size_t i = 0; i < list.size(); ++i)
    result[i].assign(list.ids.begin() + list.start[i], list.ids.begin() + list.start[i + 1]);
  return result;
}

void check_coverage(const std::vector<Chunk>& chunks, const std::vector<int64_t>& lengths) {
  // Per sequence, the slices sorted by start must tile [0, length) exactly.
  std::vector<std::vector<std::pair<int64_t, int64_t>>> pieces(lengths.size());
  for (size_t c = 0; c < chunks.size(); ++c) {
    for (const Slice& s : chunks[c].slices) {
      check(s.seq >= 0 && s.seq < static_cast<int>(lengths.size()),
            "chunk " + std::to_string(c) + " has a slice of sequence " + std::to_string(s.seq) +
                ", but the step has only " + std::to_string(lengths.size()) + " sequences");
      check(s.seq_length == lengths[s.seq] && s.start >= 0 && s.start < s.end &&
                s.end <= s.seq_length,
            "chunk " + std::to_string(c) + " has an invalid slice [" + std::to_string(s.start) +
                ", " + std::to_string(s.end) + ") of sequence " + std::to_string(s.seq) +
                " (length " + std::to_string(lengths[s.seq]) + ")");
      pieces[s.seq].push_back({s.start, s.end});
    }
  }
  for (size_t q = 0; q < lengths.size(); ++q) {
    auto& p = pieces[q];
    std::sort(p.begin(), p.end());
    int64_t covered = 0;
    for (auto [start, end] : p) {
      check(start == covered, "sequence " + std::to_string(q) + " (length " +
                                  std::to_string(lengths[q]) + "): tokens from " +
                                  std::to_string(std::min(start, covered)) + " are " +
                                  (start > covered ? "in no slice" : "in two slices"));
      covered = end;
    }
    check(covered == lengths[q], "sequence " + std::to_string(q) + " (length " +
                                     std::to_string(lengths[q]) + "): tokens from " +
                                     std::to_string(covered) + " are in no slice");
  }
}

}  // namespace infinipipe
