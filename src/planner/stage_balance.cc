#include "infinipipe/planner/stage_balance.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <tuple>
#include <utility>

#include "infinipipe/core/chunk.h"
#include "infinipipe/core/error.h"
#include "infinipipe/cost/model_shape.h"

namespace infinipipe {

std::vector<double> StageWork::stage_s(const std::vector<int>& split) const {
  check(split.size() == layer_s.size() && fixed_s.size() == layer_s.size(),
        "stage work: a split of " + std::to_string(split.size()) + " stages for work of " +
            std::to_string(layer_s.size()));
  std::vector<double> out;
  for (size_t p = 0; p < split.size(); ++p) out.push_back(split[p] * layer_s[p] + fixed_s[p]);
  return out;
}

double StageWork::busiest_s(const std::vector<int>& split) const {
  const std::vector<double> s = stage_s(split);
  return *std::max_element(s.begin(), s.end());
}

namespace {

// One chunk holding every sequence of the step whole.
Chunk whole_step(const std::vector<int64_t>& lengths) {
  Chunk chunk;
  for (size_t i = 0; i < lengths.size(); ++i) {
    check(lengths[i] >= 1, "stage work: sequence " + std::to_string(i) + " has length " +
                               std::to_string(lengths[i]));
    chunk.slices.push_back({static_cast<int>(i), 0, lengths[i], lengths[i]});
  }
  return chunk;
}

void add_step(StageWork& work, const std::vector<int64_t>& lengths, const CostModel& cost) {
  const Chunk chunk = whole_step(lengths);
  const int stages = cost.num_stages();
  const double layer = cost.layer_forward_time(chunk) + cost.layer_backward_time(chunk);
  const double head = cost.head_time(chunk);
  for (int p = 0; p < stages; ++p) {
    // Forward and backward all-to-alls, as many each (cost_model.h).
    work.layer_s[p] += layer + 2 * cost.layer_alltoall_time(chunk, p);
    if (p == 0)
      work.fixed_s[p] += cost.embedding_forward_time(chunk) + cost.embedding_backward_time(chunk);
    if (cost.ideal_even_head())
      work.fixed_s[p] += head / stages;
    else if (p == stages - 1)
      work.fixed_s[p] += head;
  }
}

double mean_busiest(const std::vector<StageWork>& per_step, const std::vector<int>& split) {
  double total = 0;
  for (const StageWork& w : per_step) total += w.busiest_s(split);
  return total / double(per_step.size());
}

std::vector<StageWork> per_step_work(const std::vector<std::vector<int64_t>>& steps,
                                     const CostModel& cost) {
  std::vector<StageWork> out;
  for (const auto& step : steps) out.push_back(stage_work({step}, cost));
  return out;
}

}  // namespace

StageWork stage_work(const std::vector<std::vector<int64_t>>& steps, const CostModel& cost) {
  check(!steps.empty(), "stage work: no steps");
  StageWork work;
  work.layer_s.assign(cost.num_stages(), 0.0);
  work.fixed_s.assign(cost.num_stages(), 0.0);
  for (const auto& step : steps) {
    check(!step.empty(), "stage work: a step with no sequences");
    add_step(work, step, cost);
  }
  return work;
}

std::vector<int> balanced_layer_split(const StageWork& work, int layers) {
  const int stages = static_cast<int>(work.layer_s.size());
  check(stages >= 1 && work.fixed_s.size() == work.layer_s.size(),
        "balanced layer split: malformed stage work");
  check(layers >= stages, "balanced layer split: " + std::to_string(layers) + " layers over " +
                              std::to_string(stages) + " stages; every stage needs one");
  for (int p = 0; p < stages; ++p)
    check(std::isfinite(work.layer_s[p]) && work.layer_s[p] >= 0 &&
              std::isfinite(work.fixed_s[p]) && work.fixed_s[p] >= 0,
          "balanced layer split: stage " + std::to_string(p) + "'s work is not finite and >= 0");
  std::vector<int> split(stages, 1);
  for (int given = stages; given < layers; ++given) {
    int best = stages - 1;
    double best_load = (split[best] + 1) * work.layer_s[best] + work.fixed_s[best];
    for (int p = stages - 2; p >= 0; --p) {  // strictly less: ties stay with the later stage
      const double load = (split[p] + 1) * work.layer_s[p] + work.fixed_s[p];
      if (load < best_load) best = p, best_load = load;
    }
    ++split[best];
  }
  return split;
}

std::vector<int> balanced_layer_split(const std::vector<std::vector<int64_t>>& steps,
                                      const CostModel& cost) {
  return balanced_layer_split(stage_work(steps, cost), cost.shape().layers);
}

CostModel with_layer_split(const CostModel& cost, const std::vector<int>& split) {
  // The what-ifs and the trainer's mode travel with the split: a spread-head trainer's replicas
  // cost memory and a sync on every split.
  CostModel out(cost.shape(), split, cost.coefficients(), cost.layout());
  if (cost.ideal_even_head()) out = out.with_ideal_even_head();
  if (cost.head_replicas()) out = out.with_head_replicas();
  return out;
}

std::vector<LayerSplitCandidate> layer_split_candidates(
    const std::vector<std::vector<int64_t>>& steps, const CostModel& cost) {
  const int stages = cost.num_stages();
  const std::vector<StageWork> per_step = per_step_work(steps, cost);
  const std::vector<int> balanced = balanced_layer_split(steps, cost);
  std::vector<LayerSplitCandidate> out;
  auto add = [&](const std::string& name, const std::vector<int>& split) {
    if (std::any_of(split.begin(), split.end(), [](int l) { return l < 1; })) return;
    for (const LayerSplitCandidate& c : out)
      if (c.split == split) return;
    LayerSplitCandidate c;
    c.name = name;
    c.split = split;
    c.bound_s = mean_busiest(per_step, split);
    out.push_back(c);
  };
  add("balanced", balanced);
  add("even", even_layer_split(cost.shape().layers, stages));
  if (stages >= 2) {
    std::vector<int> first = balanced;
    --first[0], ++first[1];
    add("balanced, first stage -1", first);
    std::vector<int> last = balanced;
    --last[stages - 1], ++last[stages - 2];
    add("balanced, last stage -1", last);
  }
  return out;
}

LayerSplitChoice choose_layer_split(const std::vector<std::vector<int64_t>>& steps,
                                    const CostModel& cost, const PlannerOptions& options) {
  check(!steps.empty(), "choose layer split: no steps");
  LayerSplitChoice choice;
  choice.candidates = layer_split_candidates(steps, cost);
  std::vector<size_t> order(choice.candidates.size());
  std::iota(order.begin(), order.end(), size_t{0});
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    return choice.candidates[a].bound_s < choice.candidates[b].bound_s;
  });
  const int n = static_cast<int>(steps.size());
  int best = -1;
  auto better = [&](const LayerSplitCandidate& c, const LayerSplitCandidate& than, size_t ci,
                    size_t ti) {
    return std::make_tuple(-c.feasible_steps, c.feasible_steps == n ? c.mean_step_s : 0.0, ci) <
           std::make_tuple(-than.feasible_steps, than.feasible_steps == n ? than.mean_step_s : 0.0,
                           ti);
  };
  for (size_t i : order) {
    LayerSplitCandidate& c = choice.candidates[i];
    if (best >= 0) {
      const LayerSplitCandidate& b = choice.candidates[best];
      // Cannot win. The bound keeps the head on the last stage: with the spread head it bounds
      // nothing, and every split is planned.
      if (!options.spread_head && b.feasible_steps == n && c.bound_s >= b.mean_step_s) continue;
    }
    const CostModel trial = with_layer_split(cost, c.split);
    c.planned = true;
    double total = 0;
    std::vector<PlanResult> plans;
    for (const auto& step : steps) {
      plans.push_back(plan_epp(step, trial, options));
      const PlanResult& r = plans.back();
      if (!r.feasible) {
        if (c.reason.empty()) c.reason = r.reason;
        continue;
      }
      ++c.feasible_steps;
      total += r.plan.step_time_s;
    }
    if (c.feasible_steps == n) c.mean_step_s = total / n;
    if (best < 0 || better(c, choice.candidates[best], i, static_cast<size_t>(best))) {
      best = static_cast<int>(i);
      choice.plans = std::move(plans);
    }
  }
  choice.split = choice.candidates[best].split;
  choice.name = choice.candidates[best].name;
  return choice;
}

}  // namespace infinipipe
