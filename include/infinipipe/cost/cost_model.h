#pragma once
// Time and memory of chunks on pipeline stages. The coefficients are built analytically from a
// model shape and a hardware description, or loaded from JSON (measured by the profiler), so
// that every consumer (sequence processor, checkpoint planner, simulator) sees one model.
//
// Per stage with l layers, a chunk whose slices have lengths s_i and contexts c_i costs
//   T_fwd = l * (sum_i [a1 * ((c_i + s_i)^2 - c_i^2) + a2 * s_i + a3 * c_i] + b)
//           + extras(first/last stage)
//   T_bwd = g * T_fwd + ckpt_layers * r * (per-layer forward time)
// or, when the layer's backward was measured apart (the profiler fits it like the forward),
//   T_bwd = l * (sum_i [a1' * ((c_i + s_i)^2 - c_i^2) + a2' * s_i + a3' * c_i] + b') + g * extras
//           + ckpt_layers * r * (per-layer forward time)
// where r (checkpointed_forward_ratio) is what checkpointing a layer adds net, in forwards: its
// first forward ran without autograd, and the backward re-runs its recorded forward and at once
// its backward (docs/design.md, "Recompute's net cost").
// With a parallel layout of d_s sequence-parallel ranks per stage (parallel_layout.h) every
// time and byte is one rank's: the slice terms and the extras are divided by d_s (each rank has
// 1/d_s of the tokens, and of the heads in attention; b, a launch overhead, is not), and every
// layer adds its Ulysses all-to-alls, 4 in the forward (q, k, v in, the output back) and 4 in
// the backward. An all-to-all among d_s ranks, each holding X bytes, sends the (d_s - 1)/d_s of
// X that belongs to the others: X (d_s - 1)/d_s / B + latency over the SP group's link (B per
// direction and rank), so per layer and direction (cost_model_parallel.cc)
//   T_a2a = (d_s - 1)/d_s * (tokens/d_s) * (2h + 2 kv_dim) * bytes / B + 4 * latency
// Recomputing a layer repeats its forward all-to-alls.
#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "infinipipe/core/chunk.h"
#include "infinipipe/cost/hardware.h"
#include "infinipipe/cost/model_shape.h"
#include "infinipipe/cost/parallel_layout.h"
#include "infinipipe/cost/size_curve.h"

namespace infinipipe {

// The query regime of a slice of `query_tokens` tokens: how many of the (increasing) cuts are at
// or below it (CostCoefficients::attention_query_cuts).
inline int query_regime(int64_t query_tokens, const std::vector<int64_t>& cuts) {
  return static_cast<int>(std::upper_bound(cuts.begin(), cuts.end(), query_tokens) - cuts.begin());
}

// a1 (or a1') for a slice of `query_tokens` tokens: its query regime's entry of `by_query`, or
// the one `a1` of a model without regimes (empty `by_query`).
inline double a1_for_query(double a1, const std::vector<double>& by_query, int64_t query_tokens,
                           const std::vector<int64_t>& cuts) {
  return by_query.empty() ? a1 : by_query[query_regime(query_tokens, cuts)];
}

// Throws Error unless every cut is positive and above the one before; `owner` starts the message
// ("cost coefficients", "calibration").
void check_query_cuts(const std::vector<int64_t>& cuts, const std::string& owner);

struct CostCoefficients {
  // Time, per layer.
  double a1 = 0;  // s per unit of ((c+s)^2 - c^2): causal attention over the prefix
  double a2 = 0;  // s per token: the layer's GEMMs and element-wise work
  double b = 0;   // s per chunk: fixed overhead of running a layer on one chunk
  // s per token of a slice's context: what attending over the context costs beyond a1's share of
  // the work, paid once per slice (the CPU attention reads the context's keys and values once
  // per slice, and a slice with context runs a second kernel call and merges the two): it makes
  // a short slice far into its sequence dearer than a1 alone says. Zero in the analytic model
  // and in files written before it existed; the profiler fits it (cost/calibration.h).
  double a3 = 0;
  double backward_ratio = 2;  // g: backward time over forward time
  // The layer's backward on its own (a1', a2', b' above), when measured. All zero (the analytic
  // model) means g times the layer's forward. They exist because a measured backward does not
  // scale with the forward: an eager Python layer pays its interpreter overhead (b) in the
  // forward only, and attention's backward is relatively dearer than the GEMMs'.
  double backward_a1 = 0;
  double backward_a2 = 0;
  double backward_b = 0;
  double backward_a3 = 0;  // a3 of the backward
  // The attention term's a1 (a1') by the slice's query length, when measured: slice i uses
  // a1_by_query[r] (backward_a1_by_query[r]) where r counts the cuts at or below s_i. PyTorch's
  // CPU flash attention tiles the queries in blocks it picks by their number (32 rows below 192,
  // 64 below 768, 256 from 768: ATen's cpu/FlashAttentionKernel.cpp), and larger blocks do the
  // same work faster: on a 2-core Xeon, at contexts of 4096 and 7680, one a1 fitted over every
  // length came out 3.3% under the measured time of 300-700-token slices and 2.2% over that of
  // 800-1200-token ones (docs/notes/2026-11-27-validation-python-stage.md; docs/design.md, "Cost
  // model"). Empty (the analytic model, files without them): a1 and a1' for every slice. a1 (a1')
  // is then kept as the last regime's, the longest queries', which the split mesh's prefix cost
  // uses.
  std::vector<int64_t> attention_query_cuts;
  std::vector<double> a1_by_query, backward_a1_by_query;
  // Size-aware GEMMs and attention (CostCoefficients::analytic from a hardware with efficiency
  // curves; a GPU profile could fill them the same way). Empty: every size costs the same. When
  // set, a1 and a2 (a1', a2') price every slice at the curves' largest size, which is what the
  // chunking balances with (slice_layer_time, prefix_layer_time), and a chunk's layer time adds
  // what its size costs beyond that (CostModel::layer_forward_time):
  //   (tokens/d_s) * (G(tokens/d_s) - G_last) + sum_i (A(2c_i + s_i) - A_last) s_i(2c_i + s_i)/d_s
  // with G the layer's GEMM seconds per token by the rows one rank multiplies (its tokens of the
  // chunk: a packed chunk is one GEMM), and A the attention's a1 by 2c + s, the length whose
  // causal self-attention has a slice's mean keys per query (c + s/2) at the published
  // benchmarks' fixed 16K tokens per launch.
  SizeCurve gemm_s_per_token, backward_gemm_s_per_token;
  SizeCurve attention_a1_by_length, backward_attention_a1_by_length;
  bool has_size_curves() const {
    return !gemm_s_per_token.empty() || !backward_gemm_s_per_token.empty() ||
           !attention_a1_by_length.empty() || !backward_attention_a1_by_length.empty();
  }
  // r: what checkpointing a layer adds net, over the recorded forward the model charges
  // (T_fwd): its first forward without autograd (T_ng) and, in the backward, its recorded
  // forward again with its own backward at once (T_rec), less the recorded forward and backward
  // it replaces: (T_ng + T_rec - T_fwd - T_bwd) / T_fwd. All of it is charged to the backward's
  // recompute so that T_fwd stays independent of the checkpointing: each chunk's F + B on a
  // stage is exact, its F over by (1 - T_ng / T_fwd) of a forward per checkpointed layer and its
  // B under by as much. 1 in the analytic model (the FLOPs are the same; what autograd saves is
  // bookkeeping, not measured on GPUs here) and in files written before it existed; the
  // profiler measures it (cost/calibration.h).
  double checkpointed_forward_ratio = 1;
  // Time of the parts outside the layers, per token.
  double embedding_s_per_token = 0;  // first stage
  double head_s_per_token = 0;       // last stage: final norm, LM head, loss (forward only)
  // Memory, per token per layer unless said otherwise.
  double activation_bytes = 0;  // what one layer keeps for its backward (K/V included)
  double checkpoint_bytes = 0;  // what a checkpointed layer keeps: its input
  double kv_bytes =
      0;  // keys and values of one layer: a split sequence's K/V buffer (and dK/dV) per token
  double logits_bytes = 0;  // per token, last stage: final norm and loss, kept for the backward
  double model_state_bytes_per_param = 16;  // weights, gradients, optimizer state
  // Point to point, and the link inside a node (also the SP group's all-to-all there).
  double p2p_bytes_per_token = 0;  // one activation (or its gradient) per token
  double p2p_bandwidth = 0;        // bytes/s
  double p2p_latency_s = 0;
  // The link between nodes, per rank: sends between stages on different nodes, and an SP group
  // that spans nodes. Zero (files written before it existed) means the in-node link above.
  double inter_node_bandwidth = 0;
  double inter_node_latency_s = 0;
  // The all-to-all inside a node when measured apart from the sends above (the profiler's fit of
  // alltoall_base over the SP group, python/infinipipe/alltoall_profile.py): per all-to-all, sent
  // bytes / alltoall_bandwidth + alltoall_latency_s. Zero (the analytic model, files without
  // them) means the in-node link above.
  double alltoall_bandwidth = 0;
  double alltoall_latency_s = 0;

  // Analytic coefficients: FLOPs over achieved FLOP/s, bytes from the shape.
  static CostCoefficients analytic(const ModelShape& shape, const Hardware& hw);

  // a1 (a1') for a slice of `query_tokens` tokens.
  double attention_a1(int64_t query_tokens) const {
    return a1_for_query(a1, a1_by_query, query_tokens, attention_query_cuts);
  }
  double backward_attention_a1(int64_t query_tokens) const {
    return a1_for_query(backward_a1, backward_a1_by_query, query_tokens, attention_query_cuts);
  }
  int query_regime(int64_t query_tokens) const {
    return infinipipe::query_regime(query_tokens, attention_query_cuts);
  }

  bool has_layer_backward() const {
    return backward_a1 > 0 || backward_a2 > 0 || backward_b > 0 || backward_a3 > 0;
  }

  // Throws Error naming the field when a value is negative, not finite, or (bandwidth, state
  // bytes, backward ratio) zero.
  void validate() const;
};

void to_json(nlohmann::json& j, const CostCoefficients& c);
void from_json(const nlohmann::json& j, CostCoefficients& c);

class CostModel {
 public:
  CostModel() = default;
  // Validates all three; the stages' layers must add up to shape.layers, each at least 1.
  // The layout must fit the shape (ParallelLayout::check_fits: d_s divides heads and KV heads).
  CostModel(ModelShape shape, std::vector<int> layers_per_stage, CostCoefficients coefficients,
            ParallelLayout layout = {});
  // Analytic coefficients, layers split evenly.
  static CostModel analytic(const ModelShape& shape, const Hardware& hw, int stages,
                            const ParallelLayout& layout = {});

  const ModelShape& shape() const { return shape_; }
  const CostCoefficients& coefficients() const { return coefficients_; }
  const std::vector<int>& layers_per_stage() const { return layers_per_stage_; }
  int num_stages() const { return static_cast<int>(layers_per_stage_.size()); }
  int layers(int stage) const { return layers_per_stage_.at(stage); }
  const ParallelLayout& layout() const { return layout_; }

  // --- time (seconds), of one rank ---
  // One layer, one slice, without the per-chunk overhead: a1 * ((c+s)^2 - c^2) + a2 * s + a3 * c,
  // the work of the whole slice (all SP ranks together): the chunking balances with it.
  double slice_layer_time(int64_t context, int64_t length) const;
  // The per-layer cost of a sequence's first x tokens with one a1 for every query length, so
  // that a later slice costs prefix_layer_time(c + s) - prefix_layer_time(c) and the cost grows
  // with x: what the chunking cuts sequences by. slice_layer_time(0, x), bit for bit, when the
  // model has no query-length regimes (CostCoefficients::attention_query_cuts).
  double prefix_layer_time(int64_t tokens) const;
  // One layer's compute on one chunk: sum of its slices (over d_s) plus b, plus what the chunk's
  // size adds with size curves (CostCoefficients). No all-to-all.
  double layer_forward_time(const Chunk& chunk) const;
  // One layer's forward all-to-alls on the stage (its backward has as many); 0 with d_s = 1.
  double layer_alltoall_time(const Chunk& chunk, int stage) const;
  // Compute and all-to-alls of the chunk's forward on the stage.
  double forward_time(const Chunk& chunk, int stage) const;
  // One layer's backward compute, without recompute or all-to-alls.
  double layer_backward_time(const Chunk& chunk) const;
  // What checkpointing one of the chunk's layers adds, without all-to-alls: r times
  // layer_forward_time (CostCoefficients::checkpointed_forward_ratio).
  double layer_recompute_time(const Chunk& chunk) const {
    return coefficients_.checkpointed_forward_ratio * layer_forward_time(chunk);
  }
  // Backward of the chunk on the stage, recomputing `checkpointed_layers` of its layers (their
  // forward compute and all-to-alls), with its own all-to-alls.
  double backward_time(const Chunk& chunk, int stage, int checkpointed_layers) const;
  // forward_time and backward_time given the chunk's layer_forward_time, which must be passed
  // exactly: the same results, bit for bit, without summing the slices again on every stage
  // (the planner asks about each chunk on every stage; docs/planning.md, "Search speed").
  // With `with_head` false the last stage's costs leave the head out: the chunk's H action runs
  // it (spread head, below). Other stages have no head to leave out.
  double forward_time_with(const Chunk& chunk, int stage, double layer_forward,
                           bool with_head = true) const;
  double backward_time_with(const Chunk& chunk, int stage, int checkpointed_layers,
                            double layer_forward, bool with_head = true) const;
  // True when every per-chunk cost of stage `a` (forward_time, backward_time, recompute_time,
  // alltoall_time, activation_bytes, checkpoint_saving_bytes, backward_workspace_bytes) equals
  // that of stage `b` for every chunk, bit for bit: the same layer count and all-to-all link, and
  // neither the first stage (embedding) nor the last (head, logits) unless a == b. Lets a caller
  // asking about every chunk on every stage reuse one stage's answers (pipeline_bound).
  bool chunk_costs_alike(int a, int b) const;
  // Zero bubble (scheduler.h): the part of the chunk's backward_time on the stage that a W
  // action takes out of its B, the layers' weight-gradient GEMMs. With size curves, exactly
  // those (the backward GEMM curve less the forward's, at the chunk's rows per rank); otherwise
  // half of the backward's per-token term, since a GEMM's weight gradient has as many FLOPs as
  // its input gradient (2MNK each; Narayanan et al. SC'21 count training as 3x the forward for
  // that reason), which also gives W a half of the small linear attention and element-wise
  // terms that term holds. Attention's quadratic part, the per-chunk overhead, recompute,
  // all-to-alls and the embedding's and the head's backward stay with B (the executor runs them
  // there). The same for every recompute count.
  double weight_gradient_time(const Chunk& chunk, int stage) const;
  // Recomputing `checkpointed_layers` of the chunk's layers on the stage (part of backward_time).
  double recompute_time(const Chunk& chunk, int stage, int checkpointed_layers) const;
  // All-to-all seconds of the chunk on the stage over its forward and backward, recompute
  // included (parts of forward_time and backward_time).
  double alltoall_time(const Chunk& chunk, int stage, int checkpointed_layers) const;
  // The stage's gradient synchronisation at the end of the step, of one rank, once its last
  // backward is done: over its gradient group (d_s x d_r ranks), ZeRO-0 all-reduces the stage's
  // gradients, ZeRO-1 and 2 reduce-scatter them and all-gather the updated weights; either way
  // each rank sends and receives 2 (n-1)/n of the gradients' bytes (a ring; NCCL's bus bandwidth
  // factors, nccl-tests doc/PERFORMANCE.md), at the training precision, plus two latencies, over
  // the group's link. 0 for a group of one, and for ZeRO-3, whose gathers and reduce-scatters
  // are priced per chunk instead (layer_gather_time). With `head_apart` (a spread head's plan)
  // the last stage leaves its head out: head_replica_sync_time syncs it with the replicas.
  double gradient_sync_time(int stage, bool head_apart = false) const;
  // ZeRO-3 (a gradient group of more than one): one layer's all-gather of its weights, (n-1)/n of
  // its bf16 parameters over the group's link plus a latency; 0 otherwise. Gathered before each
  // chunk's forward and again for its backward, whose gradients are reduce-scattered as many
  // bytes; with the next layer's gather prefetched while this one computes (FSDP's default), a
  // layer takes max(compute, gather) forward and max(compute, 2 gathers) backward. The
  // embedding and the head are units of their own, gathered the same way per chunk
  // (embedding_forward_time, head_forward_time and their backwards).
  double layer_gather_time(int stage) const { return gather_s_.at(stage); }
  // The embedding's forward and backward of the chunk on the first stage: a gather of bytes per
  // token (embedding_s_per_token, g times it backward), or with ZeRO-3 the gather of its
  // weights when that is longer (one forward, two backward: gather and reduce-scatter).
  double embedding_forward_time(const Chunk& chunk) const;
  double embedding_backward_time(const Chunk& chunk) const;
  // Sending the chunk's activation (or gradient) across the boundary between `boundary` and
  // `boundary + 1`: each SP rank sends its tokens to the same SP rank of the other stage, over
  // the inter-node link when the layout puts the two stages on different nodes.
  double p2p_time(const Chunk& chunk, int boundary) const;

  // --- spread head (docs/design.md, "Spread head"), of one rank ---
  // The head's forward (final norm, LM head, loss) of the chunk's tokens: the part of the last
  // stage's forward that an H action takes to its head stage. With size curves the LM head is a
  // GEMM by the chunk's rows per rank like the layers' (N = vocab and K = hidden are both at
  // least 4096 for every LLaMA shape from 7B up, the curves' shape class); with ZeRO-3 the
  // gather of its weights when that is longer.
  double head_forward_time(const Chunk& chunk) const;
  // Its backward: with size curves the input and weight gradients by the rows (the backward GEMM
  // curve), else g times the forward; with ZeRO-3 at least a gather and a reduce-scatter.
  double head_backward_time(const Chunk& chunk) const;
  // An H action on any stage: head_forward_time plus head_backward_time, what the last stage's
  // F and B with the head cost more than without it.
  double head_time(const Chunk& chunk) const;
  // A trainer with a head replica on every stage (docs/runtime.md, "Spread head"): once per
  // step, after the gradient groups' sync, the replicas' gradients are all-reduced over every
  // rank of the world (each sends and receives 2 (n-1)/n of the head's gradient bytes, a ring
  // as gradient_sync_time), over the inter-node link when the world spans nodes; 0 for one rank.
  double head_replica_sync_time() const;
  // A copy for such a trainer (PlannerOptions::spread_head: plan_step and the plan tool use it):
  // the simulator ends every step with head_replica_sync_time, whatever the plan's heads (the
  // trainer issues the all-reduce on every step), and the last stage's own sync leaves its head
  // out.
  CostModel with_head_replicas() const;
  bool head_replicas() const { return head_replicas_; }
  // Held while H runs: the chunk's logits_bytes per token and the loss's total weight, what the
  // last stage keeps from F to B when it runs the head in F.
  double head_logits_bytes(const Chunk& chunk) const;
  // The replica of the final norm and the LM head that a stage other than the last keeps when it
  // runs H actions: weights, gradients and optimizer state under the layout's ZeRO level.
  double head_replica_bytes() const;
  // SEND_H or SEND_HG between the last stage and `stage`: a pipeline send of the chunk's hidden
  // state (or its gradient) over the slowest link between the two stages (p2p_time's, across
  // nodes when any boundary between them crosses).
  double head_transfer_time(const Chunk& chunk, int stage) const;

  // --- the head shared evenly: a what-if for studies (docs/cluster_study.md, "Balanced stages")
  // A copy in which every stage runs 1/d of each chunk's head (final norm, LM head, loss) in its
  // F and B and keeps 1/d of the head's logits and of its parameters, with no communication:
  // vocabulary parallelism's best case, the most any balancing of the head could give. The
  // executor cannot run it; plans made with it are only for comparison. The spread head's
  // functions above keep their meaning (the head of one chunk on one stage).
  CostModel with_ideal_even_head() const;
  bool ideal_even_head() const { return ideal_even_head_; }

  // --- memory (bytes), of one rank ---
  // Weights, gradients and optimizer state of the stage's parameters under the layout's ZeRO
  // level (model_state_bytes_per_rank), plus with ZeRO-3 the parameters it gathers.
  double model_state_bytes(int stage) const;
  // Kept from the chunk's forward to its backward with `checkpointed_layers` recomputed: full
  // layers' saved tensors (slices of split sequences included: the chunk attention saves their
  // k and v besides the sequence's K/V buffer), checkpointed layers' inputs, the chunk's rotary
  // tables, token ids on the first stage and the loss's on the last. Linear in the checkpointed
  // layers. The derivation of every term is in CostCoefficients::analytic (cost_model.cc).
  double activation_bytes(const Chunk& chunk, int stage, int checkpointed_layers) const;
  // What checkpointing one more layer of this chunk saves: activation_bytes(c) -
  // activation_bytes(c+1).
  double checkpoint_saving_bytes(const Chunk& chunk, int stage) const;
  // Zero bubble: what a split B keeps for its W besides the saved tensors, the gradients that
  // reach the nodes feeding parameters: per token and layer the outputs of q, k, v, o, gate, up
  // and down and of the two norms' weight products (5h + 2 kv_dim + 2 ffn), on the last stage
  // with `with_head` also the final norm's and the logits' (h + vocab), in the model's dtype.
  double weight_gradient_bytes(const Chunk& chunk, int stage, bool with_head = true) const;
  // Zero bubble: what those nodes saved, the rest of what a chunk holds from the end of its
  // split B to its W (the executor frees every other saved tensor then): per token and layer
  // the inputs of the GEMMs (the two norm products, the attention output, the MLP's product)
  // and the two normalised inputs of the norms' weight products (5h + ffn), on the last stage
  // with `with_head` the final norm's two (2h).
  double weight_input_bytes(const Chunk& chunk, int stage, bool with_head = true) const;
  // Transient during the chunk's backward: one layer's activations (recomputed or being
  // differentiated) and their gradients.
  double backward_workspace_bytes(const Chunk& chunk, int stage) const;
  // Transient during the chunk's forward: the lean layer's GEMM inputs, which a layer keeps until
  // its forward ends (lean::Refill, models/lean_layer.h); zero for the eager layer, which keeps
  // them.
  double forward_workspace_bytes(const Chunk& chunk, int stage) const;
  // K/V buffer of a split sequence on the stage, preallocated to its full length. The dK/dV
  // buffer held during its backward is the same size.
  double kv_buffer_bytes(int64_t seq_length, int stage) const;
  // One rank's message of the chunk between stages (its activation, or that gradient: its
  // tokens / d_s rows): what a posted receive holds from its posting until its compute takes it.
  double message_bytes(const Chunk& chunk) const;

 private:
  struct Link {
    double bandwidth = 0;
    double latency_s = 0;
  };
  // compute_forward_time and recompute_time given the chunk's layer_forward_time (and
  // layer_alltoall_time): backward_time needs all three, and summing the slices three times was
  // a tenth of the planner's time (docs/planning.md, "Search speed").
  double compute_forward_time(const Chunk& chunk, int stage, double layer_forward,
                              bool with_head = true) const;
  double recompute_time(int checkpointed_layers, double layer_forward, double layer_alltoall) const;
  // What the chunk's size adds to one layer's time beyond the full-size a1 and a2 (0 without
  // curves): its GEMMs at its rows per rank, its slices' attention at their lengths.
  double size_penalty(const Chunk& chunk, const SizeCurve& gemm, const SizeCurve& a1) const;
  void set_links();                      // the links from the layout (cost_model_parallel.cc)
  double stage_params(int stage) const;  // parameters the stage holds (its layers, embedding, head)
  double head_params() const;            // the final norm and the LM head

  ModelShape shape_;
  std::vector<int> layers_per_stage_;
  CostCoefficients coefficients_;
  ParallelLayout layout_;
  std::vector<Link> alltoall_link_;  // per stage: its SP group's link
  std::vector<Link> p2p_link_;       // per boundary p -> p + 1 (the last entry unused)
  std::vector<Link> gradient_link_;  // per stage: its gradient group's link
  std::vector<double> gather_s_;     // per stage: layer_gather_time
  double embedding_gather_s_ = 0;    // ZeRO-3: the embedding's all-gather on the first stage
  double head_gather_s_ = 0;         // ZeRO-3: the head's, over the last stage's link
  Link world_link_;                  // the slowest link of an all-reduce over every rank
  bool ideal_even_head_ = false;     // with_ideal_even_head
  bool head_replicas_ = false;       // with_head_replicas
};

// {"model": {...}, "layers_per_stage": [...], "coefficients": {...}, "layout": {...}}; the
// layout is written only when it is not the default and read as the default when absent.
void to_json(nlohmann::json& j, const CostModel& model);
void from_json(const nlohmann::json& j, CostModel& model);
CostModel load_cost_model(const std::string& path);  // Error names the file on bad JSON
// A cost model file is profiled for its own layer split; the trainer (planning/cost_model.py) and
// the plan tool both plan with it only on that split: Error naming the file, both splits and what
// to do when `planned` (the split `whose`, e.g. "the trainer", would plan) is another.
void check_cost_file_split(const CostModel& file, const std::string& path,
                           const std::vector<int>& planned, const std::string& whose);
void save_cost_model(const CostModel& model, const std::string& path);

}  // namespace infinipipe
