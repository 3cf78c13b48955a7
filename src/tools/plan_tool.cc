// infinipipe-plan: plans sampled or given steps with EPP and the baselines and prints what the
// simulator predicts for each, as a table or as JSON lines. Over 400 lines for a reason: the
// command line, its checks and the run that reads them, one after the other.
#include "plan_tool.h"

#include <algorithm>
#include <cmath>
#include <exception>
#include <functional>
#include <numeric>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "infinipipe/core/error.h"
#include "infinipipe/cost/cost_model.h"
#include "infinipipe/cost/hardware.h"
#include "infinipipe/cost/model_shape.h"
#include "infinipipe/data/length_file.h"
#include "infinipipe/data/length_sampler.h"
#include "infinipipe/planner/planner.h"
#include "infinipipe/planner/stage_balance.h"
#include "infinipipe/planner/static_baseline.h"
#include "plan_inputs.h"
#include "plan_replicas.h"
#include "plan_report.h"

namespace infinipipe::tools {
namespace ip = infinipipe;

namespace {

using Args = PlanToolArgs;

// A number option's value must be finite and within its range: CLI11 reads "nan", "inf" and
// "1e400" as doubles, and a budget of NaN would compare false everywhere and plan with no limit.
void check_finite(const CLI::Option* option, double value, bool zero_allowed,
                  const std::string& unit) {
  if (std::isfinite(value) && (value > 0 || (zero_allowed && value == 0))) return;
  // The value as typed: "1e400" reads as inf.
  const std::string typed = option->results().empty() ? "" : option->results().back();
  throw ip::Error(option->get_name() + " " + typed + ": expected a finite number of " + unit +
                  (zero_allowed ? ", 0 or more" : ", more than 0"));
}

int run(int argc, const char* const* argv, std::ostream& out, std::ostream& err,
        const std::function<bool(const Args&)>& admit) {
  Args args;
  args.max_k = ip::PlannerOptions{}.max_k;
  args.search_work = ip::PlannerOptions{}.search_work_limit;
  args.recompute_seconds = ip::PlannerOptions{}.recompute_time_limit_s;
  CLI::App app{
      "Plans training steps with elastic pipeline parallelism (EPP) and the baselines, "
      "and prints the predicted step time, bubbles, recompute and memory of each."};
  app.name("infinipipe-plan");
  auto* dist_opt = app.add_option(
      "--distribution", args.distribution,
      "built-in length distribution to sample steps from (" + join(ip::distribution_names()) + ")");
  auto* lengths_opt = app.add_option(
      "--lengths", args.lengths_file,
      "your lengths as a distribution: a file of sequence lengths (one per line, or JSON Lines) "
      "to sample --batch lengths per step from, as from --distribution");
  auto* step_lengths_opt =
      app.add_option("--step-lengths", args.step_lengths_file,
                     "a file of sequence lengths (one per line, or JSON Lines) that are one whole "
                     "step, planned as given");
  auto* field_opt = app.add_option(
      "--lengths-field", args.lengths_field,
      "JSON Lines: the field holding each record's length, a count or a list of token ids "
      "(default: the first of " +
          join(ip::default_length_fields()) + " that the first record has)");
  lengths_opt->excludes(dist_opt);
  step_lengths_opt->excludes(dist_opt)->excludes(lengths_opt);
  auto* batch_opt =
      app.add_option("--batch", args.batch, "sequences per sampled step")->capture_default_str();
  auto* context_opt = app.add_option("--context", args.context,
                                     "context length: sampled sequences are truncated to it")
                          ->capture_default_str();
  auto* seed_opt =
      app.add_option("--seed", args.seed, "seed of the first sampled step")->capture_default_str();
  auto* steps_opt = app.add_option("--steps", args.steps,
                                   "sampled steps (seeds seed..seed+steps-1); static baselines are "
                                   "chosen over all of them")
                        ->capture_default_str();
  app.add_option("--model", args.model,
                 "built-in model (" + join(ip::ModelShape::builtin_names()) +
                     ") or a model shape / cost model JSON file (a cost model file is planned on "
                     "its own layer split, as the trainer plans with it)")
      ->capture_default_str();
  app.add_option(
         "--hardware", args.hardware,
         "built-in hardware (" + join(ip::Hardware::builtin_names()) + ") or a hardware JSON file")
      ->capture_default_str();
  app.add_option("--stages", args.stages, "pipeline stages (d_p)")->capture_default_str();
  auto* sp_opt = app.add_option("--sp", args.sp,
                                "Ulysses sequence-parallel ranks per stage (d_s); must divide the "
                                "model's heads and KV heads")
                     ->capture_default_str();
  auto* dp_opt =
      app.add_option("--dp", args.dp,
                     "data-parallel replicas (d_r): each step's batch is split over them by "
                     "predicted cost, each share planned on its own; the step is the slowest's")
          ->capture_default_str();
  auto* zero_opt = app.add_option("--zero", args.zero,
                                  "ZeRO level (0-3) over each stage's d_s x d_r gradient group")
                       ->capture_default_str();
  auto* gpus_opt = app.add_option("--gpus-per-node", args.gpus_per_node,
                                  "GPUs per node: an SP group or a stage boundary beyond a node "
                                  "uses the inter-node link")
                       ->capture_default_str();
  auto* memory_opt = app.add_option(
      "--memory-gib", args.memory_gib,
      "memory budget per stage in GiB, model state included (default: the device memory)");
  std::vector<std::string> layers_typed;
  app.add_option("--layers-per-stage", layers_typed,
                 "layers of each stage, comma separated, or 'balanced': the split with the least "
                 "busiest stage (the head's stage lighter) or a neighbour, whichever EPP plans "
                 "the steps fastest on; every method then runs on it (default: as even as "
                 "possible)")
      ->delimiter(',');
  app.add_option("--method", args.method, "epp, batch, seq1f1b, chunkflow or all")
      ->capture_default_str();
  app.add_option("--max-k", args.max_k, "EPP: largest slice count K tried")->capture_default_str();
  app.add_option(
         "--search-work", args.search_work,
         "EPP: the search's work limit in chunk-stages (PlannerOptions::search_work_limit); "
         "0 searches without limit")
      ->capture_default_str();
  auto* recompute_opt =
      app.add_option("--recompute-seconds,--checkpoint-seconds", args.recompute_seconds,
                     "EPP: CBC time limit for the winner's recompute plan; 0 skips CBC (the greedy "
                     "solvers alone: deterministic, as the trainer plans)")
          ->capture_default_str();
  app.add_flag("--waves-back-to-back", args.waves_back_to_back,
               "EPP: never overlap waves (the paper's schedule, for ablations)");
  app.add_flag(
      "--spread-head", args.spread_head,
      "every method: run chunks' LM heads on the stages the planner assigns, where the "
      "simulator finds it faster (docs/design.md, \"Spread head\"); the table and the JSON "
      "name the heads per stage");
  app.add_option("--zero-bubble", args.zero_bubble,
                 "split backwards into B and W (docs/design.md \"Zero bubble\"): try (EPP "
                 "keeps ZB-H1 or ZB-H2 where the simulator finds it faster), h1 or h2 (every "
                 "method, for ablations) or off")
      ->check(CLI::IsMember({"off", "try", "h1", "h2"}))
      ->capture_default_str();
  app.add_flag("--ideal-even-head", args.ideal_even_head,
               "what-if for studies: every stage runs 1/d of each chunk's head, logits and head "
               "parameters, with free communication (vocabulary parallelism's best case: the "
               "most any balancing of the head gives); not runnable, so no --plan")
      ->excludes("--spread-head");
  app.add_flag("--v-shape", args.v_shape,
               "what-if for studies: also time EPP's chunks and waves with each rank's layers cut "
               "into two stages placed in a V (docs/design.md, \"Virtual stages\"), without "
               "recompute; the executor does not run it yet, so plans stay as they are");
  auto* offload_opt =
      app.add_option("--offload-from", args.offload_from_gib,
                     "what-if for studies: also plan EPP with this much memory per stage (GiB) "
                     "and fit each plan into the budget by offloading activations to host memory "
                     "over --hardware's host link (docs/design.md, \"Activation offload\"); the "
                     "executor does not offload yet, so plans stay as they are");
  app.add_flag("--lean-layer", args.lean_layer,
               "the model runs InfiniPipe's lean layer (LlamaConfig.lean_layer: each norm keeps "
               "its input and rstd, the SwiGLU its gate and up), which keeps less per token; "
               "for a built-in model or a model shape file");
  app.add_flag("--json", args.json,
               "one JSON object per line per method (and step) instead of the table");
  app.add_option(
      "--plan", args.plan_out,
      "write the EPP plan (or the single --method's plan) of the first step to this JSON file");
  app.add_option(
      "--trace", args.trace_out,
      "write that plan's simulated timeline as a Chrome trace (chrome://tracing, Perfetto)");
  app.footer(
      "Exit status: 0 when at least one requested method has a feasible plan, 2 on a bad command "
      "line or input file, 3 when every requested method is infeasible (the output is still "
      "printed).\n");
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp&) {
    out << app.help();
    return ip::tools::kExitPlanned;
  }
  if (layers_typed.size() == 1 && layers_typed[0] == "balanced") {
    args.balanced = true;
  } else {
    for (const std::string& typed : layers_typed) {
      size_t used = 0;
      int value = 0;
      try {
        value = std::stoi(typed, &used);
      } catch (const std::exception&) {
        used = 0;
      }
      ip::check(used == typed.size() && used > 0,
                "--layers-per-stage " + typed +
                    ": expected layer counts, comma separated, or 'balanced'");
      args.layers_per_stage.push_back(value);
    }
  }
  args.memory_given = memory_opt->count() > 0;
  args.layout_given = sp_opt->count() + dp_opt->count() + zero_opt->count() + gpus_opt->count() > 0;
  if (args.memory_given) check_finite(memory_opt, args.memory_gib, false, "GiB");
  check_finite(recompute_opt, args.recompute_seconds, true, "seconds");
  // CLI11 reads "-1" into an unsigned seed as 2^64 - 1.
  for (const std::string& typed : seed_opt->results())
    ip::check(typed.find('-') == std::string::npos,
              "--seed " + typed + ": expected an integer from 0 to 18446744073709551615");
  ip::check(
      !args.lengths_file.empty() || !args.step_lengths_file.empty() || !args.distribution.empty(),
      "give the steps' lengths: --distribution NAME (" + join(ip::distribution_names()) +
          "), --lengths FILE (your lengths, sampled per step) or --step-lengths FILE (one "
          "whole step)");
  if (!args.step_lengths_file.empty())
    for (const CLI::Option* sampling : {batch_opt, context_opt, seed_opt, steps_opt})
      ip::check(sampling->count() == 0,
                sampling->get_name() +
                    " is for sampled steps (--lengths FILE, --distribution NAME); --step-lengths "
                    "FILE is one whole step, planned as given: drop " +
                    sampling->get_name());
  ip::check(field_opt->count() == 0 || args.distribution.empty(),
            "--lengths-field names the length field of a --lengths or --step-lengths JSON Lines "
            "file; there is none with --distribution");
  ip::check(args.batch >= 1, "--batch must be at least 1");
  ip::check(args.context >= 1, "--context must be at least 1");
  ip::check(args.steps >= 1, "--steps must be at least 1");
  ip::check(args.stages >= 1, "--stages must be at least 1");
  ip::check(args.sp >= 1, "--sp must be at least 1");
  ip::check(args.dp >= 1, "--dp must be at least 1");
  ip::check(args.zero >= 0 && args.zero <= 3, "--zero must be 0, 1, 2 or 3");
  ip::check(args.gpus_per_node >= 1, "--gpus-per-node must be at least 1");
  ip::check(args.dp == 1 || args.batch >= args.dp || !args.step_lengths_file.empty(),
            "--batch " + std::to_string(args.batch) + " has fewer sequences than the " +
                std::to_string(args.dp) + " replicas of --dp; every replica needs one");
  ip::check(args.max_k >= 1, "--max-k must be at least 1");
  ip::check(args.search_work >= 0, "--search-work must be 0 (no limit) or positive");
  if (admit && !admit(args)) return ip::tools::kExitPlanned;

  ip::check(!args.v_shape || args.dp == 1,
            "--v-shape times one pipeline: leave out --dp (or give --dp 1)");
  if (offload_opt->count() > 0) {
    check_finite(offload_opt, args.offload_from_gib, false, "GiB");
    ip::check(args.dp == 1, "--offload-from times one pipeline: leave out --dp (or give --dp 1)");
  }
  std::vector<ip::Method> methods;
  if (args.method == "all")
    methods = ip::all_methods();
  else
    methods.push_back(ip::parse_method(args.method));

  ip::check(!args.ideal_even_head || args.plan_out.empty(),
            "--ideal-even-head plans are a what-if the executor cannot run: leave out --plan");
  ip::CostModel cost = build_cost_model(args);
  if (args.ideal_even_head) cost = cost.with_ideal_even_head();
  if (args.spread_head) cost = cost.with_head_replicas();  // as plan_step does
  const double memory_gib = args.memory_given ? args.memory_gib : default_memory_gib(args);
  const ip::Hardware host =
      args.offload_from_gib > 0 ? ip::tools::named_hardware(args) : ip::Hardware{};
  const double host_link = host.host_link_bandwidth;
  ip::check(args.offload_from_gib == 0 || host_link > 0,
            "--offload-from: --hardware " + args.hardware +
                " gives no host_link_bandwidth (bytes/s each way between device and host)");
  ip::PlannerOptions options;
  options.num_stages = args.stages;
  options.memory_budget_bytes = memory_gib * kGiB;
  options.max_k = args.max_k;
  options.search_work_limit = args.search_work;
  options.overlap_waves = !args.waves_back_to_back;
  options.spread_head = args.spread_head;
  options.zero_bubble = args.zero_bubble;
  options.recompute_time_limit_s = args.recompute_seconds;
  const auto steps = load_steps(args);
  const int n = static_cast<int>(steps.size());
  // With --dp each replica's share is planned as a step of its own; a static baseline setting
  // is chosen over all of them (one setting for every replica and step).
  const int replicas = cost.layout().data;
  // --layers-per-stage balanced: the split EPP plans the steps fastest on
  // (planner/stage_balance.h), chosen on each replica's share of the even split's data split; every
  // method then runs on it.
  std::string split_name = args.layers_per_stage.empty() ? "even" : "given";
  std::optional<ip::LayerSplitChoice> choice;
  if (args.balanced) {
    choice = ip::choose_layer_split(ip::tools::split_steps(steps, cost, replicas).planned, cost,
                                    options);
    if (choice->split != cost.layers_per_stage()) cost = ip::with_layer_split(cost, choice->split);
    split_name = choice->name;
  }
  const ip::tools::ReplicaSteps split = ip::tools::split_steps(steps, cost, replicas);
  const int planned = static_cast<int>(split.planned.size());

  // The baselines size their caps from the longest sequence of all the steps; so does EPP's try.
  options.baseline_longest = {0};
  for (const auto& step : split.planned)
    for (int64_t length : step)
      options.baseline_longest[0] = std::max(options.baseline_longest[0], length);
  std::vector<ip::PlanResult> epp(planned);
  std::vector<ip::BaselineComparison> baselines;
  // The choice planned every share with EPP on the chosen split already (the same data split,
  // which depends on the split only through the cost model: reuse only when it is the same).
  const bool reuse = choice && replicas == 1;
  for (ip::Method m : methods) {
    if (m == ip::Method::kEpp) {
      for (int i = 0; i < planned; ++i)
        epp[i] = reuse ? choice->plans[i] : ip::plan_epp(split.planned[i], cost, options);
    } else {
      baselines.push_back(ip::compare_baseline(m, split.planned, cost, options));
    }
  }
  const bool with_epp =
      std::find(methods.begin(), methods.end(), ip::Method::kEpp) != methods.end();
  ip::check(!args.v_shape || with_epp, "--v-shape times EPP's plans: add --method epp (or all)");
  // --v-shape: EPP's chunks and waves on the V, per step (planner/v_shape_plan.h).
  std::vector<ip::VShapePlan> v_shapes;
  if (args.v_shape) {
    ip::VShapeOptions v_options;
    v_options.memory_budget_bytes = options.memory_budget_bytes;
    for (int i = 0; i < planned; ++i) {
      if (epp[i].feasible) {
        v_shapes.push_back(ip::plan_v_shape(epp[i].plan, cost, v_options));
      } else {
        v_shapes.emplace_back().reason = "EPP has no plan";
      }
    }
  }

  // --offload-from: EPP's plans with that much memory, offloaded into the budget, per step
  // (planner/offload_plan.h).
  std::vector<ip::OffloadPlan> offloads;
  if (args.offload_from_gib > 0) {
    ip::check(with_epp, "--offload-from times EPP's plans: add --method epp (or all)");
    ip::PlannerOptions roomy = options;
    roomy.memory_budget_bytes = args.offload_from_gib * kGiB;
    ip::OffloadOptions o_options;
    o_options.memory_budget_bytes = options.memory_budget_bytes;
    o_options.host_link_bandwidth = host_link;
    o_options.gpus_per_host_link = host.gpus_per_host_link;
    for (int i = 0; i < planned; ++i) {
      const ip::PlanResult planned_roomy = ip::plan_epp(split.planned[i], cost, roomy);
      if (planned_roomy.feasible) {
        offloads.push_back(ip::plan_offload(planned_roomy.plan, cost, o_options));
      } else {
        offloads.emplace_back().reason =
            "EPP has no plan with --offload-from's memory: " + planned_roomy.reason;
      }
    }
  }

  // A baseline with no static setting that fits every step reports why on every step.
  std::vector<std::vector<ip::PlanResult>> no_static(baselines.size());
  for (size_t b = 0; b < baselines.size(); ++b) no_static[b].assign(planned, ip::PlanResult{});
  for (size_t b = 0; b < baselines.size(); ++b)
    for (ip::PlanResult& r : no_static[b]) r.reason = baselines[b].static_reason;
  std::vector<Row> rows;
  std::vector<ip::tools::ReplicaResult> by_replica;  // per row
  auto add_row = [&](int i, ip::Method method, bool is_static,
                     const std::vector<ip::PlanResult>& results) {
    by_replica.push_back(ip::tools::slowest_replica(results, i, replicas));
    rows.push_back({i, method, is_static, by_replica.back().step});
  };
  by_replica.reserve(static_cast<size_t>(n) * (1 + 2 * baselines.size()));
  for (int i = 0; i < n; ++i) {
    if (with_epp) add_row(i, ip::Method::kEpp, false, epp);
    for (size_t b = 0; b < baselines.size(); ++b) {
      const auto& base = baselines[b];
      add_row(i, base.method, true, base.static_feasible ? base.static_plans : no_static[b]);
      // Over one step the static setting is that step's best: print it once.
      if (n > 1) add_row(i, base.method, false, base.per_step_best);
    }
  }

  if (args.json) {
    for (size_t k = 0; k < rows.size(); ++k) {
      const Row& row = rows[k];
      nlohmann::json j = row_json(row, steps[row.step], options.memory_budget_bytes);
      if (row.result->feasible)
        ip::tools::add_layout_fields(j, by_replica[k], cost, split, row.step);
      j["layers_per_stage"] = cost.layers_per_stage();
      j["layer_split"] = split_name;
      if (choice && row.step == 0) j["layer_split_candidates"] = candidates_json(*choice);
      if (row.method == ip::Method::kEpp && !v_shapes.empty())
        j["v_shape"] = v_shape_json(v_shapes[row.step]);
      if (row.method == ip::Method::kEpp && !offloads.empty())
        j["offload"] = offload_json(offloads[row.step]);
      if (row.method == ip::Method::kEpp && row.result->feasible &&
          row.result->plan.recompute_s > 0)
        j["checkpoint_compare"] = checkpoint_comparison(
            row.result->plan, cost, options.memory_budget_bytes, options.recompute_time_limit_s);
      out << j.dump() << "\n";
    }
  } else {
    out << cost.shape().name << ", " << args.stages << " stages (layers";
    for (int l : cost.layers_per_stage()) out << " " << l;
    out << ", " << split_name << "), budget " << fixed(memory_gib, 1) << " GiB per "
        << (cost.layout() == ip::ParallelLayout{} ? "stage" : "rank") << "\n";
    if (cost.layout() != ip::ParallelLayout{})
      out << "layout " << cost.layout().describe(args.stages) << "\n";
    if (choice) print_candidates(out, *choice);
    for (int i = 0; i < n; ++i) {
      const auto& lengths = steps[i];
      out << "\nstep " << i;
      if (args.step_lengths_file.empty())
        out << " (seed " << args.seed + static_cast<uint64_t>(i) << ")";
      out << ": " << lengths.size() << " sequences, "
          << std::accumulate(lengths.begin(), lengths.end(), int64_t{0}) << " tokens, longest "
          << *std::max_element(lengths.begin(), lengths.end()) << "\n";
      for (size_t k = 0; k < rows.size(); ++k) {
        if (rows[k].step != i) continue;
        print_row(out, rows[k], options.memory_budget_bytes);
        if (rows[k].method == ip::Method::kEpp && !v_shapes.empty())
          print_v_shape(out, v_shapes[i]);
        if (rows[k].method == ip::Method::kEpp && !offloads.empty())
          print_offload(out, offloads[i]);
        if (replicas > 1 && rows[k].result->feasible) {
          std::vector<double> times;
          for (const ip::PlanResult* r : by_replica[k].replicas)
            times.push_back(r->plan.step_time_s);
          out << "      replicas   step time s " << list(times, 3)
              << " (the step is the slowest)\n";
        }
      }
    }
    if (n > 1) {
      out << "\nmean step time over " << n << " steps\n";
      // Over the rows, so that with --dp each step counts its slowest replica.
      auto mean_of = [&](ip::Method method, bool is_static) -> std::string {
        double total = 0;
        for (const Row& row : rows) {
          if (row.method != method || row.is_static != is_static) continue;
          if (!row.result->feasible) return "infeasible";
          total += row.result->plan.step_time_s;
        }
        return fixed(total / n, 3) + " s";
      };
      if (with_epp) out << "  epp                " << mean_of(ip::Method::kEpp, false) << "\n";
      if (!v_shapes.empty()) print_v_shape_mean(out, v_shapes, epp);
      if (!offloads.empty()) print_offload_mean(out, offloads, epp);
      for (const auto& base : baselines) {
        std::string name = ip::to_string(base.method);
        name.resize(10, ' ');
        out << "  " << name << " static  " << mean_of(base.method, true) << "   per-step best  "
            << mean_of(base.method, false) << "\n";
      }
    }
  }

  const bool any_feasible =
      std::any_of(rows.begin(), rows.end(), [](const Row& row) { return row.result->feasible; });
  if (!any_feasible) {
    err << "infinipipe-plan: no requested method has a feasible plan"
        << (args.plan_out.empty() && args.trace_out.empty() ? "" : "; nothing written") << "\n";
    return ip::tools::kExitInfeasible;
  }
  if (!args.plan_out.empty() || !args.trace_out.empty()) {
    // With --dp: step 0's slowest replica (rows[0]).
    const ip::PlanResult& first = *rows.front().result;
    ip::check(first.feasible, "no feasible " + std::string(ip::to_string(methods[0])) +
                                  " plan to write: " + first.reason);
    if (!args.plan_out.empty()) ip::save_plan(first.plan, args.plan_out);
    if (!args.trace_out.empty()) {
      ip::SimOptions sim_options;
      sim_options.memory_budget_bytes = options.memory_budget_bytes;
      sim_options.record_events = true;
      const ip::SimResult sim = ip::simulate(first.plan.schedule, first.plan.chunks, cost,
                                             first.plan.recompute, sim_options);
      ip::write_chrome_trace(sim, args.trace_out);
    }
  }
  return ip::tools::kExitPlanned;
}

}  // namespace

int plan_tool(int argc, const char* const* argv, std::ostream& out, std::ostream& err,
              const std::function<bool(const PlanToolArgs&)>& admit) {
  try {
    return run(argc, argv, out, err, admit);
  } catch (const std::exception& e) {
    err << "infinipipe-plan: error: " << e.what() << "\n";
  }
  return kExitError;
}

}  // namespace infinipipe::tools
