#pragma once
// The lean layer (LlamaConfig::lean_layer): what a decoder layer keeps for its backward, cut to
// what cannot be recomputed in a few element-wise passes. The values are the eager layer's to
// the bit; CostCoefficients::analytic counts what it keeps. The Python stage's are the same
// (python/infinipipe/models/llama/layers.py: LeanRMSNorm, LeanSwiGLU, Refill).
#include <ATen/ATen.h>

#include <functional>
#include <memory>
#include <vector>

namespace infinipipe::models::lean {

// 1 / sqrt(mean(x^2) + eps) per row, in at least float32, as the eager norm computes it.
at::Tensor rms_rstd(const at::Tensor& x, double eps);
// RMSNorm with that rstd, keeping its input and rstd; its backward recomputes the normalised
// value.
at::Tensor rms_norm(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& rstd);
// The norm's value written into `into` by the forward's arithmetic (for a Refill).
void rms_norm_into(at::Tensor& into, const at::Tensor& x, const at::Tensor& weight,
                   const at::Tensor& rstd);
// silu(gate) * up keeping gate and up; its backward recomputes SiLU's output.
at::Tensor swiglu(const at::Tensor& gate, const at::Tensor& up);

// The layer's GEMM inputs (the two norms' outputs and the SwiGLU product), dropped after the
// layer's forward and refilled when the gradient reaches the layer's output, so that autograd
// holds them only while their GEMMs' backward needs them: from the layer's backward (with zero
// bubble, from its B until its W) instead of from the forward on. The saved tensors keep their
// metadata and version; only their storage is freed and, before the layer's first backward node
// runs, reallocated by its own allocator and written by the forward's arithmetic from what the
// layer keeps anyway (the norms' inputs, gate and up), through a fresh alias so that no version
// counter moves (Megatron-LM's output-discarding checkpoint frees and refills storage the same
// way). It assumes autograd keeps what the layer saves: the executor runs a checkpointed
// layer's first forward without a graph, where nothing is dropped.
class Refill {
 public:
  using Compute = std::function<void(at::Tensor& into)>;
  // To drop `tensor` at attach; `compute(into)` writes its value into `into`.
  void keep(const at::Tensor& tensor, Compute compute);
  // Drops the kept tensors; the gradient reaching `output` refills them, once.
  static void attach(const std::shared_ptr<Refill>& refill, const at::Tensor& output);

 private:
  void run();
  struct Dropped {
    at::Tensor tensor;
    size_t nbytes;
    Compute compute;
  };
  std::vector<Dropped> dropped_;
};

}  // namespace infinipipe::models::lean
