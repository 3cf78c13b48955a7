// Chunk attention: the attention of a chunk's slices against their own sequence's earlier
// keys/values (docs/design.md, "Executor").
//
// A chunk's tokens are packed along dim 0: q [T, heads, head_dim], k and v [T, kv_heads,
// head_dim] (grouped-query attention: heads % kv_heads == 0; query head h uses kv head
// h / (heads / kv_heads), as LLaMA's repeat_kv), already rotary-embedded. The chunk's slices
// (core/chunk.h) lie in the rows back to back, in order: slice i's rows follow slice i-1's, so
// its tokens [start, end) are rows [row_i, row_i + length) with row_i the lengths before it.
//
// - A slice without a buffer (start must be 0) is a whole sequence: plain causal attention over
//   its own rows, nothing across slices.
// - A slice with a buffer (SequenceKV, one per split sequence and layer) is a slice of a split
//   sequence. Forward writes its k, v (detached) into the buffer at [start, end) and attends over
//   buffer [0, end), the causal mask aligned bottom-right (query i sees keys [0, start + i]).
//   Backward returns to autograd, as the segment's dk/dv, its own part plus what the buffer's
//   accumulators hold at [start, end) (contributions of later slices, whose backwards ran first),
//   then zeroes that range of the accumulators; it adds the [0, start) part into the accumulators
//   for the earlier slices. So a sequence's slices must run forward in ascending and backward in
//   descending order; after the backward of its first slice the accumulators are zero again.
//
// A chunk holds at most one slice of a sequence (one segment per buffer).
// Re-running a forward (recompute of a checkpointed layer) rewrites the same K/V: harmless. The
// accumulators are only touched by backward.
//
// Kernels (attention_layout.h, choose_kernel): on the CPU, per slice, ATen's CPU flash kernels;
// on CUDA the whole chunk is one call of ATen's varlen flash kernel (float16/bfloat16, head_dim
// <= 256 and a multiple of 8) or memory-efficient kernel (also float32), over the K/V buffers'
// rows gathered per slice; anything else (float64) runs the math path, with a warning logged
// once. The "varlen" backend runs the CUDA path's layout on the CPU, for the tests.
#pragma once

#include <ATen/ATen.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "infinipipe/core/chunk.h"
#include "infinipipe/kernels/attention_layout.h"

namespace infinipipe::kernels {

// Per (split sequence, layer) K/V buffer and its gradient accumulators, all
// [seq_length, kv_heads, head_dim], never requiring grad. K/V are allocated at creation (the
// sequence's first forward), the accumulators at the sequence's first backward on this layer:
// forwards never touch them, so a sequence whose backwards have not started holds only K/V, as
// the cost model's memory timeline counts it (src/sim/memory_timeline.cc).
struct SequenceKV {
  at::Tensor k, v;    // written by forwards at [start, end) of each slice
  at::Tensor dk, dv;  // gradient contributions of later slices to earlier ones; undefined until
                      // the first backward

  static std::shared_ptr<SequenceKV> create(int64_t seq_length, int64_t kv_heads, int64_t head_dim,
                                            at::ScalarType dtype, at::Device device = at::kCPU);
  int64_t seq_length() const { return k.size(0); }
  int64_t kv_heads() const { return k.size(1); }
  int64_t head_dim() const { return k.size(2); }
  // Allocates the accumulators (zeros) unless they exist; called by the backward.
  void allocate_grad();
  // Zeroes the accumulators if allocated (they are zero after a complete backward anyway).
  void zero_grad();
  // Bytes held: K, V and the two accumulators once allocated.
  int64_t nbytes() const;
};

// kv[i]: the buffer of slice i, null for a whole sequence; empty: every slice is whole.
using SliceBuffers = std::vector<std::shared_ptr<SequenceKV>>;

// Returns the attention output [T, heads, head_dim], differentiable w.r.t. q, k, v. The slices
// must tile the T rows. scale <= 0 means 1 / sqrt(head_dim). 16-bit inputs are reduced in
// float32 (softmax statistics and the merge of partial results), outputs are in the inputs' dtype.
at::Tensor chunk_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                           const std::vector<Slice>& slices, const SliceBuffers& kv = {},
                           double scale = 0.0, Backend backend = Backend::Auto);

// The kernel chunk_attention would run for q on its device (asks ATen, once per device, dtype
// and head size, whether its flash kernel runs there). Logs nothing.
Kernel attention_kernel(const at::Tensor& q, Backend backend = Backend::Auto);

}  // namespace infinipipe::kernels
