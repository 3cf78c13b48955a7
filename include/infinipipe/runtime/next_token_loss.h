#pragma once
// The training objective, written once: next-token cross-entropy over a chunk's rows, summed and
// divided by the whole step's target count, so the chunks' losses add up to the step's mean
// loss. The executor, the layer profiler and the Python model all call it.
#include <cstdint>
#include <vector>

#include <ATen/core/Tensor.h>

#include "infinipipe/core/chunk.h"

namespace infinipipe::runtime {

// The target of a row that has none (a sequence's last token); torch's and transformers' default.
constexpr int64_t kIgnoreIndex = -100;

// Target ids [T] of a chunk's rows (its slices back to back): each token's next token in its
// sequence (for a slice's last token, the first of the sequence's next slice), kIgnoreIndex for
// a sequence's last token. sequences[s.seq]: the whole sequence s.seq, 1-D int64.
at::Tensor next_token_targets(const std::vector<Slice>& slices,
                              const std::vector<at::Tensor>& sequences);

// Summed cross-entropy of logits [T, vocab] against targets [T] (in float32 at least), divided by
// `target_tokens`, the step's target count (Error unless positive).
at::Tensor next_token_loss(const at::Tensor& logits, const at::Tensor& targets,
                           double target_tokens);

}  // namespace infinipipe::runtime
