#include "infinipipe/runtime/chunk_context.h"

#include <ATen/ATen.h>

#include "infinipipe/core/error.h"

namespace infinipipe::runtime {

ChunkContext::ChunkContext(std::vector<Slice> slices, std::vector<kernels::SliceBuffers> kv,
                           ChunkContextOptions options)
    : slices_(std::move(slices)), kv_(std::move(kv)), options_(std::move(options)) {
  const std::string where = "ChunkContext (chunk " + std::to_string(options_.chunk) + "): ";
  check(!slices_.empty(), where + "a chunk needs at least one slice");
  for (const Slice& s : slices_)
    check(s.start >= 0 && s.end > s.start, where + "slice [" + std::to_string(s.start) + ", " +
                                               std::to_string(s.end) + ") of sequence " +
                                               std::to_string(s.seq) + " is empty or negative");
  for (const auto& layer : kv_)
    check(layer.size() == slices_.size(),
          where + "one K/V entry per slice and layer is required (null for a whole sequence)");
  // Without sequence parallelism the pieces are the slices and there is no padding.
  rows_ = shard_rows(slices_, sequence_size(), sequence_rank());
  num_tokens_ = rows_.local;
  const auto longs = at::TensorOptions().dtype(at::kLong).device(options_.device);
  std::vector<at::Tensor> positions;
  for (const Slice& s : rows_.pieces) positions.push_back(at::arange(s.start, s.end, longs));
  if (rows_.padding() > 0) positions.push_back(at::zeros({rows_.padding()}, longs));
  positions_ = positions.size() == 1 ? positions[0] : at::cat(positions);
}

at::Tensor ChunkContext::attention(int layer, const at::Tensor& q, const at::Tensor& k,
                                   const at::Tensor& v) const {
  check(layer >= 0 && (kv_.empty() || layer < num_layers()),
        "ChunkContext::attention: layer " + std::to_string(layer) +
            " is not a local layer of "
            "this stage (it has " +
            std::to_string(num_layers()) + ")");
  check(q.dim() == 3 && q.size(0) == num_tokens_,
        "ChunkContext::attention: q must be [" + std::to_string(num_tokens_) +
            ", heads, head_dim] for chunk " + std::to_string(options_.chunk));
  const kernels::SliceBuffers& buffers = kv_.empty() ? kernels::SliceBuffers{} : kv_[layer];
  if (sequence_size() > 1)
    return options_.sequence->attention(q, k, v, slices_, rows_, buffers, options_.attention_scale,
                                        options_.attention_backend,
                                        "chunk " + std::to_string(options_.chunk) +
                                            "'s attention on layer " + std::to_string(layer));
  return kernels::chunk_attention(q, k, v, slices_, buffers, options_.attention_scale,
                                  options_.attention_backend);
}

}  // namespace infinipipe::runtime
