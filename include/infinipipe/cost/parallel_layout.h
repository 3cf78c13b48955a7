#pragma once
// The paper's layout inside and around one pipeline: world = d_r data-parallel replicas x d_p
// pipeline stages x d_s Ulysses sequence-parallel ranks per stage, SP innermost. Global rank
//   rank = (replica * d_p + stage) * d_s + sp_rank
// so an SP group is d_s consecutive ranks and, with d_s dividing the GPUs of a node, sits inside
// one node (docs/planning.md, "Parallel layout"). What the cost model needs from it: how a
// chunk's work and memory divide over the SP ranks, which links the all-to-all and the stage
// to stage sends use, and how ZeRO shards a stage's model state.
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "infinipipe/cost/model_shape.h"

namespace infinipipe {

struct ParallelLayout {
  int sequence = 1;       // d_s: Ulysses ranks per stage
  int data = 1;           // d_r: data-parallel replicas of the whole pipeline
  int zero = 1;           // ZeRO level 0..3 over the stage's gradient group (d_s * d_r ranks)
  int gpus_per_node = 8;  // consecutive ranks sharing a node's fast links

  // Error naming the field unless every degree is at least 1 and zero is 0..3.
  void validate() const;
  // Error naming both numbers unless d_s divides the model's heads and KV heads: Ulysses gives
  // every SP rank whole heads (this project does not replicate K/V heads).
  void check_fits(const ModelShape& shape) const;

  // Ranks that reduce (and, with ZeRO, shard) one stage's gradients: its SP group in every
  // replica.
  int gradient_group() const { return sequence * data; }
  // Whether the SP group of `stage` (of `stages`) spans two nodes in some replica: its
  // all-to-all then runs over the inter-node link.
  bool sequence_group_crosses_nodes(int stage, int stages) const;
  // Whether the gradient group of `stage` (its SP group in every replica) spans two nodes: its
  // gradient collectives then run over the inter-node link.
  bool gradient_group_crosses_nodes(int stage, int stages) const;
  // Whether a send from `stage` to `stage + 1` crosses nodes in some replica (for some SP rank).
  bool boundary_crosses_nodes(int stage, int stages) const;

  // Where a global rank sits in a world of data * stages * sequence ranks, and the ranks a
  // runtime wires together (the Python trainer's layout.py does the same arithmetic):
  struct Place {
    int replica = 0;
    int stage = 0;
    int sequence_rank = 0;
  };
  int world(int stages) const { return data * stages * sequence; }
  Place place(int rank, int stages) const;  // Error when rank is outside the world
  int rank_of(const Place& place, int stages) const;
  // The same sequence rank of every stage of `rank`'s replica: its pipes.
  std::vector<int> pipeline_ranks(int rank, int stages) const;
  // `rank`'s stage group in its replica: its Ulysses all-to-alls.
  std::vector<int> sequence_ranks(int rank, int stages) const;
  // Every rank holding `stage` (its sequence group in every replica): its gradient group.
  std::vector<int> gradient_ranks(int stage, int stages) const;

  // "d_s=8 x d_p=4 x d_r=1, ZeRO-1, 8 GPUs per node" for `stages` = d_p.
  std::string describe(int stages) const;

  bool operator==(const ParallelLayout& o) const {
    return sequence == o.sequence && data == o.data && zero == o.zero &&
           gpus_per_node == o.gpus_per_node;
  }
  bool operator!=(const ParallelLayout& o) const { return !(*this == o); }
};

// Model state of one rank holding `params` parameters of a stage, at `bytes_per_param` in all
// (weights + gradients + optimizer state) of which weights and gradients are
// `bytes_per_element` each, under the layout's ZeRO level over N = gradient_group() ranks
// (Rajbhandari et al. 2020, "ZeRO", Sec. 5.1 and Fig. 1, with Psi parameters, K optimizer
// bytes per parameter, here w = g = bytes_per_element and K = bytes_per_param - 2w):
//   ZeRO-0:  (w + g + K) Psi
//   ZeRO-1:  (w + g) Psi + K Psi / N          optimizer state sharded
//   ZeRO-2:  w Psi + (g + K) Psi / N          gradients too
//   ZeRO-3:  (w + g + K) Psi / N              parameters too
// With N = 1 (or ZeRO-0) this is params * bytes_per_param, the count without a layout.
// Error when bytes_per_param is below 2 * bytes_per_element with ZeRO >= 1 (no optimizer state
// left to shard: a hand-written cost model whose state count is not weights + gradients +
// optimizer).
double model_state_bytes_per_rank(double params, double bytes_per_param, int bytes_per_element,
                                  const ParallelLayout& layout);

void to_json(nlohmann::json& j, const ParallelLayout& layout);
void from_json(const nlohmann::json& j, ParallelLayout& layout);

}  // namespace infinipipe
