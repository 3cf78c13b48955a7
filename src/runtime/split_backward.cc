#include "split_backward.h"

#include <torch/csrc/autograd/autograd.h>
#include <torch/csrc/autograd/engine.h>
#include <torch/csrc/autograd/function.h>
#include <torch/csrc/autograd/function_hook.h>
#include <torch/csrc/autograd/grad_mode.h>
#include <torch/csrc/autograd/variable.h>

#include <memory>
#include <type_traits>
#include <unordered_map>
#include <unordered_set>

#include "infinipipe/core/error.h"

namespace infinipipe::runtime {

using torch::autograd::Edge;
using torch::autograd::edge_list;
using torch::autograd::Node;
using torch::autograd::variable_list;

// A node that feeds parameters: the edges to their gradient accumulators, and the gradients it
// receives in B (kept by a pre-hook, which runs whenever the node runs).
struct SplitBackward::WeightNode {
  NodePtr node;
  edge_list parameters;
  variable_list grads;
};

namespace {

// An owning pointer to a node the graph holds (a template, so that only the branch of this
// torch's pointer is compiled).
template <typename Ptr, typename N>
Ptr owning(N* node) {
  if constexpr (std::is_same_v<Ptr, std::shared_ptr<N>>)
    return node->shared_from_this();
  else
    return Ptr::reclaim_copy(node);
}

struct KeepGrads : torch::autograd::FunctionPreHook {
  explicit KeepGrads(std::weak_ptr<SplitBackward::WeightNode> into) : into(std::move(into)) {}
  variable_list operator()(const variable_list& grads) override {
    if (auto weight = into.lock(); weight && weight->grads.empty()) weight->grads = grads;
    return grads;
  }
  // Weak: the node owns the hook and the WeightNode holds the node.
  std::weak_ptr<SplitBackward::WeightNode> into;
};

// The parameter an edge leads to through nodes of one input each (a transpose, a cast, a view
// of the weight), or null.
Node* parameter_behind(const Edge& edge, const std::unordered_set<const Node*>& accumulators) {
  Node* node = edge.function.get();
  while (node != nullptr) {
    if (accumulators.count(node)) return node;
    if (node->num_outputs() != 1) return nullptr;
    node = node->next_edge(0).function.get();
  }
  return nullptr;
}

// Frees what the graph's nodes saved, from `root` down, but the nodes in `keep` and, with
// `accumulators`, what lies behind their edges to parameters.
void release_saved(Node* root, const std::unordered_set<const Node*>& keep,
                   const std::unordered_set<const Node*>* accumulators) {
  std::unordered_set<const Node*> seen;
  std::vector<Node*> stack = {root};
  while (!stack.empty()) {
    Node* node = stack.back();
    stack.pop_back();
    if (!seen.insert(node).second) continue;
    if (!keep.count(node)) node->release_variables();
    for (const Edge& edge : node->next_edges())
      if (edge.is_valid() && !(accumulators && parameter_behind(edge, *accumulators)))
        stack.push_back(edge.function.get());
  }
}

}  // namespace

at::Tensor SplitBackward::input_gradient(const at::Tensor& output, const at::Tensor& input,
                                         const at::Tensor& grad,
                                         const std::vector<at::Tensor>& parameters) {
  check(nodes_.empty(), "SplitBackward: one B per recorded graph");
  std::unordered_set<const Node*> accumulators;
  for (const at::Tensor& p : parameters)
    if (p.requires_grad())
      if (auto acc = torch::autograd::impl::try_get_grad_accumulator(p))
        accumulators.insert(acc.get());
  const NodePtr input_node = torch::autograd::impl::try_get_grad_accumulator(input);

  // Walk the graph from the output without entering the parameters' chains: every node that
  // feeds a parameter is a weight node, and each must lie on the way to the input, or B would
  // not run it and W would not know its gradients.
  std::unordered_map<Node*, std::shared_ptr<WeightNode>> found;
  std::unordered_map<Node*, char> reaches_input;  // 0: no, 1: yes, 2: being visited
  bool splittable = output.grad_fn() != nullptr && input_node;
  struct Frame {
    Node* node;
    size_t next;
  };
  std::vector<Frame> stack;
  if (splittable) {
    stack.push_back({output.grad_fn().get(), 0});
    reaches_input[stack.back().node] = 2;
  }
  while (!stack.empty() && splittable) {
    Frame& frame = stack.back();
    Node* node = frame.node;
    if (frame.next < node->num_outputs()) {
      const Edge& edge = node->next_edge(frame.next++);
      if (!edge.is_valid()) continue;
      if (Node* accumulator = parameter_behind(edge, accumulators)) {
        auto& weight = found[node];
        if (!weight) weight = std::make_shared<WeightNode>();
        weight->node = owning<NodePtr>(node);
        // W runs the nodes on the way to these accumulators, which add to the parameters' .grad.
        weight->parameters.emplace_back(owning<NodePtr>(accumulator), 0);
        continue;
      }
      Node* next = edge.function.get();
      if (next == input_node.get()) {
        reaches_input[node] = 1;
        continue;
      }
      auto it = reaches_input.find(next);
      if (it == reaches_input.end()) {
        reaches_input[next] = 2;
        stack.push_back({next, 0});
      } else if (it->second == 1) {
        reaches_input[node] = 1;
      }
      continue;
    }
    const char reached = reaches_input[node] == 1 ? 1 : 0;
    reaches_input[node] = reached;
    stack.pop_back();
    if (reached && !stack.empty()) reaches_input[stack.back().node] = 1;
  }
  for (const auto& [node, weight] : found)
    if (reaches_input[node] != 1) splittable = false;

  if (!splittable) {
    // The whole backward, as without zero bubble.
    if (grad.defined())
      torch::autograd::backward({output}, {grad});
    else
      torch::autograd::backward({output});
    return at::Tensor();
  }
  for (auto& [node, weight] : found) {
    node->add_pre_hook(std::make_unique<KeepGrads>(std::weak_ptr<WeightNode>(weight)));
    nodes_.push_back(weight);
  }
  root_ = torch::autograd::impl::gradient_edge(output).function;
  const variable_list grads = grad.defined() ? variable_list{grad} : variable_list{};
  at::Tensor input_grad = torch::autograd::grad({output}, {input}, grads, /*retain_graph=*/true)[0];
  // W needs only the nodes feeding parameters (and their chains): every other node has run its
  // last, so what it saved goes now, not at W.
  std::unordered_set<const Node*> keep;
  for (const auto& [node, weight] : found) keep.insert(node);
  release_saved(root_.get(), keep, &accumulators);
  return input_grad;
}

void SplitBackward::kept_gradients(std::vector<at::Tensor>& out) const {
  for (const std::shared_ptr<WeightNode>& weight : nodes_)
    for (const at::Tensor& g : weight->grads)
      if (g.defined()) out.push_back(g);
}

void SplitBackward::weights() {
  auto& engine = torch::autograd::Engine::get_default_engine();
  for (const std::shared_ptr<WeightNode>& weight : nodes_) {
    edge_list roots;
    variable_list grads;
    for (uint32_t i = 0; i < weight->grads.size(); ++i)
      if (weight->grads[i].defined()) {
        roots.emplace_back(weight->node, i);
        grads.push_back(weight->grads[i]);
      }
    check(!roots.empty(), "SplitBackward: a node feeding parameters received no gradient in B");
    // Only the edges into its own parameters: the node's other inputs lead back into the graph,
    // whose backward B has done.
    engine.execute(roots, grads, /*keep_graph=*/false, /*create_graph=*/false,
                   /*accumulate_grad=*/true, weight->parameters);
    weight->grads.clear();
  }
  nodes_.clear();
  // Every node has run (B the ones on the way to the input, W the rest): free what they saved.
  if (root_) release_saved(root_.get(), {}, nullptr);
  root_.reset();
}

}  // namespace infinipipe::runtime
