#pragma once
// Zero bubble's B and W over one recorded autograd graph (docs/design.md, "Zero bubble";
// internal to the runtime part). B back-propagates to the graph's input only, keeping the nodes
// feeding the stage's parameters (what they saved: the GEMMs' and the norm products' inputs) and
// the gradients that reach them, and frees what every other node saved; W continues from those
// nodes into the parameters alone. Nothing is computed twice: attention's backward (which adds
// to the earlier slices' dK/dV) and the sequence-parallel exchanges run once, in B.
#include <memory>
#include <vector>

#include <ATen/core/Tensor.h>
#include <torch/csrc/autograd/edge.h>

namespace infinipipe::runtime {

// How autograd holds its nodes: c10::intrusive_ptr from torch 2.13, std::shared_ptr before (the
// GPU machine's torch 2.11, issue 37).
using NodePtr = decltype(torch::autograd::Edge::function);

class SplitBackward {
 public:
  // B: d(output)/d(input) given `grad` (undefined for a scalar loss), the graph kept for W.
  // Returns the input's gradient, or an undefined tensor when the graph does not allow the split
  // (a parameter reached only through a node that is not on the way to `input`): then the whole
  // backward has run, weight gradients included, and weights() does nothing.
  at::Tensor input_gradient(const at::Tensor& output, const at::Tensor& input,
                            const at::Tensor& grad, const std::vector<at::Tensor>& parameters);
  // W: the parameters' gradients from what B kept, accumulated into their .grad; frees the graph.
  void weights();
  // The gradients B kept for W (for memory probes).
  void kept_gradients(std::vector<at::Tensor>& out) const;

  struct WeightNode;  // a node feeding parameters, and what it received in B

 private:
  std::vector<std::shared_ptr<WeightNode>> nodes_;
  // The output's node: W frees every node's saved tensors from it once the weights are done (B
  // kept them all, and a saved tensor that is its own node's output can hold the node).
  NodePtr root_;
};

}  // namespace infinipipe::runtime
