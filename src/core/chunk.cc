#include "infinipipe/core/chunk.h"

#include <algorithm>
#include <functional>
#include <map>
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

}  // namespace

std::vector<std::vector<int>> chains(const std::vector<Chunk>& chunks) {
  // Union chunks that share a sequence; within a component, order by the earliest slice start
  // of any sequence they share, which for valid chunkings is the forward order.
  const int n = static_cast<int>(chunks.size());
  std::vector<int> parent(n);
  std::iota(parent.begin(), parent.end(), 0);
  std::map<int, int> first_chunk_of_seq;
  for (int c = 0; c < n; ++c) {
    for (const Slice& s : chunks[c].slices) {
      auto [it, inserted] = first_chunk_of_seq.emplace(s.seq, c);
      if (!inserted) parent[find_root(parent, c)] = find_root(parent, it->second);
    }
  }
  std::map<int, std::vector<int>> by_root;  // keyed by root; roots are visited in id order below
  std::vector<int> root_order;
  for (int c = 0; c < n; ++c) {
    int r = find_root(parent, c);
    if (by_root[r].empty()) root_order.push_back(r);
    by_root[r].push_back(c);
  }
  // Order each chain topologically: per sequence, the chunk with the earlier slice comes first.
  std::vector<std::vector<int>> after(n);
  std::vector<int> indegree(n, 0);
  std::map<int, std::vector<std::pair<int64_t, int>>> slices_of_seq;  // seq -> (start, chunk)
  for (int c = 0; c < n; ++c)
    for (const Slice& s : chunks[c].slices) slices_of_seq[s.seq].push_back({s.start, c});
  for (auto& [seq, list] : slices_of_seq) {
    std::sort(list.begin(), list.end());
    for (size_t i = 1; i < list.size(); ++i) {
      if (list[i].second == list[i - 1].second) continue;
      after[list[i - 1].second].push_back(list[i].second);
      ++indegree[list[i].second];
    }
  }
  std::vector<std::vector<int>> result;
  for (int r : root_order) {
    std::vector<int> ready, order;
    for (int c : by_root[r])
      if (indegree[c] == 0) ready.push_back(c);
    while (!ready.empty()) {
      std::sort(ready.begin(), ready.end(), std::greater<int>());
      int c = ready.back();
      ready.pop_back();
      order.push_back(c);
      for (int next : after[c])
        if (--indegree[next] == 0) ready.push_back(next);
    }
    check(order.size() == by_root[r].size(),
          "chunks " + std::to_string(by_root[r].front()) +
              "... hold slices of the same sequences in contradictory order");
    result.push_back(std::move(order));
  }
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
