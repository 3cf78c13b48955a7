#include "infinipipe/cost/model_shape.h"

#include <nlohmann/json.hpp>

#include "infinipipe/core/error.h"
#include "json_fields.h"

namespace infinipipe {

int64_t ModelShape::params_per_layer() const {
  const int64_t h = hidden, kv_dim = int64_t{kv_heads} * head_dim(), f = ffn;
  const int64_t attention = 2 * h * h + 2 * h * kv_dim;  // q and o, k and v (GQA), no biases
  const int64_t mlp = 3 * h * f;                         // SwiGLU gate, up, down
  const int64_t norms = 2 * h;                           // two RMSNorm gains
  return attention + mlp + norms;
}

int64_t ModelShape::embedding_params() const { return int64_t{vocab} * hidden; }

void ModelShape::validate() const {
  const std::string where = "model shape '" + name + "': ";
  auto positive = [&](int value, const char* field) {
    check(value > 0, where + field + " must be positive, got " + std::to_string(value));
  };
  positive(layers, "layers");
  positive(hidden, "hidden");
  positive(heads, "heads");
  positive(kv_heads, "kv_heads");
  positive(ffn, "ffn");
  positive(vocab, "vocab");
  check(hidden % heads == 0, where + "heads (" + std::to_string(heads) + ") must divide hidden (" +
                                 std::to_string(hidden) + ")");
  check(heads % kv_heads == 0, where + "kv_heads (" + std::to_string(kv_heads) +
                                   ") must divide heads (" + std::to_string(heads) + ")");
  check(bytes_per_element == 2 || bytes_per_element == 4 || bytes_per_element == 8,
        where + "bytes_per_element must be 2 (bf16/fp16), 4 (fp32) or 8 (fp64), got " +
            std::to_string(bytes_per_element));
}

ModelShape ModelShape::builtin(const std::string& name) {
  // LLaMA shapes: Touvron et al. 2023, "LLaMA: Open and Efficient Foundation Language Models",
  // Table 2 (dimension, heads, layers); ffn is the released configs' intermediate_size
  // (2/3 * 4 * hidden rounded up to a multiple of 256); vocabulary 32000 (SentencePiece, Sec. 2.1).
  // No GQA in LLaMA-1, so kv_heads == heads. 30B is the paper's 32.5B model ("33B").
  if (name == "llama-7b") return {name, 32, 4096, 32, 32, 11008, 32000, 2};
  if (name == "llama-13b") return {name, 40, 5120, 40, 40, 13824, 32000, 2};
  if (name == "llama-30b") return {name, 60, 6656, 52, 52, 17920, 32000, 2};
  // LLaMA-3-8B: Dubey et al. 2024, "The Llama 3 Herd of Models", Table 3 (32 layers, dimension
  // 4096, FFN 14336, 32 heads, 8 KV heads); vocabulary 128256, the released config's vocab_size
  // (the paper's 128K tokens plus 256 reserved special tokens). Its LM head is about two decoder
  // layers of GEMM work, which makes the last pipeline stage's imbalance large.
  if (name == "llama3-8b") return {name, 32, 4096, 32, 8, 14336, 128256, 2};
  // Small enough to train on the CPU in tests and examples; kv_heads < heads so GQA is exercised,
  // fp32 because CPU kernels have no fast bf16 path.
  if (name == "tiny") return {name, 8, 128, 4, 2, 352, 512, 4};
  std::string known;
  for (const std::string& n : builtin_names()) known += (known.empty() ? "" : ", ") + n;
  throw Error("unknown model '" + name + "'; built-in models are: " + known +
              " (or give a model shape in a JSON file)");
}

std::vector<std::string> ModelShape::builtin_names() {
  return {"llama-7b", "llama-13b", "llama-30b", "llama3-8b", "tiny"};
}

void to_json(nlohmann::json& j, const ModelShape& s) {
  j = nlohmann::json{{"name", s.name},         {"layers", s.layers},
                     {"hidden", s.hidden},     {"heads", s.heads},
                     {"kv_heads", s.kv_heads}, {"ffn", s.ffn},
                     {"vocab", s.vocab},       {"bytes_per_element", s.bytes_per_element}};
  // Only when set, so an eager model's JSON is what it always was.
  if (s.lean_layer) j["lean_layer"] = true;
}

void from_json(const nlohmann::json& j, ModelShape& s) {
  detail::JsonFields f(j, "model shape");
  f.get("name", s.name);
  f.get("layers", s.layers);
  f.get("hidden", s.hidden);
  f.get("heads", s.heads);
  f.get("kv_heads", s.kv_heads);
  f.get("ffn", s.ffn);
  f.get("vocab", s.vocab);
  f.get("bytes_per_element", s.bytes_per_element);
  f.get_optional("lean_layer", s.lean_layer);
  f.finish();
  s.validate();
}

std::vector<int> even_layer_split(int layers, int stages) {
  check(stages >= 1, "pipeline stages must be at least 1, got " + std::to_string(stages));
  check(layers >= stages, "cannot split " + std::to_string(layers) + " layers over " +
                              std::to_string(stages) +
                              " pipeline stages: every stage needs a layer; use fewer stages");
  std::vector<int> split(stages, layers / stages);
  // The remainder goes to the middle stages: the first stage holds the most chunks in flight
  // under 1F1B, and the last one also runs the LM head.
  const int extra = layers % stages;
  const int first = (stages - extra + 1) / 2;
  for (int i = 0; i < extra; ++i) ++split[first + i];
  return split;
}

}  // namespace infinipipe
