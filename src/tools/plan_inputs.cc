#include "plan_inputs.h"

#include <algorithm>
#include <fstream>
#include <numeric>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "infinipipe/core/error.h"
#include "infinipipe/cost/hardware.h"
#include "infinipipe/cost/model_shape.h"
#include "infinipipe/data/empirical_lengths.h"
#include "infinipipe/data/length_file.h"
#include "infinipipe/data/length_sampler.h"

namespace infinipipe::tools {
namespace ip = infinipipe;

namespace {

bool is_file(const std::string& name) {
  std::ifstream in(name);
  return static_cast<bool>(in);
}

nlohmann::json read_json_file(const std::string& path) {
  std::ifstream in(path);
  ip::check(static_cast<bool>(in), "cannot open " + path);
  try {
    return nlohmann::json::parse(in);
  } catch (const nlohmann::json::exception& e) {  // parse_error, or out_of_range for "1e999"
    throw ip::Error(path + ": not valid JSON: " + e.what());
  }
}

}  // namespace

std::string join(const std::vector<std::string>& names) {
  std::string out;
  for (const std::string& n : names) out += (out.empty() ? "" : ", ") + n;
  return out;
}

ip::CostModel build_cost_model(const PlanToolArgs& args) {
  ip::ModelShape shape;
  bool have_coefficients = false;
  ip::CostCoefficients coefficients;
  ip::ParallelLayout layout;
  std::optional<ip::CostModel> file;  // a cost model file's, planned only on its own split
  if (is_file(args.model)) {
    const nlohmann::json j = read_json_file(args.model);
    try {
      if (j.contains("coefficients")) {
        file = ip::load_cost_model(args.model);
        shape = file->shape();
        coefficients = file->coefficients();
        layout = file->layout();
        have_coefficients = true;
      } else {
        shape = j.get<ip::ModelShape>();
      }
    } catch (const nlohmann::json::exception& e) {
      throw ip::Error(args.model + ": " + e.what());
    } catch (const ip::Error& e) {
      const std::string what = e.what();
      throw ip::Error(what.rfind(args.model, 0) == 0 ? what : args.model + ": " + what);
    }
  } else {
    const auto names = ip::ModelShape::builtin_names();
    ip::check(
        std::find(names.begin(), names.end(), args.model) != names.end(),
        "--model " + args.model + " is neither a file nor a built-in model (" + join(names) + ")");
    shape = ip::ModelShape::builtin(args.model);
  }
  // A cost file's activation bytes are what its layer kept when profiled (profile it with
  // --lean-layer instead).
  ip::check(!args.lean_layer || !have_coefficients,
            "--lean-layer sets the analytic count of a built-in model or a model shape; " +
                args.model +
                " is a cost model, whose activation bytes were measured: profile the lean "
                "layer (python -m infinipipe profile --lean-layer) and plan with that file");
  if (args.lean_layer) shape.lean_layer = true;
  shape.validate();
  if (!have_coefficients) {
    ip::Hardware hw;
    if (is_file(args.hardware)) {
      try {
        hw = read_json_file(args.hardware).get<ip::Hardware>();
      } catch (const nlohmann::json::exception& e) {
        throw ip::Error(args.hardware + ": " + e.what());
      } catch (const ip::Error& e) {
        const std::string what = e.what();
        throw ip::Error(what.rfind(args.hardware, 0) == 0 ? what : args.hardware + ": " + what);
      }
    } else {
      const auto names = ip::Hardware::builtin_names();
      ip::check(std::find(names.begin(), names.end(), args.hardware) != names.end(),
                "--hardware " + args.hardware + " is neither a file nor a built-in hardware (" +
                    join(names) + ")");
      hw = ip::Hardware::builtin(args.hardware);
    }
    hw.validate();
    coefficients = ip::CostCoefficients::analytic(shape, hw);
  }
  std::vector<int> layers = args.layers_per_stage;
  if (layers.empty()) {
    layers = ip::even_layer_split(shape.layers, args.stages);
  } else {
    ip::check(static_cast<int>(layers.size()) == args.stages,
              "--layers-per-stage lists " + std::to_string(layers.size()) +
                  " stages but --stages is " + std::to_string(args.stages));
    const int sum = std::accumulate(layers.begin(), layers.end(), 0);
    ip::check(sum == shape.layers, "--layers-per-stage adds up to " + std::to_string(sum) +
                                       " layers but " + shape.name + " has " +
                                       std::to_string(shape.layers));
    for (int l : layers)
      ip::check(l >= 1, "--layers-per-stage: every stage needs at least one layer");
  }
  if (file) {
    // The trainer's rule (planning/cost_model.py): a plan on another split could not be run
    // with this file.
    std::string own;
    for (int l : file->layers_per_stage()) own += (own.empty() ? "" : ",") + std::to_string(l);
    ip::check(!args.balanced,
              "--layers-per-stage balanced chooses a layer split, but the cost model " +
                  args.model + " is for its own split only: give --layers-per-stage " + own +
                  ", or weigh splits on a model shape and hardware (--model NAME --hardware "
                  "NAME)");
    ip::check_cost_file_split(*file, args.model, layers,
                              args.layers_per_stage.empty()
                                  ? "--stages " + std::to_string(args.stages) + " (even)"
                                  : "--layers-per-stage");
  }
  // The command line's layout replaces a cost model file's when any of its flags is given.
  if (args.layout_given) {
    layout.sequence = args.sp;
    layout.data = args.dp;
    layout.zero = args.zero;
    layout.gpus_per_node = args.gpus_per_node;
  }
  try {
    return ip::CostModel(shape, layers, coefficients, layout);
  } catch (const ip::Error& e) {
    // Name the flags: "d_s = 8 ... 52 heads" alone does not say where the 8 came from.
    throw ip::Error(std::string(e.what()) + " (--sp " + std::to_string(layout.sequence) + ")");
  }
}

ip::Hardware named_hardware(const PlanToolArgs& args) {
  if (is_file(args.hardware)) return read_json_file(args.hardware).get<ip::Hardware>();
  return ip::Hardware::builtin(args.hardware);
}

double default_memory_gib(const PlanToolArgs& args) {
  return named_hardware(args).memory_bytes / kGiB;
}

std::vector<std::vector<int64_t>> load_steps(const PlanToolArgs& args) {
  if (!args.step_lengths_file.empty())
    return {ip::read_lengths(args.step_lengths_file, args.lengths_field)};
  std::optional<ip::EmpiricalLengths> corpus;
  if (!args.lengths_file.empty())
    corpus.emplace(ip::read_lengths(args.lengths_file, args.lengths_field));
  std::vector<std::vector<int64_t>> steps;
  for (int i = 0; i < args.steps; ++i) {
    const uint64_t seed = args.seed + static_cast<uint64_t>(i);
    steps.push_back(corpus ? corpus->sample(args.batch, args.context, seed)
                           : ip::sample_lengths(args.distribution, args.batch, args.context, seed));
  }
  return steps;
}

}  // namespace infinipipe::tools
