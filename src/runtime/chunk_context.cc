#include "infinipipe/runtime/chunk_context.h"

#include <ATen/ATen.h>

#include "infinipipe/core/error.h"

namespace infinipipe::runtime {

ChunkContext::ChunkContext(std::vector<Slice> slices, std::vector<kernels::SliceBuffers> kv,
                           ChunkContextOptions options)
    : slices_(std::move(slices)), kv_(std::move(kv)), options_(options) {
  const std::string where = "ChunkContext (chunk " + std::to_string(options_.chunk) + "): ";
  check(!slices_.empty(), where + "a chunk needs at least one slice");
  std::vector<at::Tensor> positions;
  for (const Slice& s : slices_) {
    check(s.start >= 0 && s.end > s.start, where + "slice [" + std::to_string(s.start) + ", " +
                                               std::to_string(s.end) + ") of sequence " +
                                               std::to_string(s.seq) + " is empty or negative");
    num_tokens_ += s.length();
    positions.push_back(
        at::arange(s.start, s.end, at::TensorOptions().dtype(at::kLong).device(options_.device)));
  }
  for (const auto& layer : kv_)
    check(layer.size() == slices_.size(),
          where + "one K/V entry per slice and layer is required (null for a whole sequence)");
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
  return kernels::chunk_attention(q, k, v, slices_,
                                  kv_.empty() ? kernels::SliceBuffers{} : kv_[layer],
                                  options_.attention_scale, options_.attention_backend);
}

}  // namespace infinipipe::runtime
