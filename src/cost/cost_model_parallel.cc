// The parts of the cost model that the parallel layout shapes (docs/planning.md, "Parallel
// layout"): which link each all-to-all and each send between stages uses, the Ulysses
// all-to-all time, and the model state per rank under ZeRO. The rest of CostModel, where the
// layout only divides by d_s, is in cost_model.cc.
#include <algorithm>

#include "infinipipe/core/error.h"
#include "infinipipe/cost/cost_model.h"

namespace infinipipe {

namespace {
// Ulysses all-to-alls per layer and direction: q, k and v from token- to head-sharded, the
// attention output back (Jacobs et al. 2023, "DeepSpeed Ulysses", arXiv 2309.14509, Sec. 3.1);
// the backward runs the same four on the gradients.
constexpr int kAlltoallsPerLayer = 4;
// ZeRO-3 holds gathered parameters while a unit computes and the next one's prefetch lands: two
// units' weights (PyTorch FSDP documentation, BackwardPrefetch: prefetching "increases peak
// memory" by one more unit's parameters), and one unit's unsharded gradient before its
// reduce-scatter.
constexpr double kGatheredUnits = 2;

// Called in the planner's inner loops: the message is built only on failure.
void check_index(bool ok, const char* what, int index, int stages) {
  if (ok) return;
  throw Error(std::string("cost model: ") + what + " " + std::to_string(index) +
              " out of range for " + std::to_string(stages) + " stages");
}
}  // namespace

void CostModel::set_links() {
  const CostCoefficients& k = coefficients_;
  const Link in_node{k.p2p_bandwidth, k.p2p_latency_s};
  // A cost model file without the inter-node link describes one link for everything.
  const Link between_nodes =
      k.inter_node_bandwidth > 0 ? Link{k.inter_node_bandwidth, k.inter_node_latency_s} : in_node;
  // The all-to-all in a node, when measured on its own (the profiler's), else the same link.
  const Link alltoall_in_node =
      k.alltoall_bandwidth > 0 ? Link{k.alltoall_bandwidth, k.alltoall_latency_s} : in_node;
  const int d_p = num_stages();
  alltoall_link_.assign(d_p, alltoall_in_node);
  p2p_link_.assign(d_p, in_node);
  gradient_link_.assign(d_p, in_node);
  for (int p = 0; p < d_p; ++p) {
    if (layout_.sequence_group_crosses_nodes(p, d_p)) alltoall_link_[p] = between_nodes;
    if (p + 1 < d_p && layout_.boundary_crosses_nodes(p, d_p)) p2p_link_[p] = between_nodes;
    if (layout_.gradient_group_crosses_nodes(p, d_p)) gradient_link_[p] = between_nodes;
  }
  // An all-reduce over every rank: the ranks are numbered node by node, so it crosses nodes
  // once the world outgrows one.
  world_link_ = layout_.world(d_p) > layout_.gpus_per_node ? between_nodes : in_node;
  gather_s_.assign(d_p, 0.0);
  embedding_gather_s_ = head_gather_s_ = 0;
  const double n = layout_.gradient_group();
  if (layout_.zero == 3 && n > 1) {
    // (n-1)/n of a unit's parameters over the stage's gradient link, plus a latency.
    auto gather = [&](double params, int stage) {
      return (n - 1) / n * params * shape_.bytes_per_element / gradient_link_[stage].bandwidth +
             gradient_link_[stage].latency_s;
    };
    for (int p = 0; p < d_p; ++p) gather_s_[p] = gather(double(shape_.params_per_layer()), p);
    embedding_gather_s_ = gather(double(shape_.embedding_params()), 0);
    head_gather_s_ = gather(double(shape_.embedding_params()) + shape_.hidden, d_p - 1);
  }
}

double CostModel::gradient_sync_time(int stage, bool head_apart) const {
  check_index(stage >= 0 && stage < num_stages(), "stage", stage, num_stages());
  const double n = layout_.gradient_group();
  if (n == 1 || layout_.zero == 3) return 0;
  const Link& link = gradient_link_[stage];
  double params = stage_params(stage);
  if (head_apart && stage == num_stages() - 1 && !ideal_even_head_) params -= head_params();
  const double bytes = params * shape_.bytes_per_element;
  return 2 * (n - 1) / n * bytes / link.bandwidth + 2 * link.latency_s;
}

CostModel CostModel::with_head_replicas() const {
  CostModel out = *this;
  out.head_replicas_ = true;
  return out;
}

double CostModel::head_replica_sync_time() const {
  const double n = layout_.world(num_stages());
  if (n == 1) return 0;
  const double bytes = head_params() * shape_.bytes_per_element;
  return 2 * (n - 1) / n * bytes / world_link_.bandwidth + 2 * world_link_.latency_s;
}

bool CostModel::chunk_costs_alike(int a, int b) const {
  check_index(a >= 0 && a < num_stages(), "stage", a, num_stages());
  check_index(b >= 0 && b < num_stages(), "stage", b, num_stages());
  if (a == b) return true;
  const int last = num_stages() - 1;
  if (a == 0 || b == 0 || a == last || b == last) return false;
  // The all-to-all link enters only with d_s > 1 (layer_alltoall_time is 0 without).
  const bool same_link =
      layout_.sequence == 1 || (alltoall_link_[a].bandwidth == alltoall_link_[b].bandwidth &&
                                alltoall_link_[a].latency_s == alltoall_link_[b].latency_s);
  return layers(a) == layers(b) && same_link && gather_s_[a] == gather_s_[b];
}

double CostModel::layer_alltoall_time(const Chunk& chunk, int stage) const {
  const int d_s = layout_.sequence;
  if (d_s == 1) return 0;
  check_index(stage >= 0 && stage < num_stages(), "stage", stage, num_stages());
  const Link& link = alltoall_link_[stage];
  // Each rank holds tokens/d_s rows of q (h wide), k and v (kv_dim wide) and the output (h);
  // an all-to-all keeps 1/d_s of them and sends the rest, over the group's slowest link (a
  // group across nodes is bound by the NIC, the in-node part is not credited).
  const double kv_dim = double(shape_.kv_heads) * shape_.head_dim();
  const double bytes_per_token = (2.0 * shape_.hidden + 2.0 * kv_dim) * shape_.bytes_per_element;
  const double rows = double(chunk.tokens()) / d_s;
  const double sent = rows * bytes_per_token * (d_s - 1) / d_s;
  return sent / link.bandwidth + kAlltoallsPerLayer * link.latency_s;
}

double CostModel::recompute_time(const Chunk& chunk, int stage, int checkpointed_layers) const {
  return recompute_time(checkpointed_layers, layer_forward_time(chunk),
                        layer_alltoall_time(chunk, stage));
}

double CostModel::recompute_time(int checkpointed_layers, double layer_forward,
                                 double layer_alltoall) const {
  // Two products, not one of a sum: with d_s = 1 the second is an exact 0.0 and the first is
  // the layout-free model's recompute to the bit (r = 1 multiplies exactly). The all-to-alls
  // are repeated in full: only the compute ran cheaper without autograd.
  const double r = coefficients_.checkpointed_forward_ratio;
  return checkpointed_layers * (r * layer_forward) + checkpointed_layers * layer_alltoall;
}

double CostModel::alltoall_time(const Chunk& chunk, int stage, int checkpointed_layers) const {
  return (2.0 * layers(stage) + checkpointed_layers) * layer_alltoall_time(chunk, stage);
}

double CostModel::p2p_time(const Chunk& chunk, int boundary) const {
  check_index(boundary >= 0 && boundary + 1 < num_stages(), "stage boundary", boundary,
              num_stages());
  const Link& link = p2p_link_[boundary];
  // Every SP rank sends its own tokens/d_s rows to its peer, all at once over their own links.
  return message_bytes(chunk) / link.bandwidth + link.latency_s;
}

double CostModel::message_bytes(const Chunk& chunk) const {
  const double rows = double(chunk.tokens()) / layout_.sequence;
  return rows * coefficients_.p2p_bytes_per_token;
}

double CostModel::stage_params(int stage) const {
  double params = double(layers(stage)) * double(shape_.params_per_layer());
  if (stage == 0) params += double(shape_.embedding_params());
  // A share of the head on every stage in the what-if of with_ideal_even_head.
  if (ideal_even_head_)
    params += head_params() / num_stages();
  else if (stage == num_stages() - 1)
    params += head_params();
  return params;
}

double CostModel::head_params() const {
  // Untied LM head as in LLaMA, and the final RMSNorm gain.
  return double(shape_.embedding_params()) + shape_.hidden;
}

double CostModel::model_state_bytes(int stage) const {
  check_index(stage >= 0 && stage < num_stages(), "stage", stage, num_stages());
  const double params = stage_params(stage);
  double bytes = model_state_bytes_per_rank(params, coefficients_.model_state_bytes_per_param,
                                            shape_.bytes_per_element, layout_);
  if (layout_.zero == 3 && layout_.gradient_group() > 1) {
    // The largest unit gathered whole: a layer, or the embedding / LM head on the end stages.
    double unit = double(shape_.params_per_layer());
    if (stage == 0 || (stage == num_stages() - 1 && !ideal_even_head_))
      unit = std::max(unit, double(shape_.embedding_params()));
    const double w = shape_.bytes_per_element;
    bytes += unit * (kGatheredUnits * w + w);
  }
  return bytes;
}

double CostModel::head_transfer_time(const Chunk& chunk, int stage) const {
  const int last = num_stages() - 1;
  check_index(stage >= 0 && stage < last, "head stage", stage, num_stages());
  double slowest = p2p_time(chunk, stage);
  for (int boundary = stage + 1; boundary < last; ++boundary)
    slowest = std::max(slowest, p2p_time(chunk, boundary));
  return slowest;
}

double CostModel::head_replica_bytes() const {
  double bytes = model_state_bytes_per_rank(
      head_params(), coefficients_.model_state_bytes_per_param, shape_.bytes_per_element, layout_);
  if (layout_.zero == 3 && layout_.gradient_group() > 1) {
    // The stage already reserves a layer's gathered unit; the head's may be larger.
    const double larger =
        std::max(0.0, double(shape_.embedding_params()) - double(shape_.params_per_layer()));
    const double w = shape_.bytes_per_element;
    bytes += larger * (kGatheredUnits * w + w);
  }
  return bytes;
}

}  // namespace infinipipe
