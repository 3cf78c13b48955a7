// infinipipe-properties: the planner's properties at volume (issue 15, part 4). Plans random
// steps (lengths, models, stages, layer splits, budgets, methods and their knobs) and checks
// every plan (properties/plan_checks.h); --sweep times EPP on single sequences up to the memory
// limit. Prints a JSON summary; exits 1 on any violation, printing how to reproduce it.
#include <algorithm>
#include <chrono>
#include <iostream>
#include <map>
#include <string>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "infinipipe/core/error.h"
#include "properties/instance.h"
#include "properties/plan_checks.h"
#include "properties/sweep.h"
#include "properties/worker_pool.h"

namespace ip = infinipipe;
namespace pr = infinipipe::properties;

namespace {

struct Args {
  uint64_t seed = 0;
  int64_t plans = 1000000;
  int threads = 2;
  double timeout_s = 60;
  int64_t index = -1;
  bool sweep = false;
  double sweep_timeout_s = 30;
  bool smoke = false;
  int reproducers = 10;
};

// One random plan, planned and checked in a worker: what the parent needs to count it.
std::string evaluate_instance(uint64_t seed, int64_t index) {
  const pr::Instance in = pr::draw_instance(seed, index);
  const ip::CostModel cost = in.cost();
  nlohmann::json j;
  const auto started = std::chrono::steady_clock::now();
  try {
    const ip::PlanResult result = pr::plan_instance(in, cost);
    j["seconds"] =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
    j["feasible"] = result.feasible;
    if (result.feasible) {
      const ip::Plan& plan = result.plan;
      j["recompute"] = plan.recompute_s > 0;
      j["waves"] = plan.waves.size();
      j["split"] = std::any_of(plan.chunks.begin(), plan.chunks.end(), [](const ip::Chunk& c) {
        return c.kind() != ip::ChunkKind::kPacked;
      });
    }
    j["violations"] = result.feasible
                          ? pr::violations_json(pr::check_plan(result.plan, in.lengths, cost,
                                                               in.options.memory_budget_bytes))
                          : nlohmann::json::array();
  } catch (const std::exception& e) {
    j["seconds"] =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
    j["feasible"] = false;
    j["violations"] = pr::violations_json({{"planner threw", e.what()}});
  }
  return j.dump();
}

nlohmann::json zero_counts() {
  nlohmann::json counts = nlohmann::json::object();
  for (const std::string& kind : pr::violation_kinds()) counts[kind] = 0;
  return counts;
}

// The outcome of a pool item as the JSON line a worker would have sent.
nlohmann::json outcome_json(const pr::ItemOutcome& o) {
  if (o.status == pr::ItemStatus::kDone) return nlohmann::json::parse(o.line);
  const char* kind = o.status == pr::ItemStatus::kTimedOut ? "timed out" : "crashed";
  return {{"seconds", o.seconds},
          {"feasible", false},
          {"violations", pr::violations_json({{kind, o.reason}})}};
}

std::string lengths_path(const std::string& what) {
  return "/tmp/infinipipe-properties-" + what + ".lengths";
}

nlohmann::json run_volume(const Args& args, int64_t plans) {
  const auto started = std::chrono::steady_clock::now();
  auto last_progress = started;
  int64_t done = 0, feasible = 0, violating = 0;
  std::map<std::string, int64_t> shapes = {
      {"recompute", 0}, {"several waves", 0}, {"split sequences", 0}};
  nlohmann::json counts = zero_counts(), by_mode = nlohmann::json::object();
  nlohmann::json slowest = {{"seconds", 0.0}}, examples = nlohmann::json::array();
  pr::PoolOptions pool{args.threads, args.timeout_s};
  pr::run_pool(
      plans, pool, [&](int64_t i) { return evaluate_instance(args.seed, i); },
      [&](const pr::ItemOutcome& o) {
        const nlohmann::json j = outcome_json(o);
        const pr::Instance in = pr::draw_instance(args.seed, o.index);
        const std::string mode =
            std::string(pr::to_string(in.mode)) + " " + ip::to_string(in.method);
        ++done;
        if (std::chrono::steady_clock::now() - last_progress > std::chrono::seconds(60)) {
          last_progress = std::chrono::steady_clock::now();
          const double so_far = std::chrono::duration<double>(last_progress - started).count();
          std::cerr << "properties: " << done << " of " << plans << " plans, "
                    << static_cast<int64_t>(done / so_far) << "/s, " << violating
                    << " with violations\n";
        }
        auto& m = by_mode[mode];
        if (m.is_null()) m = {{"plans", 0}, {"feasible", 0}};
        m["plans"] = m["plans"].get<int64_t>() + 1;
        m["feasible"] = m["feasible"].get<int64_t>() + (j["feasible"].get<bool>() ? 1 : 0);
        feasible += j["feasible"].get<bool>() ? 1 : 0;
        // What the feasible plans exercised, so that zero violations means something.
        if (j.value("recompute", false)) ++shapes["recompute"];
        if (j.value("waves", 0) > 1) ++shapes["several waves"];
        if (j.value("split", false)) ++shapes["split sequences"];
        if (j["seconds"].get<double>() > slowest["seconds"].get<double>())
          slowest = {{"seconds", j["seconds"]},
                     {"index", o.index},
                     {"mode", mode},
                     {"model", in.model},
                     {"stages", in.stages()},
                     {"lengths", in.lengths_source},
                     {"reproduce", pr::reproduce_command(in)}};
        if (j["violations"].empty()) return;
        ++violating;
        for (const auto& v : j["violations"])
          counts[v[0].get<std::string>()] = counts[v[0]].get<int>() + 1;
        if (static_cast<int>(examples.size()) >= args.reproducers) return;
        nlohmann::json example = {{"index", o.index},
                                  {"mode", mode},
                                  {"violations", j["violations"]},
                                  {"reproduce", pr::reproduce_command(in)}};
        if (in.mode == pr::Mode::kEppSearch)
          example["plan_tool"] = pr::plan_tool_command(
              in, lengths_path(std::to_string(args.seed) + "-" + std::to_string(o.index)));
        examples.push_back(example);
        std::cerr << "violation: " << example.dump() << "\n";
      });
  const double wall =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  return {{"seed", args.seed},
          {"plans", done},
          {"feasible", feasible},
          {"infeasible", done - feasible},
          {"workers", args.threads},
          {"wall_seconds", wall},
          {"plans_per_second", done / std::max(wall, 1e-9)},
          {"by_mode", by_mode},
          {"feasible_plans_with", shapes},
          {"violating_plans", violating},
          {"violations", counts},
          {"slowest", slowest},
          {"examples", examples}};
}

nlohmann::json run_sweep(const Args& args, bool smoke) {
  const std::vector<pr::SweepCase> cases = pr::sweep_cases(smoke);
  nlohmann::json rows = nlohmann::json::array(), counts = zero_counts();
  nlohmann::json slowest = {{"seconds", 0.0}};
  int64_t violating = 0;
  pr::PoolOptions pool{args.threads, args.sweep_timeout_s};
  std::vector<nlohmann::json> by_index(cases.size());
  pr::run_pool(
      static_cast<int64_t>(cases.size()), pool,
      [&](int64_t i) { return pr::evaluate_sweep_case(cases[i]); },
      [&](const pr::ItemOutcome& o) {
        const pr::SweepCase& c = cases[o.index];
        nlohmann::json j = outcome_json(o);
        j["model"] = c.model;
        j["stages"] = c.stages;
        j["budget_gib"] = c.memory_gib;
        j["length"] = c.length;
        j["reported_in_issue"] = c.reported;
        j["longest_fitting"] = pr::longest_fitting(c.model, c.hardware, c.stages, c.memory_gib);
        if (j.contains("violations") && !j["violations"].empty()) {
          ++violating;
          for (const auto& v : j["violations"])
            counts[v[0].get<std::string>()] = counts[v[0]].get<int>() + 1;
          j["plan_tool"] =
              pr::plan_tool_command(c, lengths_path("sweep-" + std::to_string(c.length)));
          std::cerr << "sweep violation: " << j.dump() << "\n";
        }
        if (j["seconds"].get<double>() > slowest["seconds"].get<double>()) slowest = j;
        by_index[o.index] = j;
      });
  for (auto& row : by_index) rows.push_back(row);
  return {{"cases", cases.size()},        {"timeout_s", args.sweep_timeout_s},
          {"violating_cases", violating}, {"violations", counts},
          {"slowest", slowest},           {"rows", rows}};
}

// One instance in this process, described in full: what a reported index stands for.
int run_one(const Args& args) {
  const pr::Instance in = pr::draw_instance(args.seed, args.index);
  nlohmann::json j = {{"index", in.index},
                      {"mode", pr::to_string(in.mode)},
                      {"method", ip::to_string(in.method)},
                      {"model", in.model},
                      {"hardware", in.hardware},
                      {"layers_per_stage", in.layers_per_stage},
                      {"lengths", in.lengths},
                      {"lengths_drawn_from", in.lengths_source},
                      {"memory_gib", in.memory_gib}};
  if (in.mode == pr::Mode::kEppSearch)
    j["plan_tool"] = pr::plan_tool_command(
        in, lengths_path(std::to_string(args.seed) + "-" + std::to_string(args.index)));
  else
    j["setting"] = ip::describe(in.method, in.setting);
  const nlohmann::json result = nlohmann::json::parse(evaluate_instance(args.seed, args.index));
  j["result"] = result;
  std::cout << j.dump(2) << "\n";
  return result["violations"].empty() ? 0 : 1;
}

int run(int argc, char** argv) {
  Args args;
  CLI::App app{
      "Plans random steps and checks every plan: each token in exactly one slice, slice order "
      "kept, a valid schedule that simulates without deadlock, memory within the budget when "
      "the plan says feasible. --sweep times EPP on single sequences up to the memory limit."};
  app.name("infinipipe-properties");
  app.add_option("--seed", args.seed, "seed of the random plans")->capture_default_str();
  app.add_option("--plans", args.plans, "random plans to check")->capture_default_str();
  app.add_option("--threads", args.threads, "worker processes")->capture_default_str();
  app.add_option("--timeout", args.timeout_s,
                 "seconds a random plan may take before it counts as timed out")
      ->capture_default_str();
  app.add_option("--index", args.index, "plan and check only this random plan, and describe it");
  app.add_flag("--sweep", args.sweep, "the planning-time sweep instead of random plans");
  app.add_option("--sweep-timeout", args.sweep_timeout_s, "seconds a sweep case may take")
      ->capture_default_str();
  app.add_flag("--smoke", args.smoke, "a thousand random plans and a tiny sweep (CI)");
  app.add_option("--reproducers", args.reproducers, "violations to describe in full")
      ->capture_default_str();
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp&) {
    std::cout << app.help();
    return 0;
  }
  ip::check(args.threads >= 1, "--threads must be at least 1");
  ip::check(args.plans >= 1, "--plans must be at least 1");
  ip::check(args.timeout_s > 0 && args.sweep_timeout_s > 0, "timeouts must be positive");
  if (args.index >= 0) return run_one(args);

  nlohmann::json summary;
  if (args.smoke) {
    summary["volume"] = run_volume(args, 1000);
    summary["sweep"] = run_sweep(args, true);
  } else if (args.sweep) {
    summary["sweep"] = run_sweep(args, false);
  } else {
    summary["volume"] = run_volume(args, args.plans);
  }
  std::cout << summary.dump(2) << "\n";
  const bool clean = (!summary.contains("volume") || summary["volume"]["violating_plans"] == 0) &&
                     (!summary.contains("sweep") || summary["sweep"]["violating_cases"] == 0);
  return clean ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const CLI::ParseError& e) {
    std::cerr << "infinipipe-properties: error: " << e.what() << "\n";
  } catch (const std::exception& e) {
    std::cerr << "infinipipe-properties: error: " << e.what() << "\n";
  }
  return 2;
}
