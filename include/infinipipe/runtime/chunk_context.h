#pragma once
// What a stage module needs to know about the chunk it runs: which rows of the packed chunk
// belong to which sequence and where in it they start, the rows' positions (for rotary
// embeddings), and the chunk attention of each of the stage's layers.
//
// The executor builds one context per chunk at its forward and keeps it until its backward
// (recompute re-runs layers with the same context). attention(layer, q, k, v) runs
// kernels::chunk_attention with the chunk's segments and, for slices of split sequences, the
// stage's K/V buffer of that sequence and layer.
#include <cstdint>
#include <memory>
#include <vector>

#include <ATen/core/Tensor.h>

#include "kernels/chunk_attention.h"

namespace infinipipe::runtime {

// Rows [row, row + length) of the chunk hold tokens [start, start + length) of sequence `seq`.
struct SliceRows {
  int seq = 0;
  int64_t row = 0;
  int64_t start = 0;
  int64_t length = 0;
};

class ChunkContext : public std::enable_shared_from_this<ChunkContext> {
 public:
  // kv[layer][i]: the K/V buffer of slice i on that (local) layer, null for a whole sequence.
  ChunkContext(int chunk, std::vector<SliceRows> slices,
               std::vector<std::vector<std::shared_ptr<kernels::SequenceKV>>> kv,
               at::Device device, double scale = 0.0,
               kernels::Backend backend = kernels::Backend::Auto);

  int chunk() const { return chunk_; }
  int64_t num_tokens() const { return num_tokens_; }
  int num_layers() const { return static_cast<int>(kv_.size()); }
  const std::vector<SliceRows>& slices() const { return slices_; }
  // Each row's position within its own sequence, int64 [T] on the executor's device.
  const at::Tensor& positions() const { return positions_; }

  // Attention of the chunk on local layer `layer`: q [T, heads, d], k, v [T, kv_heads, d]
  // (rotary applied) -> [T, heads, d], differentiable.
  at::Tensor attention(int layer, const at::Tensor& q, const at::Tensor& k,
                       const at::Tensor& v) const;

  // A stage module's per-chunk cache (the Python adapter keeps its Python-side context here).
  // The executor resets it when the chunk is done, which also breaks reference cycles through it.
  std::shared_ptr<void> module_state;

 private:
  int chunk_;
  std::vector<SliceRows> slices_;
  std::vector<std::vector<std::shared_ptr<kernels::SequenceKV>>> kv_;
  int64_t num_tokens_ = 0;
  at::Tensor positions_;
  double scale_;
  kernels::Backend backend_;
};

}  // namespace infinipipe::runtime
