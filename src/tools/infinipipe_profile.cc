// infinipipe-profile: times one layer of the C++ LLaMA stage on this machine over a (tokens,
// context) grid, fits the cost model's time coefficients and writes the cost JSON the planner
// loads (PlanConfig(cost_model=...), infinipipe-plan --model).
//
//   build/infinipipe-profile --grid full --threads 1 --output cost.json
//
// The same measurement and fit as `python -m infinipipe profile --stage cpp` (both call
// runtime::profile_layer and calibrate); the Python face also measures activation bytes.
#include <ATen/Parallel.h>
#include <torch/version.h>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <fstream>
#include <string>
#include <vector>

#include "infinipipe/core/error.h"
#include "infinipipe/cost/calibration.h"
#include "infinipipe/models/llama.h"
#include "infinipipe/runtime/layer_profiler.h"

namespace ip = infinipipe;

namespace {

struct Args {
  ip::models::LlamaConfig config =
      ip::models::LlamaConfig::from_shape(ip::ModelShape::builtin("tiny"), at::kFloat);
  std::vector<int> layers_per_stage;  // empty: two even stages
  std::string dtype = "float32";
  int threads = 1;
  std::string grid = "full";
  int repeats = 0;  // 0: the grid's
  int in_flight = ip::runtime::LayerProfilerOptions{}.in_flight;
  std::string statistic = "median";  // see LayerProfile::samples
  double holdout = 0.25;
  uint64_t seed = 0;
  std::string hardware = "cpu";
  std::string output = "cost.json";
  bool progress = true;
  std::string clock = "auto";
};

at::ScalarType parse_dtype(const std::string& name) {
  if (name == "float32") return at::kFloat;
  if (name == "bfloat16") return at::kBFloat16;
  if (name == "float64") return at::kDouble;
  throw ip::Error("dtype must be float32, bfloat16 or float64, got '" + name + "'");
}

std::string cpu_model() {
  std::ifstream in("/proc/cpuinfo");
  for (std::string line; std::getline(in, line);)
    if (line.rfind("model name", 0) == 0) return line.substr(line.find(':') + 2);
  return "unknown";
}

std::string utc_now() {
  const std::time_t t = std::time(nullptr);
  char text[32];
  std::strftime(text, sizeof text, "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&t));
  return text;
}

std::string percent(double v) {
  if (std::isnan(v)) return "n/a";  // nothing held out
  char text[32];
  std::snprintf(text, sizeof text, "%.1f%%", 100 * v);
  return text;
}

int run(const Args& args) {
  ip::models::LlamaConfig config = args.config;
  config.dtype = parse_dtype(args.dtype);
  config.validate();
  at::set_num_threads(args.threads);
  const ip::ProfileGrid grid = ip::profile_grid(args.grid);
  const ip::Statistic statistic = ip::parse_statistic(args.statistic);
  std::vector<int> split = args.layers_per_stage;
  if (split.empty()) split = ip::even_layer_split(int(config.layers), config.layers > 1 ? 2 : 1);

  // One layer with the embedding and the head: every part the cost model times, in one module.
  ip::models::LlamaStage stage(config, 0, 1, /*has_embedding=*/true, /*has_head=*/true);
  ip::runtime::LayerProfilerOptions options;
  options.points = grid.points();
  options.repeats = args.repeats > 0 ? args.repeats : grid.repeats;
  options.min_timed_tokens = grid.min_timed_tokens;
  options.dtype = config.dtype;
  options.hidden = config.hidden;
  options.kv_heads = config.kv_heads;
  options.head_dim = config.head_dim();
  options.vocab = config.vocab;
  options.seed = args.seed;
  options.in_flight = args.in_flight;
  // The thread's CPU clock leaves out the time other processes take the core; with one thread
  // it is what the run costs on an idle machine (auto: use it whenever it is valid).
  options.thread_cpu_time = args.clock == "cpu" || (args.clock == "auto" && args.threads == 1);
  if (args.progress)
    options.progress = [](int done, int total) {
      // Once per percent: the line may go to a log file.
      if (done * 100 / total != (done - 1) * 100 / total)
        std::fprintf(stderr, "\rprofiling: %3d%% of %d runs", done * 100 / total, total);
      if (done == total) std::fprintf(stderr, "\n");
    };
  const ip::runtime::LayerProfile profile = ip::runtime::profile_layer(stage, options);
  const ip::Calibration cal =
      ip::calibrate(profile.samples(statistic),
                    {args.holdout, args.seed, ip::runtime::attention_query_cuts(options.device)});

  const ip::ModelShape shape = config.shape("model");  // as python -m infinipipe profile
  const ip::CostModel base(
      shape, split, ip::CostCoefficients::analytic(shape, ip::Hardware::builtin(args.hardware)));
  ip::save_cost_model(ip::apply_calibration(base, cal), args.output);
  ip::load_cost_model(args.output);  // fail here, not in the planner

  nlohmann::json runs = nlohmann::json::array();
  for (const auto& r : profile.layer)
    runs.push_back({{"tokens", r.point.tokens},
                    {"context", r.point.context},
                    {"forward_s", r.forward_s},
                    {"backward_s", r.backward_s},
                    {"checkpointed_forward_s", r.checkpointed_forward_s},
                    {"recomputed_s", r.recomputed_s}});
  auto part = [](const std::vector<ip::runtime::PartRuns>& parts) {
    nlohmann::json out = nlohmann::json::array();
    for (const auto& r : parts) out.push_back({{"tokens", r.tokens}, {"seconds", r.seconds}});
    return out;
  };
  const nlohmann::json meta{{"date", utc_now()},
                            {"cpu", cpu_model()},
                            {"threads", args.threads},
                            {"torch", TORCH_VERSION},
                            {"stage", "cpp"},
                            {"grid", args.grid},
                            {"repeats", options.repeats},
                            {"min_timed_tokens", options.min_timed_tokens},
                            {"in_flight", options.in_flight},
                            {"dtype", args.dtype},
                            {"statistic", args.statistic},
                            {"clock", options.thread_cpu_time ? "thread_cpu" : "wall"},
                            {"calibration", cal},
                            {"layer_runs", runs},
                            {"embedding_runs", part(profile.embedding)},
                            {"head_runs", part(profile.head)}};
  std::string meta_path = args.output;
  if (meta_path.size() > 5 && meta_path.substr(meta_path.size() - 5) == ".json")
    meta_path.resize(meta_path.size() - 5);
  meta_path += ".meta.json";
  std::ofstream(meta_path) << meta.dump(2) << "\n";

  std::printf(
      "forward a1=%.4g a2=%.4g b=%.4g; backward a1=%.4g a2=%.4g b=%.4g; g=%.3f "
      "embedding=%.3g s/token head=%.3g s/token\n",
      cal.a1, cal.a2, cal.b, cal.backward_a1, cal.backward_a2, cal.backward_b, cal.backward_ratio,
      cal.embedding_s_per_token.value_or(0), cal.head_s_per_token.value_or(0));
  std::printf(
      "held-out forward error: median %s, max %s; backward: median %s, max %s (%zu of "
      "%zu points)\n",
      percent(cal.forward_median_error).c_str(), percent(cal.forward_max_error).c_str(),
      percent(cal.backward_median_error).c_str(), percent(cal.backward_max_error).c_str(),
      cal.held_out.size(), profile.layer.size());
  std::printf("wrote %s and %s\n", args.output.c_str(), meta_path.c_str());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Args args;
  CLI::App app{
      "Time one layer of the C++ LLaMA stage over a (tokens, context) grid on this CPU, fit the "
      "cost model's a1, a2, b, backward ratio and the embedding and head per-token times, and "
      "write the cost JSON the planner loads. Activation bytes and the other memory terms keep "
      "their analytic values here (python -m infinipipe profile measures activation bytes)."};
  auto& c = args.config;
  app.add_option("--vocab", c.vocab, "vocabulary size")->capture_default_str();
  app.add_option("--hidden", c.hidden, "hidden size")->capture_default_str();
  app.add_option("--layers", c.layers, "decoder layers of the model")->capture_default_str();
  app.add_option("--heads", c.heads, "attention heads")->capture_default_str();
  app.add_option("--kv-heads", c.kv_heads, "key/value heads")->capture_default_str();
  app.add_option("--ffn", c.ffn, "SwiGLU intermediate size")->capture_default_str();
  app.add_option("--layers-per-stage", args.layers_per_stage,
                 "layers of each pipeline stage, comma separated (default: two even stages)")
      ->delimiter(',');
  app.add_option("--dtype", args.dtype, "float32, bfloat16 or float64")->capture_default_str();
  app.add_option("--threads", args.threads,
                 "intra-op threads (the trainer runs one per stage process)")
      ->capture_default_str();
  app.add_option("--grid", args.grid, "quick (seconds), training, full or gpu")
      ->capture_default_str();
  app.add_option("--repeats", args.repeats, "timed runs per point (default: the grid's)");
  app.add_option("--in-flight", args.in_flight,
                 "recorded forwards held before the oldest one's backward, as a pipeline stage "
                 "holds chunks in flight (0: each backward right after its forward)")
      ->capture_default_str();
  app.add_option("--statistic", args.statistic, "per point: min, median or trimmed_mean")
      ->capture_default_str();
  app.add_option("--holdout", args.holdout, "fraction of grid points held out of the fit")
      ->capture_default_str();
  app.add_option("--seed", args.seed, "order of the runs and the held-out points")
      ->capture_default_str();
  app.add_option("--hardware", args.hardware,
                 "built-in hardware of the analytic terms not measured (p2p)")
      ->capture_default_str();
  app.add_option("--output", args.output, "cost JSON to write (raw runs go to *.meta.json)")
      ->capture_default_str();
  app.add_option("--clock", args.clock,
                 "cpu: the thread's CPU time, which leaves out time other processes take the "
                 "core (one thread only); wall; auto: cpu with one thread, else wall")
      ->check(CLI::IsMember({"auto", "wall", "cpu"}))
      ->capture_default_str();
  app.add_flag("!--no-progress", args.progress, "no progress line on stderr");
  CLI11_PARSE(app, argc, argv);
  try {
    return run(args);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
}
