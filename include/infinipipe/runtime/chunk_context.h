#pragma once
// What a stage module needs to know about the chunk it runs: its slices (core/chunk.h, laid out
// in the rows back to back), each row's position in its sequence (for rotary embeddings), and
// the chunk attention of each of the stage's layers. One type for C++ and Python stage modules:
// the executor builds one per chunk at its forward and keeps it until its backward (recompute
// re-runs layers with the same context); outside the executor (a model run unpipelined, tests)
// a context without K/V buffers serves whole sequences on any layer.
//
// attention(layer, q, k, v) runs kernels::chunk_attention with the chunk's slices and, for slices
// of split sequences, the stage's K/V buffer of that sequence and layer.
//
// With sequence parallelism (options.sequence, sequence_parallel.h) the context is one rank's
// part of the chunk: num_tokens() and positions() are this rank's rows (padding rows: position
// 0), and attention() exchanges q, k, v with the other ranks of the stage (Ulysses); slices()
// stay the whole chunk's and rows() says which of them this rank holds.
#include <cstdint>
#include <memory>
#include <vector>

#include <ATen/core/Tensor.h>

#include "infinipipe/core/chunk.h"
#include "infinipipe/kernels/chunk_attention.h"
#include "infinipipe/runtime/sequence_parallel.h"
#include "infinipipe/runtime/sequence_rows.h"

namespace infinipipe::runtime {

struct ChunkContextOptions {
  int chunk = 0;  // the chunk's id in its plan (for messages)
  at::Device device = at::kCPU;
  double attention_scale = 0.0;  // <= 0: 1 / sqrt(head_dim)
  kernels::Backend attention_backend = kernels::Backend::Auto;
  // The stage's sequence-parallel group; null (or one rank): the context holds every row.
  std::shared_ptr<const SequenceParallel> sequence;
};

class ChunkContext : public std::enable_shared_from_this<ChunkContext> {
 public:
  // kv[layer]: the K/V buffers of the slices on that (local) layer (kernels::SliceBuffers);
  // empty: no split sequence, any layer.
  ChunkContext(std::vector<Slice> slices, std::vector<kernels::SliceBuffers> kv = {},
               ChunkContextOptions options = {});

  int chunk() const { return options_.chunk; }
  // Rows of this context: the chunk's tokens, or this sequence-parallel rank's share of them.
  int64_t num_tokens() const { return num_tokens_; }
  // This rank's rows of the chunk (every row, no padding, without sequence parallelism).
  const ShardRows& rows() const { return rows_; }
  int sequence_rank() const { return options_.sequence ? options_.sequence->rank() : 0; }
  int sequence_size() const { return options_.sequence ? options_.sequence->size() : 1; }
  // Layers with K/V buffers; 0 when the chunk holds whole sequences only.
  int num_layers() const { return static_cast<int>(kv_.size()); }
  const std::vector<Slice>& slices() const { return slices_; }
  // Each row's position within its own sequence (padding rows: 0), int64 [T] on the context's
  // device.
  const at::Tensor& positions() const { return positions_; }

  // Attention of the chunk on local layer `layer`: q [T, heads, d], k, v [T, kv_heads, d]
  // (rotary applied; T = num_tokens()) -> [T, heads, d], differentiable.
  at::Tensor attention(int layer, const at::Tensor& q, const at::Tensor& k,
                       const at::Tensor& v) const;

  // A stage module's per-chunk cache (rotary tables; the Python object of this context). The
  // executor resets it when the chunk is done, which also breaks reference cycles through it.
  std::shared_ptr<void> module_state;

 private:
  std::vector<Slice> slices_;
  std::vector<kernels::SliceBuffers> kv_;
  ChunkContextOptions options_;
  ShardRows rows_;
  int64_t num_tokens_ = 0;
  at::Tensor positions_;
};

}  // namespace infinipipe::runtime
