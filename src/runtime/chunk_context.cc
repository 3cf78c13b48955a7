#include "infinipipe/runtime/chunk_context.h"

#include <ATen/ATen.h>

#include "infinipipe/common/error.h"

namespace infinipipe::runtime {

ChunkContext::ChunkContext(int chunk, std::vector<SliceRows> slices,
                           std::vector<std::vector<std::shared_ptr<kernels::SequenceKV>>> kv,
                           at::Device device, double scale, kernels::Backend backend)
    : chunk_(chunk), slices_(std::move(slices)), kv_(std::move(kv)), scale_(scale),
      backend_(backend) {
  check(!slices_.empty(), "ChunkContext: chunk " + std::to_string(chunk) + " has no slices");
  std::vector<at::Tensor> positions;
  for (const SliceRows& s : slices_) {
    check(s.row == num_tokens_ && s.length > 0 && s.start >= 0,
          "ChunkContext: chunk " + std::to_string(chunk) + ": slices must tile the rows in order");
    num_tokens_ += s.length;
    positions.push_back(at::arange(s.start, s.start + s.length,
                                   at::TensorOptions().dtype(at::kLong).device(device)));
  }
  for (const auto& layer : kv_)
    check(layer.size() == slices_.size(),
          "ChunkContext: one K/V entry per slice and layer is required");
  positions_ = positions.size() == 1 ? positions[0] : at::cat(positions);
}

at::Tensor ChunkContext::attention(int layer, const at::Tensor& q, const at::Tensor& k,
                                   const at::Tensor& v) const {
  check(layer >= 0 && layer < num_layers(),
        "ChunkContext::attention: layer " + std::to_string(layer) + " is not a local layer of "
            "this stage (it has " + std::to_string(num_layers()) + ")");
  check(q.dim() == 3 && q.size(0) == num_tokens_,
        "ChunkContext::attention: q must be [" + std::to_string(num_tokens_) +
            ", heads, head_dim] for chunk " + std::to_string(chunk_));
  std::vector<kernels::Segment> segments;
  segments.reserve(slices_.size());
  for (size_t i = 0; i < slices_.size(); ++i) {
    const SliceRows& s = slices_[i];
    segments.push_back(kernels::Segment{s.row, s.start, s.length, kv_[layer][i]});
  }
  return kernels::chunk_attention(q, k, v, segments, scale_, backend_);
}

}  // namespace infinipipe::runtime
