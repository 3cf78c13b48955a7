#pragma once
// Time and memory of chunks on pipeline stages. The coefficients are built analytically from a
// model shape and a hardware description, or loaded from JSON (measured by the profiler), so
// that every consumer (sequence processor, checkpoint planner, simulator) sees one model.
//
// Per stage with l layers, a chunk whose slices have lengths s_i and contexts c_i costs
//   T_fwd = l * (sum_i [a1 * ((c_i + s_i)^2 - c_i^2) + a2 * s_i] + b) + extras(first/last stage)
//   T_bwd = g * T_fwd + ckpt_layers * (per-layer forward time)
// or, when the layer's backward was measured apart (the profiler fits it like the forward),
//   T_bwd = l * (sum_i [a1' * ((c_i + s_i)^2 - c_i^2) + a2' * s_i] + b') + g * extras
//           + ckpt_layers * (per-layer forward time)
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "infinipipe/core/chunk.h"
#include "infinipipe/cost/hardware.h"
#include "infinipipe/cost/model_shape.h"

namespace infinipipe {

struct CostCoefficients {
  // Time, per layer.
  double a1 = 0;              // s per unit of ((c+s)^2 - c^2): causal attention over the prefix
  double a2 = 0;              // s per token: the layer's GEMMs and element-wise work
  double b = 0;               // s per chunk: fixed overhead of running a layer on one chunk
  double backward_ratio = 2;  // g: backward time over forward time
  // The layer's backward on its own (a1', a2', b' above), when measured. All zero (the analytic
  // model) means g times the layer's forward. They exist because a measured backward does not
  // scale with the forward: an eager Python layer pays its interpreter overhead (b) in the
  // forward only, and attention's backward is relatively dearer than the GEMMs'.
  double backward_a1 = 0;
  double backward_a2 = 0;
  double backward_b = 0;
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
  // Point to point.
  double p2p_bytes_per_token = 0;  // one activation (or its gradient) per token
  double p2p_bandwidth = 0;        // bytes/s
  double p2p_latency_s = 0;

  // Analytic coefficients: FLOPs over achieved FLOP/s, bytes from the shape.
  static CostCoefficients analytic(const ModelShape& shape, const Hardware& hw);

  bool has_layer_backward() const { return backward_a1 > 0 || backward_a2 > 0 || backward_b > 0; }

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
  CostModel(ModelShape shape, std::vector<int> layers_per_stage, CostCoefficients coefficients);
  // Analytic coefficients, layers split evenly.
  static CostModel analytic(const ModelShape& shape, const Hardware& hw, int stages);

  const ModelShape& shape() const { return shape_; }
  const CostCoefficients& coefficients() const { return coefficients_; }
  const std::vector<int>& layers_per_stage() const { return layers_per_stage_; }
  int num_stages() const { return static_cast<int>(layers_per_stage_.size()); }
  int layers(int stage) const { return layers_per_stage_.at(stage); }

  // --- time (seconds) ---
  // One layer, one slice, without the per-chunk overhead: a1 * ((c+s)^2 - c^2) + a2 * s.
  double slice_layer_time(int64_t context, int64_t length) const;
  // One layer, one chunk: sum of its slices plus b.
  double layer_forward_time(const Chunk& chunk) const;
  double forward_time(const Chunk& chunk, int stage) const;
  // One layer's backward, without recompute.
  double layer_backward_time(const Chunk& chunk) const;
  // Backward of the chunk on the stage, recomputing `checkpointed_layers` of its layers.
  double backward_time(const Chunk& chunk, int stage, int checkpointed_layers) const;
  // Sending the chunk's activation (or gradient) to the neighbouring stage.
  double p2p_time(const Chunk& chunk) const;

  // --- memory (bytes) ---
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
  // Transient during the chunk's backward: one layer's activations (recomputed or being
  // differentiated) and their gradients.
  double backward_workspace_bytes(const Chunk& chunk, int stage) const;
  // K/V buffer of a split sequence on the stage, preallocated to its full length. The dK/dV
  // buffer held during its backward is the same size.
  double kv_buffer_bytes(int64_t seq_length, int stage) const;

 private:
  ModelShape shape_;
  std::vector<int> layers_per_stage_;
  CostCoefficients coefficients_;
};

// {"model": {...}, "layers_per_stage": [...], "coefficients": {...}}
void to_json(nlohmann::json& j, const CostModel& model);
void from_json(const nlohmann::json& j, CostModel& model);
CostModel load_cost_model(const std::string& path);  // Error names the file on bad JSON
void save_cost_model(const CostModel& model, const std::string& path);

}  // namespace infinipipe
