#pragma once
// The model of one pipeline stage as the executor drives it: piece by piece, so the executor
// decides which layers keep their activations and which are recomputed.
//
// Tensors are packed rows without a batch dimension: tokens [T] int64, hidden [T, hidden].
// Layer indices are local to the stage (0 .. num_layers() - 1). Every method runs under the
// caller's grad mode (the executor runs checkpointed layers without grad and re-runs them with
// grad in backward), and must be deterministic so that a re-run reproduces the forward.
//
// Implementations: PythonStageModule (python/src/bind_runtime.cc) drives a Python object with
// the same methods; a C++ LibTorch module implements this class directly.
#include <vector>

#include <ATen/core/Tensor.h>

#include "infinipipe/runtime/chunk_context.h"

namespace infinipipe::runtime {

class StageModule {
 public:
  virtual ~StageModule() = default;

  virtual int num_layers() const = 0;
  virtual bool has_embedding() const = 0;  // the first stage
  // Final norm and LM head: the last stage, and with a spread head (docs/design.md, "Spread
  // head") every stage the plan runs H actions on, each holding a replica.
  virtual bool has_head() const = 0;

  // tokens [T] -> hidden [T, hidden]. Only when has_embedding().
  virtual at::Tensor embed(const at::Tensor& tokens, ChunkContext& ctx) = 0;
  // hidden [T, hidden] -> hidden [T, hidden]; attention through ctx.attention(local_index, ...).
  virtual at::Tensor layer(int local_index, const at::Tensor& hidden, ChunkContext& ctx) = 0;
  // hidden [T, hidden] -> logits [T, vocab]. Only when has_head(); ctx has no K/V buffers on a
  // stage that runs a chunk's head without its layers.
  virtual at::Tensor head(const at::Tensor& hidden, ChunkContext& ctx) = 0;

  // The stage's parameters (for an optimizer); their gradients accumulate across a step.
  virtual std::vector<at::Tensor> parameters() = 0;
};

}  // namespace infinipipe::runtime
