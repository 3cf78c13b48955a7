#pragma once
// The shape of a LLaMA-style decoder: what the analytic cost model needs to count FLOPs, bytes
// and parameters.
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

namespace infinipipe {

struct ModelShape {
  std::string name;
  int layers = 0;
  int hidden = 0;
  int heads = 0;
  int kv_heads = 0;
  int ffn = 0;  // SwiGLU intermediate size
  int vocab = 0;
  int bytes_per_element = 2;  // activations and weights (bf16 on GPU, 4 or 8 on CPU tests)
  // InfiniPipe's lean layer (LlamaConfig::lean_layer): each RMSNorm keeps its input and rstd,
  // the SwiGLU its gate and up, and their backwards recompute the rest, so a layer keeps less
  // (CostCoefficients::analytic). False: the eager layer, as transformers' modules run it.
  bool lean_layer = false;

  int head_dim() const { return hidden / heads; }
  int64_t params_per_layer() const;  // attention + SwiGLU MLP + two RMSNorms
  int64_t embedding_params() const;  // vocab * hidden (the LM head has as many again)

  // Throws Error naming the field when a value is impossible (non-positive, heads not dividing
  // hidden, kv_heads not dividing heads).
  void validate() const;

  // "llama-7b", "llama-13b", "llama-30b" (the paper's models), "llama3-8b" (a 128K vocabulary)
  // and "tiny" (tests, CPU examples).
  static ModelShape builtin(const std::string& name);
  static std::vector<std::string> builtin_names();
};

void to_json(nlohmann::json& j, const ModelShape& shape);
void from_json(const nlohmann::json& j, ModelShape& shape);

// Layers of each pipeline stage: `layers` split into `stages` contiguous ranges as evenly as
// possible. Throws Error when there are fewer layers than stages.
std::vector<int> even_layer_split(int layers, int stages);

}  // namespace infinipipe
