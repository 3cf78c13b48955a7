#include "infinipipe/runtime/sequence_rows.h"

#include <algorithm>
#include <string>

#include "infinipipe/core/error.h"

namespace infinipipe::runtime {

ShardRows shard_rows(const std::vector<Slice>& slices, int ranks, int rank) {
  check(ranks >= 1, "shard_rows: the sequence-parallel degree must be at least 1, got " +
                        std::to_string(ranks));
  check(rank >= 0 && rank < ranks, "shard_rows: rank " + std::to_string(rank) +
                                       " is out of range for " + std::to_string(ranks) +
                                       " sequence-parallel ranks");
  check(!slices.empty(), "shard_rows: a chunk needs at least one slice");
  ShardRows rows;
  for (const Slice& s : slices) {
    check(s.end > s.start, "shard_rows: slice [" + std::to_string(s.start) + ", " +
                               std::to_string(s.end) + ") of sequence " + std::to_string(s.seq) +
                               " is empty");
    rows.tokens += s.length();
  }
  rows.padded = (rows.tokens + ranks - 1) / ranks * ranks;
  rows.local = rows.padded / ranks;
  rows.first = rank * rows.local;
  rows.real = std::clamp<int64_t>(rows.tokens - rows.first, 0, rows.local);
  // Cut every slice to the rows [first, first + real).
  const int64_t begin = rows.first, end = rows.first + rows.real;
  int64_t row = 0;  // the slice's first row in the chunk
  for (const Slice& s : slices) {
    const int64_t lo = std::max(begin, row), hi = std::min(end, row + s.length());
    if (lo < hi) {
      Slice piece = s;
      piece.start = s.start + (lo - row);
      piece.end = s.start + (hi - row);
      rows.pieces.push_back(piece);
    }
    row += s.length();
  }
  return rows;
}

}  // namespace infinipipe::runtime
