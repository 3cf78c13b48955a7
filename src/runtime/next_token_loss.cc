#include "infinipipe/runtime/next_token_loss.h"

#include <ATen/ATen.h>

#include <algorithm>

#include "infinipipe/core/error.h"

namespace infinipipe::runtime {

at::Tensor next_token_targets(const std::vector<Slice>& slices,
                              const std::vector<at::Tensor>& sequences) {
  std::vector<at::Tensor> parts;
  for (const Slice& s : slices) {
    check(s.seq >= 0 && s.seq < static_cast<int>(sequences.size()) && sequences[s.seq].defined() &&
              sequences[s.seq].dim() == 1,
          "next_token_targets: sequence " + std::to_string(s.seq) +
              " was not given as a 1-D "
              "tensor of token ids");
    const at::Tensor& seq = sequences[s.seq];
    const int64_t n = seq.size(0);
    check(s.start >= 0 && s.end > s.start && s.end <= n,
          "next_token_targets: slice [" + std::to_string(s.start) + ", " + std::to_string(s.end) +
              ") lies outside sequence " + std::to_string(s.seq) + " of " + std::to_string(n) +
              " tokens");
    parts.push_back(seq.slice(0, s.start + 1, std::min(s.end + 1, n)));
    if (s.end == n) parts.push_back(at::full({1}, kIgnoreIndex, seq.options()));
  }
  check(!parts.empty(), "next_token_targets: the chunk has no slices");
  return at::cat(parts);
}

at::Tensor next_token_loss(const at::Tensor& logits, const at::Tensor& targets,
                           double target_tokens) {
  check(target_tokens > 0, "next_token_loss: the step's target count must be positive, got " +
                               std::to_string(target_tokens));
  check(logits.dim() == 2 && targets.dim() == 1 && logits.size(0) == targets.size(0),
        "next_token_loss: logits must be [tokens, vocab] and targets [tokens]");
  const at::Tensor wide = logits.scalar_type() == at::kFloat || logits.scalar_type() == at::kDouble
                              ? logits
                              : logits.to(at::kFloat);
  return at::cross_entropy_loss(wide, targets.to(wide.device()), {}, at::Reduction::Sum,
                                kIgnoreIndex) /
         target_tokens;
}

}  // namespace infinipipe::runtime
