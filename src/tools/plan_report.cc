#include "plan_report.h"

#include <algorithm>
#include <cstdio>
#include <numeric>
#include <string>
#include <utility>

#include "infinipipe/recompute/recompute_planner.h"
#include "infinipipe/sim/simulator.h"

namespace infinipipe::tools {
namespace ip = infinipipe;

namespace {

std::vector<double> to_gib(const std::vector<double>& bytes) {
  std::vector<double> out;
  for (double b : bytes) out.push_back(b / kGiB);
  return out;
}

// How many chunks' heads each stage runs (spread head), or nothing when no chunk has an H.
std::vector<int> heads_per_stage(const std::vector<int>& head_stages, int num_stages) {
  if (std::all_of(head_stages.begin(), head_stages.end(), [](int o) { return o == -1; })) return {};
  std::vector<int> counts(num_stages, 0);
  for (int o : head_stages)
    if (o >= 0) ++counts[o];
  return counts;
}

}  // namespace

nlohmann::json checkpoint_comparison(const ip::Plan& plan, const ip::CostModel& cost, double budget,
                                     double time_limit_s) {
  nlohmann::json out = nlohmann::json::array();
  const std::pair<ip::RecomputeMethod, const char*> methods[] = {
      {ip::RecomputeMethod::kStageAware, "tied cbc"},
      {ip::RecomputeMethod::kStageAwareGreedy, "tied greedy"},
      {ip::RecomputeMethod::kUntiedGreedy, "untied greedy"},
      {ip::RecomputeMethod::kUniform, "uniform"}};
  for (const auto& [method, name] : methods) {
    // No CBC when its time limit is 0: CBC's root LP ignores the limit and can take seconds.
    if (method == ip::RecomputeMethod::kStageAware && time_limit_s <= 0) continue;
    ip::RecomputeOptions o;
    o.method = method;
    o.memory_budget_bytes = budget;
    o.time_limit_s = time_limit_s;
    const ip::RecomputeResult ck = ip::plan_recompute(plan.schedule, plan.chunks, cost, o);
    nlohmann::json entry = {{"method", name}, {"feasible", ck.feasible}};
    if (ck.feasible) {
      ip::SimOptions sim_options;
      sim_options.memory_budget_bytes = budget;
      sim_options.record_events = false;
      const ip::SimResult sim =
          ip::simulate(plan.schedule, plan.chunks, cost, ck.recompute, sim_options);
      entry["solver"] = ck.solver;
      entry["recompute_s"] = ck.recompute_s;
      entry["step_time_s"] = sim.step_time_s;
    }
    out.push_back(entry);
  }
  return out;
}

nlohmann::json row_json(const Row& row, const std::vector<int64_t>& lengths, double budget) {
  nlohmann::json j;
  j["step"] = row.step;
  j["method"] = ip::to_string(row.method);
  j["static"] = row.is_static;
  j["feasible"] = row.result->feasible;
  j["tokens"] = std::accumulate(lengths.begin(), lengths.end(), int64_t{0});
  j["num_sequences"] = lengths.size();
  j["budget_gib"] = budget / kGiB;
  if (!row.result->feasible) {
    j["reason"] = row.result->reason;
    return j;
  }
  const ip::Plan& plan = row.result->plan;
  j["setting"] = ip::setting_json(plan);
  j["setting_text"] = ip::describe(plan.method, plan.setting);
  j["step_time_s"] = plan.step_time_s;
  j["bubble_fraction"] = plan.bubble_fraction;
  j["recompute_s"] = plan.recompute_s;
  j["recompute_s_per_stage"] = plan.stage_recompute_s;
  j["busy_s"] = plan.busy_s;
  j["peak_memory_gib"] = to_gib(plan.peak_memory_bytes);
  j["num_chunks"] = plan.chunks.size();
  nlohmann::json kinds = {{"packed", 0}, {"split", 0}, {"hybrid", 0}};
  for (const ip::Chunk& c : plan.chunks)
    kinds[ip::to_string(c.kind())] = kinds[ip::to_string(c.kind())].get<int>() + 1;
  j["chunks_by_kind"] = kinds;
  j["num_waves"] = plan.waves.size();
  j["waves_overlap"] = ip::waves_overlap(plan.schedule, plan.waves);
  j["zero_bubble"] = ip::to_string(plan.setting.zero_bubble);
  const std::vector<int> heads = plan.schedule.head_stages(static_cast<int>(plan.chunks.size()));
  const std::vector<int> per_stage = heads_per_stage(heads, plan.schedule.num_stages());
  j["spread_head"] = per_stage.size() > 0;
  if (!per_stage.empty()) {
    j["heads_per_stage"] = per_stage;
    j["head_stages"] = heads;
  }
  j["plan_ms"] = plan.plan_ms;
  j["planner"] = plan.planner;
  j["checkpoint_solver"] = plan.checkpoint_solver;
  j["hash"] = plan.hash();
  return j;
}

std::string fixed(double value, int digits) {
  char buffer[64];
  std::snprintf(buffer, sizeof buffer, "%.*f", digits, value);
  return buffer;
}

std::string list(const std::vector<double>& values, int digits) {
  std::string out;
  for (double v : values) out += (out.empty() ? "" : " ") + fixed(v, digits);
  return out;
}

void print_row(std::ostream& out, const Row& row, double budget) {
  std::string label = ip::to_string(row.method);
  if (row.method != ip::Method::kEpp) label += row.is_static ? " (static)" : " (per-step best)";
  out << "  " << label << "\n";
  if (!row.result->feasible) {
    out << "      infeasible: " << row.result->reason << "\n";
    return;
  }
  const ip::Plan& plan = row.result->plan;
  int packed = 0, split = 0, hybrid = 0;
  for (const ip::Chunk& c : plan.chunks) {
    switch (c.kind()) {
      case ip::ChunkKind::kPacked:
        ++packed;
        break;
      case ip::ChunkKind::kSplit:
        ++split;
        break;
      case ip::ChunkKind::kHybrid:
        ++hybrid;
        break;
    }
  }
  out << "      setting    " << ip::describe(plan.method, plan.setting) << "\n"
      << "      step time  " << fixed(plan.step_time_s, 3) << " s, bubble "
      << fixed(100 * plan.bubble_fraction, 1) << "%, recompute " << fixed(plan.recompute_s, 3)
      << " s (" << plan.checkpoint_solver << "), planned in " << fixed(plan.plan_ms, 1) << " ms\n"
      << "      chunks     " << plan.chunks.size() << " (packed " << packed << ", split " << split
      << ", hybrid " << hybrid << "), waves " << plan.waves.size()
      << (ip::waves_overlap(plan.schedule, plan.waves) ? " (overlapped)" : "") << "\n";
  const std::vector<int> heads = heads_per_stage(
      plan.schedule.head_stages(static_cast<int>(plan.chunks.size())), plan.schedule.num_stages());
  if (!heads.empty()) {
    out << "      heads      per stage";
    for (int count : heads) out << " " << count;
    out << " (spread head)\n";
  }
  out << "      planner    cpu " << fixed(plan.planner.cpu_ms, 1) << " ms, candidates "
      << plan.planner.candidates << " (tried " << plan.planner.tried << ", pruned "
      << plan.planner.pruned << ", recomputed " << plan.planner.recomputed << "), bound "
      << fixed(plan.planner.step_time_lower_bound_s, 3) << " s (predicted/bound "
      << fixed(plan.planner.predicted_over_bound, 3) << ")\n"
      << "      recompute s per stage  " << list(plan.stage_recompute_s, 3) << "\n"
      << "      peak GiB per stage     " << list(to_gib(plan.peak_memory_bytes), 1) << "  (budget "
      << fixed(budget / kGiB, 1) << ")\n";
  const auto& a2a = plan.stage_alltoall_s;
  if (std::any_of(a2a.begin(), a2a.end(), [](double s) { return s > 0; }))
    out << "      all-to-all s per stage " << list(a2a, 3) << "\n";
  const auto& sync = plan.stage_gradient_sync_s;
  if (std::any_of(sync.begin(), sync.end(), [](double s) { return s > 0; }))
    out << "      gradient sync s/stage  " << list(sync, 3) << "\n";
}

nlohmann::json candidates_json(const ip::LayerSplitChoice& choice) {
  nlohmann::json out = nlohmann::json::array();
  for (const ip::LayerSplitCandidate& c : choice.candidates) {
    nlohmann::json j = {{"name", c.name},
                        {"layers_per_stage", c.split},
                        {"bound_s", c.bound_s},
                        {"planned", c.planned},
                        {"chosen", c.split == choice.split}};
    if (c.planned) {
      j["feasible_steps"] = c.feasible_steps;
      if (!c.reason.empty())
        j["reason"] = c.reason;
      else
        j["mean_step_s"] = c.mean_step_s;
    }
    out.push_back(j);
  }
  return out;
}

void print_candidates(std::ostream& out, const ip::LayerSplitChoice& choice) {
  out << "layer splits weighed (EPP over the steps; bound: the busiest stage's compute)\n";
  for (const ip::LayerSplitCandidate& c : choice.candidates) {
    out << "  " << (c.split == choice.split ? "* " : "  ") << c.name << ":";
    for (int l : c.split) out << " " << l;
    out << ", bound " << fixed(c.bound_s, 3) << " s";
    if (!c.planned)
      out << ", not planned (the bound is no better than the best plan)";
    else if (!c.reason.empty())
      out << ", feasible on " << c.feasible_steps << " steps";
    else
      out << ", mean step " << fixed(c.mean_step_s, 3) << " s";
    out << "\n";
  }
}

nlohmann::json v_shape_json(const VShapePlan& v) {
  if (!v.fits) return {{"fits", false}, {"reason", v.reason}, {"candidates", v.candidates}};
  return {{"fits", true},
          {"step_time_s", v.step_time_s},
          {"zero_bubble", ip::to_string(v.zero_bubble)},
          {"extra_warmup", v.extra_warmup},
          {"layers_per_stage", v.layers_per_stage},
          {"rank_peak_memory_gib", to_gib(v.sim.rank_peak_memory_bytes)},
          {"bubble_fraction", v.sim.mean_bubble_fraction()},
          {"candidates", v.candidates}};
}

void print_v_shape(std::ostream& out, const VShapePlan& v) {
  if (!v.fits) {
    out << "      V shape    does not fit without recompute: " << v.reason << "\n";
    return;
  }
  out << "      V shape    step time " << fixed(v.step_time_s, 3) << " s, zero bubble "
      << ip::to_string(v.zero_bubble) << ", +" << v.extra_warmup << " warm-up, rank peaks GiB "
      << list(to_gib(v.sim.rank_peak_memory_bytes), 1) << "\n";
}

nlohmann::json offload_json(const OffloadPlan& o) {
  if (!o.fits) return {{"fits", false}, {"reason", o.reason}, {"candidates", o.candidates}};
  return {{"fits", true},
          {"step_time_s", o.step_time_s},
          {"resident", o.offload.resident},
          {"prefetch", o.offload.prefetch},
          {"host_link_bytes_per_s", o.offload.bytes_per_s},
          {"stages_per_host_link", o.offload.stages_per_link},
          {"recompute_kept", o.recompute_kept},
          {"recompute_s", o.sim.total_recompute_s()},
          {"offload_gib_each_way", to_gib(o.sim.offload_bytes)},
          {"offload_wait_s", o.sim.offload_wait_s},
          {"busy_s", o.sim.busy_s},
          {"peak_memory_gib", to_gib(o.sim.peak_memory_bytes)},
          {"candidates", o.candidates}};
}

void print_offload(std::ostream& out, const OffloadPlan& o) {
  if (!o.fits) {
    out << "      offload    does not fit: " << o.reason << "\n";
    return;
  }
  double bytes = 0, wait = 0;
  for (double b : o.sim.offload_bytes) bytes += b;
  for (double w : o.sim.offload_wait_s) wait += w;
  std::string resident;
  for (int r : o.offload.resident)
    resident += (resident.empty() ? "" : " ") + (r < 0 ? std::string("all") : std::to_string(r));
  out << "      offload    step time " << fixed(o.step_time_s, 3) << " s, resident " << resident
      << ", prefetch " << o.offload.prefetch << ", " << fixed(bytes / (1ull << 30), 1)
      << " GiB each way at " << fixed(o.offload.bytes_per_s / 1e9, 0) << " GB/s"
      << (o.offload.stages_per_link > 1
              ? " (" + std::to_string(o.offload.stages_per_link) + " stages a link)"
              : std::string())
      << ", waits " << fixed(wait, 3) << " s"
      << (o.recompute_kept ? ", plan's recompute" : ", no recompute") << "\n";
}

namespace {

// A what-if's mean step over the steps, taking it only where it fits and is faster than EPP.
template <class WhatIf>
void print_mean_where_faster(std::ostream& out, const char* name,
                             const std::vector<WhatIf>& what_if,
                             const std::vector<PlanResult>& epp) {
  double total = 0;
  int kept = 0;
  for (size_t i = 0; i < what_if.size(); ++i) {
    if (!epp[i].feasible) return;
    const bool faster = what_if[i].fits && what_if[i].step_time_s < epp[i].plan.step_time_s;
    total += faster ? what_if[i].step_time_s : epp[i].plan.step_time_s;
    kept += faster ? 1 : 0;
  }
  out << "  epp, " << name << " where faster " << fixed(total / what_if.size(), 3) << " s (on "
      << kept << " of " << what_if.size() << " steps)\n";
}

}  // namespace

void print_offload_mean(std::ostream& out, const std::vector<OffloadPlan>& o,
                        const std::vector<PlanResult>& epp) {
  print_mean_where_faster(out, "offload", o, epp);
}

void print_v_shape_mean(std::ostream& out, const std::vector<VShapePlan>& v,
                        const std::vector<PlanResult>& epp) {
  print_mean_where_faster(out, "V shape", v, epp);
}

}  // namespace infinipipe::tools
