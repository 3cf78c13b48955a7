#pragma once
// The units the sequence processor produces and everything downstream consumes.
#include <cstdint>
#include <string>
#include <vector>

namespace infinipipe {

// Tokens [start, end) of sequence `seq` (an index into the step's lengths). Its context is
// `start`: the earlier tokens of the same sequence, whose keys/values it attends to.
struct Slice {
  int seq = 0;
  int64_t start = 0;
  int64_t end = 0;
  int64_t seq_length = 0;  // length of the whole sequence, so a chunk can be costed on its own

  int64_t length() const { return end - start; }
  int64_t context() const { return start; }
  bool whole() const { return start == 0 && end == seq_length; }
  bool is_tail() const { return start > 0 && end == seq_length; }
  bool operator==(const Slice& o) const {
    return seq == o.seq && start == o.start && end == o.end && seq_length == o.seq_length;
  }
};

enum class ChunkKind { kPacked, kSplit, kHybrid };

// A pipeline unit (micro-batch): slices that go through one forward and one backward on every
// stage together. Chunk ids are positions in the step's chunk vector.
struct Chunk {
  std::vector<Slice> slices;

  int64_t tokens() const {
    int64_t total = 0;
    for (const Slice& s : slices) total += s.length();
    return total;
  }
  // packed: only whole sequences; split: only partial slices; hybrid: both.
  ChunkKind kind() const {
    bool any_whole = false, any_partial = false;
    for (const Slice& s : slices) (s.whole() ? any_whole : any_partial) = true;
    if (!any_partial) return ChunkKind::kPacked;
    return any_whole ? ChunkKind::kHybrid : ChunkKind::kSplit;
  }
};

const char* to_string(ChunkKind kind);

// The chunks of one step, and the chains they form: chunk ids in the order their forwards must
// run, because a later chunk holds a later slice of some sequence of an earlier one. Chains are
// derived from the slices (connected components over shared sequences), never stored.
std::vector<std::vector<int>> chains(const std::vector<Chunk>& chunks);

// The same chains in one flat list: chain i is ids[start[i] .. start[i + 1]), in the order
// chains() gives. For callers that ask for the chains of tens of thousands of chunks, most of
// them chains of their own (the planner's bounds and schedules).
struct ChainList {
  std::vector<int> start;  // size() + 1 entries, start[0] = 0
  std::vector<int> ids;
  size_t size() const { return start.empty() ? 0 : start.size() - 1; }
  int length(size_t i) const { return start[i + 1] - start[i]; }
};
ChainList chain_list(const std::vector<Chunk>& chunks);
// Chain indices of `list` reordered longest first, equal lengths by their first chunk: the order
// 1F1B runs a wave's chains in (schedule/scheduler.h). The order is total, so it is the same
// whatever order the indices come in. Counted by length rather than compared: a uniform step's
// candidates have tens of thousands of chains, mostly of one chunk and already by first chunk.
void sort_longest_first(const ChainList& list, std::vector<int>& chains);

// Checks that every token of every sequence is in exactly one slice; throws Error naming the
// first sequence and position that is missing or covered twice.
void check_coverage(const std::vector<Chunk>& chunks, const std::vector<int64_t>& lengths);

}  // namespace infinipipe
