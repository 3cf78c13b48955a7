#pragma once
// Ulysses sequence parallelism inside a pipeline stage (docs/design.md, "Executor"; DeepSpeed
// Ulysses, as InfiniPipe runs it): a stage is run by a group of d_s ranks, each holding 1/d_s of
// every chunk's rows (sequence_rows.h) through the stage's layers. Everything but attention is
// per row, so it runs on the local rows alone. Attention needs all of a sequence's rows, so each
// layer exchanges (all-to-all) its q, k, v from token-sharded [T_local, heads, d] to
// head-sharded [T_pad, heads / d_s, d], drops the padding, runs the chunk attention
// (kernels/chunk_attention.h) over the chunk's full slices with this rank's heads, and exchanges
// the result back. A split sequence's K/V buffers hold only this rank's kv_heads / d_s heads, so
// token-level slicing works as without SP.
//
// The exchange is differentiable: its backward is the inverse all-to-all, which for equal
// splits is the same exchange of the gradients. Every rank of the group runs the same layers of
// the same chunks in the same order (forwards, recomputes, backwards), so their all-to-alls
// match one for one. Each waits at most the executor's timeout; a lost peer is a PeerError
// naming its global rank (pipe.h). c10d's all_to_all_single: one code path for Gloo and NCCL.
#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <ATen/core/Tensor.h>
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>

#include "infinipipe/core/chunk.h"
#include "infinipipe/kernels/chunk_attention.h"
#include "infinipipe/runtime/sequence_rows.h"

namespace infinipipe::runtime {

struct SequenceParallelOptions {
  int stage = 0;  // for messages
  // global_ranks[j]: the global (world) rank of the group's rank j, for messages and
  // PeerError::rank. Empty: gathered over the group at construction (one all-gather).
  std::vector<int> global_ranks;
  int global_rank = -1;  // this rank's global rank (needed to gather global_ranks)
  std::chrono::milliseconds timeout{std::chrono::seconds(300)};
};

// This rank's rows of a chunk's inputs: token ids [rows.local] (padding rows: token 0, which
// they embed), and their next-token targets (next_token_loss.h; padding rows: kIgnoreIndex, so
// they add nothing to the loss). sequences[i]: sequence i's tokens, 1-D int64.
at::Tensor shard_tokens(const ShardRows& rows, const std::vector<at::Tensor>& sequences);
at::Tensor shard_targets(const ShardRows& rows, const std::vector<at::Tensor>& sequences);

class SequenceParallel : public std::enable_shared_from_this<SequenceParallel> {
 public:
  SequenceParallel(c10::intrusive_ptr<c10d::ProcessGroup> group, SequenceParallelOptions options);

  int rank() const { return rank_; }  // j
  int size() const { return size_; }  // d_s
  const std::vector<int>& global_ranks() const { return options_.global_ranks; }
  // "rank 3 (sequence rank 1 of stage 1)"
  std::string describe(int sequence_rank) const;

  // This rank's rows of a chunk of these slices.
  ShardRows rows(const std::vector<Slice>& slices) const {
    return shard_rows(slices, size_, rank_);
  }

  // Error naming the numbers unless d_s divides both (called before any exchange).
  void check_heads(int64_t heads, int64_t kv_heads) const;

  // x [d_s, ...] (contiguous): part i goes to rank i; returns [d_s, ...] whose part i came from
  // rank i. Differentiable: the backward exchanges the gradients the same way. `what` names the
  // exchange in errors.
  at::Tensor all_to_all(const at::Tensor& x, const std::string& what) const;

  // The chunk attention of this rank's rows: q [local, heads, d], k, v [local, kv_heads, d] ->
  // [local, heads, d]. slices: the chunk's; kv: the K/V buffers of its slices with this rank's
  // kv_heads / d_s heads (kernels::SliceBuffers).
  at::Tensor attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                       const std::vector<Slice>& slices, const ShardRows& rows,
                       const kernels::SliceBuffers& kv, double scale, kernels::Backend backend,
                       const std::string& what) const;

  // Time spent in all-to-alls and bytes this rank sent through them, since construction.
  double all_to_all_s() const { return static_cast<double>(exchange_ns_.load()) * 1e-9; }
  int64_t all_to_all_bytes() const { return exchange_bytes_.load(); }

  // One exchange without autograd: out and in [d_s, ...], equal parts (the autograd function's
  // forward and backward both call it).
  void exchange(at::Tensor& out, const at::Tensor& in, const std::string& what) const;

 private:
  c10::intrusive_ptr<c10d::ProcessGroup> group_;
  SequenceParallelOptions options_;
  int rank_ = 0;
  int size_ = 1;
  bool stages_through_host_ = false;  // takes_host_memory_only(group): CUDA exchanges via host
  mutable std::atomic<int64_t> exchange_ns_{0};
  mutable std::atomic<int64_t> exchange_bytes_{0};
};

}  // namespace infinipipe::runtime
