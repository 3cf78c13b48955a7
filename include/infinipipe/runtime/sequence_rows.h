#pragma once
// Which rows of a chunk a sequence-parallel rank holds (docs/design.md, "Executor", Ulysses
// sequence parallelism). LibTorch-free bookkeeping, so it is tested on its own.
//
// A chunk's rows are its slices back to back (core/chunk.h). With d_s sequence-parallel ranks
// the T rows are padded to T_pad = ceil(T / d_s) * d_s and rank j holds padded rows
// [j * T_pad / d_s, (j + 1) * T_pad / d_s): the same count on every rank, so activations and
// gradients are [T_pad / d_s, hidden] everywhere and the all-to-all splits evenly. Padding
// comes last, so only the last ranks' rows hold it (a rank may hold nothing but padding when
// T < d_s).
#include <cstdint>
#include <vector>

#include "infinipipe/core/chunk.h"

namespace infinipipe::runtime {

struct ShardRows {
  int64_t tokens = 0;  // T: the chunk's real rows
  int64_t padded = 0;  // T_pad = ceil(T / ranks) * ranks
  int64_t local = 0;   // T_pad / ranks: the rows of every rank
  int64_t first = 0;   // this rank's first padded row: rank * local
  int64_t real = 0;    // its real rows, rows [0, real) of its local ones; the rest is padding
  // The parts of the chunk's slices in this rank's real rows, in row order (seq and seq_length
  // as their slice's; start and end the part's positions in the sequence).
  std::vector<Slice> pieces;

  int64_t padding() const { return local - real; }
};

// Rank `rank` of `ranks` over a chunk of these slices. Error on ranks < 1, a rank out of range,
// no slices or an empty slice.
ShardRows shard_rows(const std::vector<Slice>& slices, int ranks, int rank);

}  // namespace infinipipe::runtime
