#include "infinipipe/models/llama.h"

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <c10/core/GradMode.h>

#include <memory>
#include <set>
#include <sstream>

#include "infinipipe/core/error.h"
#include "infinipipe/runtime/chunk_context.h"
#include "lean_layer.h"

namespace infinipipe::models {

namespace {

// Norms and rotary tables run in at least float32, as the Python model and transformers do.
at::ScalarType compute_dtype(at::ScalarType dtype) { return at::promote_types(dtype, at::kFloat); }

at::Tensor rotate_half(const at::Tensor& x) {
  const int64_t half = x.size(-1) / 2;
  return at::cat({at::neg(x.slice(-1, half)), x.slice(-1, 0, half)}, -1);
}

// x [T, heads, d]; cos, sin [T, d].
at::Tensor apply_rotary(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin) {
  return x * cos.unsqueeze(1) + rotate_half(x) * sin.unsqueeze(1);
}

// Written exactly as the Python rotary_inv_freq (1.0 / (theta ** (arange(0, d, 2) / d))), so
// that both faces produce bit-identical tables.
at::Tensor rotary_inv_freq(int64_t head_dim, double theta, at::ScalarType cdt, at::Device device) {
  at::Tensor exponents =
      at::arange(0, head_dim, 2, at::TensorOptions().dtype(at::kLong).device(device)).to(cdt);
  exponents = at::div(exponents, at::Scalar(head_dim));
  return at::reciprocal(at::pow(at::Scalar(theta), exponents)) * 1.0;
}

std::string layer_prefix(int global_index) {
  return "layers." + std::to_string(global_index) + ".";
}

}  // namespace

// --- config ---------------------------------------------------------------------------------

void LlamaConfig::validate() const {
  const std::pair<const char*, int64_t> sizes[] = {{"vocab", vocab},       {"hidden", hidden},
                                                   {"layers", layers},     {"heads", heads},
                                                   {"kv_heads", kv_heads}, {"ffn", ffn}};
  for (const auto& [name, value] : sizes)
    check(value > 0,
          std::string("LlamaConfig.") + name + " must be positive, got " + std::to_string(value));
  check(hidden % heads == 0, "LlamaConfig: heads (" + std::to_string(heads) +
                                 ") must divide hidden (" + std::to_string(hidden) + ")");
  check(heads % kv_heads == 0, "LlamaConfig: kv_heads (" + std::to_string(kv_heads) +
                                   ") must divide heads (" + std::to_string(heads) + ")");
  check(head_dim() % 2 == 0, "LlamaConfig: head_dim (" + std::to_string(head_dim()) +
                                 ") must be even for rotary positions");
  check(at::isFloatingType(dtype),
        std::string("LlamaConfig.dtype must be floating point, got ") + c10::toString(dtype));
  check(rope_theta > 0 && rms_eps > 0, "LlamaConfig: rope_theta and rms_eps must be positive");
}

ModelShape LlamaConfig::shape(const std::string& name) const {
  ModelShape s;
  s.name = name;
  s.layers = static_cast<int>(layers);
  s.hidden = static_cast<int>(hidden);
  s.heads = static_cast<int>(heads);
  s.kv_heads = static_cast<int>(kv_heads);
  s.ffn = static_cast<int>(ffn);
  s.vocab = static_cast<int>(vocab);
  s.bytes_per_element = static_cast<int>(c10::elementSize(dtype));
  s.lean_layer = lean_layer;
  return s;
}

LlamaConfig LlamaConfig::from_shape(const ModelShape& shape, at::ScalarType dtype) {
  LlamaConfig c;
  c.vocab = shape.vocab;
  c.hidden = shape.hidden;
  c.layers = shape.layers;
  c.heads = shape.heads;
  c.kv_heads = shape.kv_heads;
  c.ffn = shape.ffn;
  c.dtype = dtype;
  c.lean_layer = shape.lean_layer;
  c.validate();
  return c;
}

// --- initialisation -------------------------------------------------------------------------

uint32_t crc32(const std::string& text) {
  uint32_t crc = 0xFFFFFFFFu;
  for (unsigned char byte : text) {
    crc ^= byte;
    for (int bit = 0; bit < 8; ++bit) crc = (crc >> 1) ^ (0xEDB88320u & (0u - (crc & 1u)));
  }
  return ~crc;
}

uint64_t parameter_seed(uint64_t seed, const std::string& name) {
  // Python: (seed * 1_000_003 + zlib.crc32(name)) % (2**63 - 1), in exact integers.
  const unsigned __int128 value = static_cast<unsigned __int128>(seed) * 1000003u + crc32(name);
  return static_cast<uint64_t>(value % ((static_cast<unsigned __int128>(1) << 63) - 1));
}

// --- the stage ------------------------------------------------------------------------------

struct LlamaStage::Rotary {
  at::ScalarType dtype;
  at::Tensor cos, sin;  // [T, head_dim]
};

LlamaStage::LlamaStage(LlamaConfig config, int first_layer, int last_layer, bool has_embedding,
                       bool has_head, std::optional<uint64_t> seed, at::Device device)
    : config_(config), first_layer_(first_layer), last_layer_(last_layer), device_(device) {
  config_.validate();
  check(0 <= first_layer && first_layer < last_layer && last_layer <= config_.layers,
        "LlamaStage: layer range [" + std::to_string(first_layer) + ", " +
            std::to_string(last_layer) + ") must be non-empty and within [0, " +
            std::to_string(config_.layers) + ") (last_layer is exclusive)");
  const auto options = at::TensorOptions().dtype(config_.dtype).device(device);
  const int64_t h = config_.hidden, d = config_.head_dim();
  auto matrix = [&](int64_t rows, int64_t cols) { return at::zeros({rows, cols}, options); };
  auto gain = [&] { return at::ones({h}, options); };
  if (has_embedding) embed_tokens_ = matrix(config_.vocab, h);
  for (int i = first_layer; i < last_layer; ++i) {
    Layer l;
    l.q_proj = matrix(config_.heads * d, h);
    l.k_proj = matrix(config_.kv_heads * d, h);
    l.v_proj = matrix(config_.kv_heads * d, h);
    l.o_proj = matrix(h, config_.heads * d);
    l.gate_proj = matrix(config_.ffn, h);
    l.up_proj = matrix(config_.ffn, h);
    l.down_proj = matrix(h, config_.ffn);
    l.input_layernorm = gain();
    l.post_attention_layernorm = gain();
    layers_.push_back(std::move(l));
  }
  if (has_head) {
    norm_ = gain();
    lm_head_ = matrix(config_.vocab, h);
  }
  if (seed) {
    // The Python init_weights: normal(0, 0.02) in float32 from a generator per parameter name.
    for (auto& [name, p] : named_parameters()) {
      const bool is_norm =
          name == "norm.weight" ||
          (name.size() >= 16 && name.compare(name.size() - 16, 16, "layernorm.weight") == 0);
      if (is_norm) continue;  // already ones
      at::Generator generator = at::detail::createCPUGenerator(parameter_seed(*seed, name));
      p.copy_(at::randn(p.sizes(), generator, at::TensorOptions().dtype(at::kFloat)) * 0.02);
    }
  }
  for (auto& p : parameters()) p.set_requires_grad(true);
  inv_freq_ = rotary_inv_freq(d, config_.rope_theta, compute_dtype(config_.dtype), device);
}

std::string LlamaStage::describe() const {
  return "LlamaStage(layers [" + std::to_string(first_layer_) + ", " + std::to_string(last_layer_) +
         ")" + (has_embedding() ? ", embedding" : "") + (has_head() ? ", head" : "") + ")";
}

std::vector<std::pair<std::string, at::Tensor>> LlamaStage::named_parameters() const {
  std::vector<std::pair<std::string, at::Tensor>> out;
  if (embed_tokens_.defined()) out.emplace_back("embed_tokens.weight", embed_tokens_);
  for (size_t i = 0; i < layers_.size(); ++i) {
    const Layer& l = layers_[i];
    const std::string p = layer_prefix(first_layer_ + static_cast<int>(i));
    out.emplace_back(p + "self_attn.q_proj.weight", l.q_proj);
    out.emplace_back(p + "self_attn.k_proj.weight", l.k_proj);
    out.emplace_back(p + "self_attn.v_proj.weight", l.v_proj);
    out.emplace_back(p + "self_attn.o_proj.weight", l.o_proj);
    out.emplace_back(p + "mlp.gate_proj.weight", l.gate_proj);
    out.emplace_back(p + "mlp.up_proj.weight", l.up_proj);
    out.emplace_back(p + "mlp.down_proj.weight", l.down_proj);
    out.emplace_back(p + "input_layernorm.weight", l.input_layernorm);
    out.emplace_back(p + "post_attention_layernorm.weight", l.post_attention_layernorm);
  }
  if (norm_.defined()) {
    out.emplace_back("norm.weight", norm_);
    out.emplace_back("lm_head.weight", lm_head_);
  }
  return out;
}

std::vector<at::Tensor> LlamaStage::parameters() {
  std::vector<at::Tensor> out;
  for (auto& [name, p] : named_parameters()) out.push_back(p);
  return out;
}

std::map<std::string, at::Tensor> LlamaStage::state_dict() const {
  std::map<std::string, at::Tensor> out;
  for (const auto& [name, p] : named_parameters()) out.emplace(name, p.detach());
  return out;
}

void LlamaStage::load_state_dict(const std::map<std::string, at::Tensor>& weights, bool strict) {
  std::map<std::string, at::Tensor> mine;
  for (auto& [name, p] : named_parameters()) mine.emplace(name, p);
  // Check everything before copying anything, so a failed load leaves the stage as it was.
  std::vector<std::string> missing, unexpected;
  for (const auto& [name, p] : mine)
    if (!weights.count(name)) missing.push_back(name);
  for (const auto& [name, value] : weights) {
    auto it = mine.find(name);
    if (it == mine.end()) {
      unexpected.push_back(name);
      continue;
    }
    check(value.defined() && value.sizes() == it->second.sizes(),
          describe() + ": weight '" + name + "' has shape " +
              (value.defined() ? c10::str(value.sizes()) : std::string("(undefined)")) +
              ", the parameter has " + c10::str(it->second.sizes()));
  }
  auto listing = [](const std::vector<std::string>& names) {
    std::string s;
    for (size_t i = 0; i < names.size() && i < 5; ++i) s += (i ? ", " : "") + names[i];
    return names.size() > 5 ? s + ", ... (" + std::to_string(names.size()) + " in all)" : s;
  };
  if (strict) {
    check(missing.empty(), describe() + ": the weights lack " + listing(missing) +
                               " (load with strict=false to keep those parameters)");
    check(unexpected.empty(), describe() + ": unexpected weights " + listing(unexpected) +
                                  " (not parameters of this stage; strict=false ignores them)");
  }
  at::NoGradGuard no_grad;
  for (const auto& [name, value] : weights) {
    auto it = mine.find(name);
    if (it != mine.end()) it->second.copy_(value);
  }
}

// --- forward pieces -------------------------------------------------------------------------

at::Tensor LlamaStage::rms_norm(const at::Tensor& x, const at::Tensor& weight) const {
  if (config_.lean_layer) return lean::rms_norm(x, weight, lean::rms_rstd(x, config_.rms_eps));
  const at::Tensor h = x.to(compute_dtype(x.scalar_type()));
  const at::Tensor variance = h.pow(2).mean({-1}, /*keepdim=*/true);
  return weight * (h * at::rsqrt(variance + config_.rms_eps)).to(x.scalar_type());
}

const LlamaStage::Rotary& LlamaStage::rotary(runtime::ChunkContext& ctx,
                                             at::ScalarType dtype) const {
  auto* cached = static_cast<Rotary*>(ctx.module_state.get());
  if (cached && cached->dtype == dtype) return *cached;
  // Elementwise per row, so the table of positions start.. is exactly those rows of a full one.
  const at::ScalarType cdt = compute_dtype(dtype);
  const at::Tensor inv_freq =
      inv_freq_.scalar_type() == cdt
          ? inv_freq_
          : rotary_inv_freq(config_.head_dim(), config_.rope_theta, cdt, device_);
  const at::Tensor positions = ctx.positions().to(inv_freq.device());
  const at::Tensor freqs = positions.unsqueeze(1).to(cdt) * inv_freq.unsqueeze(0);
  const at::Tensor emb = at::cat({freqs, freqs}, -1);
  auto made = std::make_shared<Rotary>(Rotary{dtype, emb.cos().to(dtype), emb.sin().to(dtype)});
  ctx.module_state = made;
  return *made;
}

at::Tensor LlamaStage::embed(const at::Tensor& tokens, runtime::ChunkContext& ctx) {
  if (!embed_tokens_.defined()) throw Error(describe() + ": this stage has no embedding");
  if (tokens.dim() != 1 || (tokens.scalar_type() != at::kLong && tokens.scalar_type() != at::kInt))
    throw Error(describe() + ": embed expects a 1-D integer token tensor, got " +
                std::string(c10::toString(tokens.scalar_type())) + " " + c10::str(tokens.sizes()));
  if (tokens.size(0) != ctx.num_tokens())
    throw Error(describe() + ": embed got " + std::to_string(tokens.size(0)) +
                " tokens for a chunk of " + std::to_string(ctx.num_tokens()));
  if (tokens.numel() > 0) {
    const int64_t lo = tokens.min().item<int64_t>(), hi = tokens.max().item<int64_t>();
    if (lo < 0 || hi >= config_.vocab)
      throw Error("token id " + std::to_string(lo < 0 ? lo : hi) +
                  " is outside the vocabulary [0, " + std::to_string(config_.vocab) + ")");
  }
  return at::embedding(embed_tokens_, tokens.to(device_));
}

at::Tensor LlamaStage::layer(int local_index, const at::Tensor& hidden,
                             runtime::ChunkContext& ctx) {
  if (local_index < 0 || local_index >= num_layers())
    throw Error(describe() + ": local layer " + std::to_string(local_index) +
                " does not exist (the stage has " + std::to_string(num_layers()) + ")");
  const int64_t t = ctx.num_tokens();
  if (hidden.dim() != 2 || hidden.size(0) != t || hidden.size(1) != config_.hidden)
    throw Error(describe() + ": layer " + std::to_string(first_layer_ + local_index) +
                " got hidden " + c10::str(hidden.sizes()) + ", expected [" + std::to_string(t) +
                ", " + std::to_string(config_.hidden) + "]");
  const Layer& l = layers_[local_index];
  const Rotary& rot = rotary(ctx, hidden.scalar_type());
  const int64_t d = config_.head_dim();

  // The lean layer drops its GEMM inputs until the backward (lean::Refill); nothing to drop when no
  // graph is recorded (evaluation, a checkpointed layer's first forward).
  const std::shared_ptr<lean::Refill> refill =
      config_.lean_layer && at::GradMode::is_enabled() ? std::make_shared<lean::Refill>() : nullptr;
  auto norm = [&](const at::Tensor& input, const at::Tensor& weight) {
    if (!refill) return rms_norm(input, weight);
    const at::Tensor rstd = lean::rms_rstd(input, config_.rms_eps);
    const at::Tensor out = lean::rms_norm(input, weight, rstd);
    refill->keep(out, [x = input.detach(), weight, rstd](at::Tensor& into) {
      lean::rms_norm_into(into, x, weight, rstd);
    });
    return out;
  };

  const at::Tensor x = norm(hidden, l.input_layernorm);
  const at::Tensor q =
      apply_rotary(at::linear(x, l.q_proj).view({t, config_.heads, d}), rot.cos, rot.sin);
  const at::Tensor k =
      apply_rotary(at::linear(x, l.k_proj).view({t, config_.kv_heads, d}), rot.cos, rot.sin);
  const at::Tensor v = at::linear(x, l.v_proj).view({t, config_.kv_heads, d});
  const at::Tensor attended = ctx.attention(local_index, q, k, v);
  const at::Tensor after_attention =
      hidden + at::linear(attended.reshape({t, config_.heads * d}), l.o_proj);

  const at::Tensor y = norm(after_attention, l.post_attention_layernorm);
  const at::Tensor gate = at::linear(y, l.gate_proj), up = at::linear(y, l.up_proj);
  const at::Tensor product = config_.lean_layer ? lean::swiglu(gate, up) : at::silu(gate) * up;
  if (refill)
    refill->keep(product, [gate = gate.detach(), up = up.detach()](at::Tensor& into) {
      at::mul_out(into, at::silu(gate), up);
    });
  const at::Tensor mlp = at::linear(product, l.down_proj);
  const at::Tensor out = after_attention + mlp;
  if (refill && out.requires_grad()) lean::Refill::attach(refill, out);
  return out;
}

at::Tensor LlamaStage::head(const at::Tensor& hidden, runtime::ChunkContext& /*ctx*/) {
  if (!lm_head_.defined()) throw Error(describe() + ": this stage has no LM head");
  return at::linear(rms_norm(hidden, norm_), lm_head_);
}

std::shared_ptr<LlamaStage> build_stage(const LlamaConfig& config,
                                        const std::vector<int>& layers_per_stage, int stage,
                                        std::optional<uint64_t> seed, at::Device device) {
  const int stages = static_cast<int>(layers_per_stage.size());
  check(stage >= 0 && stage < stages, "build_stage: stage " + std::to_string(stage) +
                                          " is out of range for " + std::to_string(stages) +
                                          " stages");
  int first = 0, total = 0;
  for (int s = 0; s < stages; ++s) {
    check(layers_per_stage[s] > 0, "build_stage: every stage needs at least one layer");
    if (s < stage) first += layers_per_stage[s];
    total += layers_per_stage[s];
  }
  check(total == config.layers, "build_stage: the layer split adds up to " + std::to_string(total) +
                                    " layers, the model has " + std::to_string(config.layers));
  return std::make_shared<LlamaStage>(config, first, first + layers_per_stage[stage], stage == 0,
                                      stage == stages - 1, seed, device);
}

}  // namespace infinipipe::models
