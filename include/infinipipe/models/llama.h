#pragma once
// The LLaMA-style decoder as a C++ LibTorch stage module: the same model as the Python
// `infinipipe.models.llama.LlamaStage`, op for op (RMSNorm and rotary tables computed in at
// least float32, grouped-query attention, SwiGLU MLP, untied LM head, no biases), so that a C++
// trainer runs without Python and the two faces exchange weights by name.
//
// Parameter names are the Python model's (transformers' without "model."), with global layer
// indices on every stage: "embed_tokens.weight", "layers.3.self_attn.q_proj.weight",
// "layers.3.mlp.gate_proj.weight", "layers.3.input_layernorm.weight", "norm.weight",
// "lm_head.weight". Attention goes through ChunkContext::attention (the chunk attention with the
// stage's K/V buffers), rotary positions come from ChunkContext::positions(), so a slice that
// starts at position p of its sequence is rotated for positions p, p + 1, ...
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>
#include <c10/core/ScalarType.h>

#include "infinipipe/cost/model_shape.h"
#include "infinipipe/runtime/stage_module.h"

namespace infinipipe::models {

struct LlamaConfig {
  int64_t vocab = 0;
  int64_t hidden = 0;
  int64_t layers = 0;
  int64_t heads = 0;
  int64_t kv_heads = 0;
  int64_t ffn = 0;  // SwiGLU intermediate size
  double rope_theta = 10000.0;
  double rms_eps = 1e-6;
  at::ScalarType dtype = at::kFloat;  // parameters and activations
  // The lean layer: each RMSNorm keeps its input and rstd, the SwiGLU its gate and up outputs,
  // and their backwards recompute the rest (a few element-wise passes); the GEMMs' inputs (the
  // norms' outputs, the SwiGLU product) are freed after the forward and refilled when the
  // backward reaches the layer. A layer keeps half the eager layer's bytes at LLaMA-13B in bf16
  // (ModelShape::lean_layer, CostCoefficients::analytic). The same values and, up to rounding
  // order in the norm's backward, the same gradients as the eager layer, which keeps what
  // transformers' modules keep.
  bool lean_layer = false;

  int64_t head_dim() const { return hidden / heads; }
  // Error naming the field: non-positive sizes, heads not dividing hidden, kv_heads not dividing
  // heads, an odd head_dim (rotary needs pairs), a dtype that is not floating point.
  void validate() const;

  // The planner's model shape with this dtype's element size (for the cost model), and back.
  ModelShape shape(const std::string& name = "llama") const;
  static LlamaConfig from_shape(const ModelShape& shape, at::ScalarType dtype);
};

class LlamaStage : public runtime::StageModule {
 public:
  // Layers [first_layer, last_layer) (last exclusive), with the embedding and/or the final norm
  // and LM head. seed: the Python model's deterministic initialisation (init_weights: normal(0,
  // 0.02) drawn in float32 from a generator seeded by (seed, parameter name), ones for norms), so
  // a C++ stage holds exactly the weights of the Python stage built with the same seed; nullopt
  // leaves matrices zero (load weights with load_state_dict).
  LlamaStage(LlamaConfig config, int first_layer, int last_layer, bool has_embedding, bool has_head,
             std::optional<uint64_t> seed = 0, at::Device device = at::kCPU);

  // --- StageModule ---
  int num_layers() const override { return last_layer_ - first_layer_; }
  bool has_embedding() const override { return embed_tokens_.defined(); }
  bool has_head() const override { return lm_head_.defined(); }
  at::Tensor embed(const at::Tensor& tokens, runtime::ChunkContext& ctx) override;
  at::Tensor layer(int local_index, const at::Tensor& hidden, runtime::ChunkContext& ctx) override;
  at::Tensor head(const at::Tensor& hidden, runtime::ChunkContext& ctx) override;
  std::vector<at::Tensor> parameters() override;

  // --- weights ---
  // In the Python model's named_parameters() order.
  std::vector<std::pair<std::string, at::Tensor>> named_parameters() const;
  // Copies every named tensor into the parameter of that name (converting dtype and device).
  // Error on a shape mismatch, on a name this stage does not hold (unless !strict), and on a
  // parameter of this stage that the map lacks (unless !strict). Entries of other stages are
  // ignored when !strict, so a full model's state dict loads into any stage that way.
  void load_state_dict(const std::map<std::string, at::Tensor>& weights, bool strict = true);
  std::map<std::string, at::Tensor> state_dict() const;  // detached, sharing storage

  const LlamaConfig& config() const { return config_; }
  int first_layer() const { return first_layer_; }
  int last_layer() const { return last_layer_; }
  at::Device device() const { return device_; }

 private:
  struct Layer {
    at::Tensor q_proj, k_proj, v_proj, o_proj;
    at::Tensor gate_proj, up_proj, down_proj;
    at::Tensor input_layernorm, post_attention_layernorm;
  };
  struct Rotary;  // a chunk's cos/sin tables, cached in ChunkContext::module_state

  at::Tensor rms_norm(const at::Tensor& x, const at::Tensor& weight) const;
  const Rotary& rotary(runtime::ChunkContext& ctx, at::ScalarType dtype) const;
  std::string describe() const;

  LlamaConfig config_;
  int first_layer_;
  int last_layer_;
  at::Device device_;
  at::Tensor embed_tokens_;  // undefined unless the first stage
  std::vector<Layer> layers_;
  at::Tensor norm_, lm_head_;  // undefined unless the last stage
  at::Tensor inv_freq_;        // rotary inverse frequencies in the compute dtype
};

// Stage `stage` of a split into layers_per_stage (first stage embeds, last has the head).
std::shared_ptr<LlamaStage> build_stage(const LlamaConfig& config,
                                        const std::vector<int>& layers_per_stage, int stage,
                                        std::optional<uint64_t> seed = 0,
                                        at::Device device = at::kCPU);

// zlib's CRC-32 of `text` (the Python initialisation keys its generators with zlib.crc32).
uint32_t crc32(const std::string& text);
// The generator seed of a parameter in the Python model's init_weights.
uint64_t parameter_seed(uint64_t seed, const std::string& name);

}  // namespace infinipipe::models
