#include "instance.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <utility>

#include "infinipipe/cost/hardware.h"
#include "infinipipe/cost/model_shape.h"
#include "infinipipe/data/length_sampler.h"

namespace infinipipe::properties {

namespace {

constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;

template <typename T>
const T& pick(Rng& rng, const std::vector<T>& options) {
  return options[static_cast<size_t>(rng.uniform(0, static_cast<int64_t>(options.size()) - 1))];
}

// Mostly even splits (what the plan tool does by default), sometimes an uneven one: stages with
// more layers hold more memory and take longer, which the planner must see.
std::vector<int> draw_layers(Rng& rng, int layers, int stages) {
  if (!rng.chance(0.3)) return even_layer_split(layers, stages);
  std::vector<int> split(stages, 1);
  for (int extra = layers - stages; extra > 0; --extra) ++split[rng.uniform(0, stages - 1)];
  return split;
}

// The built-in samplers at a random context, or short uniform lengths (many small sequences,
// the packing's case). Batches stay small so that a million plans take minutes, not hours.
std::vector<int64_t> draw_lengths(Rng& rng, std::string& source) {
  const int batch = static_cast<int>(rng.uniform(1, 12));
  if (rng.chance(0.2)) {
    const int64_t longest = rng.uniform(1, 2048);
    std::vector<int64_t> lengths(batch);
    for (int64_t& n : lengths) n = rng.uniform(1, longest);
    source = "small uniform, batch " + std::to_string(batch);
    return lengths;
  }
  const std::string distribution = pick(rng, distribution_names());
  const auto context = static_cast<int64_t>(rng.log_uniform(256, 32768));
  source =
      distribution + ", batch " + std::to_string(batch) + ", context " + std::to_string(context);
  return sample_lengths(distribution, batch, context, rng.next());
}

// From tight to loose around what the step needs: the model state plus a fraction (1/50 to 3x)
// of the activations of the whole step as one chunk, sometimes less than the model state itself.
// So a fair share of plans is feasible, some only with recompute or waves, some not at all.
double draw_budget_gib(Rng& rng, const CostModel& cost, const std::vector<int64_t>& lengths) {
  Chunk whole;
  for (int i = 0; i < static_cast<int>(lengths.size()); ++i)
    whole.slices.push_back({i, 0, lengths[i], lengths[i]});
  double state = 0, activations = 0;
  for (int p = 0; p < cost.num_stages(); ++p) {
    state = std::max(state, cost.model_state_bytes(p));
    activations = std::max(activations, cost.activation_bytes(whole, p, 0));
  }
  const double bytes = rng.chance(0.08) ? state * (0.6 + 0.4 * rng.unit())
                                        : state + rng.log_uniform(0.02, 3.0) * activations;
  return bytes / kGiB;
}

Setting draw_setting(Rng& rng, Method method, int64_t longest) {
  Setting s;
  s.k = static_cast<int>(rng.uniform(1, 32));
  s.uniform_recompute = rng.chance(0.7) ? -1 : static_cast<int>(rng.uniform(0, 40));
  // Caps below the longest sequence are legal input: the chunking reports them infeasible.
  const int64_t cap = longest * rng.uniform(1, 4) / (rng.chance(0.1) ? 2 : 1);
  switch (method) {
    case Method::kBatch:
    case Method::kSeq1F1B:
      s.token_cap = std::max<int64_t>(1, cap);
      break;
    case Method::kChunkFlow:
      s.chunk_tokens = static_cast<int64_t>(rng.log_uniform(64, 65536));
      break;
    case Method::kEpp:
      s.epp_k = std::exchange(s.k, Setting{}.k);  // EPP's own K; Seq1F1B chunks draw theirs below
      s.epp_token_cap = pick(rng, std::vector<int64_t>{0, 0, 512, 1024, 2048, 4096, 16384});
      s.strict_packing = rng.chance(0.3);
      s.drain_chunks = pick(rng, std::vector<int>{0, 0, 2, 4, 8});
      s.drain_split = pick(rng, std::vector<int>{1, 2, 4});
      s.chunker = pick(rng, all_methods());
      if (s.chunker == Method::kBatch || s.chunker == Method::kSeq1F1B)
        s.token_cap = std::max<int64_t>(1, cap);
      if (s.chunker == Method::kSeq1F1B) s.k = s.epp_k;
      if (s.chunker == Method::kChunkFlow)
        s.chunk_tokens = static_cast<int64_t>(rng.log_uniform(64, 65536));
      s.uniform_recompute = -1;
      break;
  }
  return s;
}

std::string gib_text(double gib) {
  char text[40];
  std::snprintf(text, sizeof text, "%.17g", gib);
  return text;
}

}  // namespace

uint64_t Rng::next() {
  uint64_t z = (state_ += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

int64_t Rng::uniform(int64_t lo, int64_t hi) {
  return lo + static_cast<int64_t>(next() % static_cast<uint64_t>(hi - lo + 1));
}

double Rng::unit() { return static_cast<double>(next() >> 11) * 0x1.0p-53; }

double Rng::log_uniform(double lo, double hi) {
  return std::exp(std::log(lo) + unit() * (std::log(hi) - std::log(lo)));
}

const char* to_string(Mode mode) {
  switch (mode) {
    case Mode::kEppSearch:
      return "epp search";
    case Mode::kEppAtSetting:
      return "epp at setting";
    case Mode::kBaseline:
      return "baseline at setting";
  }
  return "?";
}

CostModel Instance::cost() const {
  const ModelShape shape = ModelShape::builtin(model);
  return CostModel(shape, layers_per_stage,
                   CostCoefficients::analytic(shape, Hardware::builtin(hardware)));
}

Instance draw_instance(uint64_t seed, int64_t index) {
  Instance in;
  in.seed = seed;
  in.index = index;
  Rng rng(seed ^ (0xd1b54a32d192ed03ull * static_cast<uint64_t>(index + 1)));
  in.model = pick(rng, std::vector<std::string>{"tiny", "tiny", "llama-7b", "llama-13b"});
  in.hardware = pick(rng, Hardware::builtin_names());
  const int layers = ModelShape::builtin(in.model).layers;
  const int stages = static_cast<int>(rng.uniform(1, std::min(16, layers)));
  in.layers_per_stage = draw_layers(rng, layers, stages);
  in.lengths = draw_lengths(rng, in.lengths_source);
  const CostModel cost = in.cost();
  in.memory_gib = draw_budget_gib(rng, cost, in.lengths);

  const int64_t longest = *std::max_element(in.lengths.begin(), in.lengths.end());
  const double mode = rng.unit();
  in.mode = mode < 0.3 ? Mode::kEppSearch : mode < 0.6 ? Mode::kEppAtSetting : Mode::kBaseline;
  in.method =
      in.mode == Mode::kBaseline
          ? pick(rng, std::vector<Method>{Method::kBatch, Method::kSeq1F1B, Method::kChunkFlow})
          : Method::kEpp;
  in.setting = draw_setting(rng, in.method, longest);

  in.options.num_stages = stages;
  in.options.memory_budget_bytes = in.memory_gib * kGiB;
  // Only the knobs the plan tool has, so that an EPP search reproduces there. No CBC mostly:
  // its wall-clock limit makes a plan depend on the machine's load.
  in.options.max_k = pick(rng, std::vector<int>{1, 2, 4, 8, 16, 32});
  in.options.overlap_waves = rng.chance(0.8);
  in.options.recompute_time_limit_s = rng.chance(0.1) ? 0.01 : 0;
  // Drawn last, so the draws above are what they were before zero bubble was drawn.
  in.options.zero_bubble = rng.chance(0.3) ? "try" : "off";
  return in;
}

PlanResult plan_instance(const Instance& in, const CostModel& cost) {
  switch (in.mode) {
    case Mode::kEppSearch:
      return plan_epp(in.lengths, cost, in.options);
    case Mode::kEppAtSetting:
      return plan_epp_at(in.lengths, in.setting, cost, in.options);
    case Mode::kBaseline:
      return plan_with_setting(in.method, in.lengths, in.setting, cost, in.options);
  }
  return {};
}

std::string reproduce_command(const Instance& in) {
  return "build/infinipipe-properties --seed " + std::to_string(in.seed) + " --index " +
         std::to_string(in.index);
}

std::string plan_tool_command(const Instance& in, const std::string& lengths_path) {
  std::ofstream out(lengths_path);
  for (int64_t n : in.lengths) out << n << "\n";
  std::string layers;
  for (int l : in.layers_per_stage) layers += (layers.empty() ? "" : ",") + std::to_string(l);
  char seconds[32];
  std::snprintf(seconds, sizeof seconds, "%g", in.options.recompute_time_limit_s);
  return "build/infinipipe-plan --step-lengths " + lengths_path + " --model " + in.model +
         " --hardware " + in.hardware + " --stages " + std::to_string(in.stages()) +
         " --layers-per-stage " + layers + " --memory-gib " + gib_text(in.memory_gib) +
         " --method epp --max-k " + std::to_string(in.options.max_k) + " --checkpoint-seconds " +
         seconds + (in.options.overlap_waves ? "" : " --waves-back-to-back") +
         (in.options.zero_bubble == "off" ? "" : " --zero-bubble " + in.options.zero_bubble);
}

}  // namespace infinipipe::properties
