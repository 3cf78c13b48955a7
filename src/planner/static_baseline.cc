#include "infinipipe/planner/static_baseline.h"

#include <algorithm>

#include "infinipipe/chunking/sequence_processor.h"
#include "infinipipe/core/error.h"

namespace infinipipe {

namespace {

int64_t round_up(int64_t value, int64_t multiple) {
  return (value + multiple - 1) / multiple * multiple;
}

std::vector<int64_t> candidate_caps(int64_t longest) {
  // A user sizes micro-batches from the longest sequence they expect: exactly it, or a few
  // times it to pack more short sequences per micro-batch.
  const double factors[] = {1, 1.25, 1.5, 2, 3, 4};
  std::vector<int64_t> caps;
  for (double f : factors) {
    const int64_t cap =
        round_up(static_cast<int64_t>(f * static_cast<double>(longest) + 0.5), 1024);
    if (caps.empty() || caps.back() != cap) caps.push_back(cap);
  }
  return caps;
}

}  // namespace

std::vector<Setting> candidate_settings(Method method, int64_t longest) {
  check(longest > 0, "the longest sequence must be positive, got " + std::to_string(longest));
  std::vector<Setting> out;
  switch (method) {
    case Method::kBatch:
      for (int64_t cap : candidate_caps(longest)) {
        Setting s;
        s.token_cap = cap;
        out.push_back(s);
      }
      break;
    case Method::kSeq1F1B:
      for (int64_t cap : candidate_caps(longest))
        for (int k : {1, 2, 4, 8, 16, 32}) {
          Setting s;
          s.token_cap = cap;
          s.k = k;
          out.push_back(s);
        }
      break;
    case Method::kChunkFlow:
      for (int64_t size = 1024; size <= 65536; size *= 2) {
        Setting s;
        s.chunk_tokens = size;
        out.push_back(s);
      }
      break;
    case Method::kEpp:
      throw Error("EPP has no static settings: it chooses K per step");
  }
  return out;
}

BaselineComparison compare_baseline(Method method, const std::vector<std::vector<int64_t>>& steps,
                                    const CostModel& cost, const PlannerOptions& options) {
  check(!steps.empty(), "no steps to compare the baseline on");
  int64_t longest = 0;
  for (const auto& step : steps) {
    check_lengths(step);
    longest = std::max(longest, *std::max_element(step.begin(), step.end()));
  }
  const size_t n = steps.size();
  BaselineComparison out;
  out.method = method;
  out.per_step_best.resize(n);
  std::vector<std::string> step_reason(n);

  for (const Setting& candidate : candidate_settings(method, longest)) {
    ++out.candidates_tried;
    // Each step's own smallest recompute count; a step that does not fit rules the candidate
    // out as a static setting but not the other steps' per-step bests.
    std::vector<PlanResult> own(n);
    bool fits_all = true;
    std::string why;
    int worst_need = 0;
    for (size_t i = 0; i < n; ++i) {
      own[i] = plan_with_setting(method, steps[i], candidate, cost, options);
      if (!own[i].feasible) {
        fits_all = false;
        step_reason[i] = own[i].reason;
        if (why.empty()) why = "step " + std::to_string(i) + ": " + own[i].reason;
        continue;
      }
      worst_need = std::max(worst_need, own[i].plan.setting.uniform_recompute);
      PlanResult& best = out.per_step_best[i];
      if (!best.feasible || own[i].plan.step_time_s < best.plan.step_time_s) best = own[i];
    }
    if (!fits_all) {
      if (!out.static_feasible) out.static_reason = why;
      continue;
    }
    Setting fixed = candidate;
    fixed.uniform_recompute = worst_need;
    std::vector<PlanResult> plans(n);
    double total = 0;
    bool ok = true;
    for (size_t i = 0; i < n && ok; ++i) {
      // More recompute only lowers memory, so a step that fits with its own count fits with the
      // worst step's; only steps that needed less are planned again.
      if (own[i].plan.setting.uniform_recompute == worst_need) {
        plans[i] = std::move(own[i]);
        plans[i].plan.setting = fixed;
      } else {
        plans[i] = plan_with_setting(method, steps[i], fixed, cost, options);
      }
      if (!plans[i].feasible) {
        ok = false;
        if (!out.static_feasible)
          out.static_reason = "step " + std::to_string(i) + ": " + plans[i].reason;
        break;
      }
      total += plans[i].plan.step_time_s;
    }
    if (!ok) continue;
    if (!out.static_feasible || total < out.static_total_s) {
      out.static_feasible = true;
      out.static_reason.clear();
      out.static_setting = fixed;
      out.static_plans = std::move(plans);
      out.static_total_s = total;
    }
  }
  // A step planned on its own would size its caps from its own longest sequence: those
  // candidates make the per-step best more generous still.
  const std::vector<Setting> global = candidate_settings(method, longest);
  for (size_t i = 0; i < n; ++i) {
    const int64_t own_longest = *std::max_element(steps[i].begin(), steps[i].end());
    for (const Setting& candidate : candidate_settings(method, own_longest)) {
      if (std::find(global.begin(), global.end(), candidate) != global.end()) continue;
      PlanResult r = plan_with_setting(method, steps[i], candidate, cost, options);
      if (!r.feasible) {
        step_reason[i] = r.reason;
        continue;
      }
      PlanResult& best = out.per_step_best[i];
      if (!best.feasible || r.plan.step_time_s < best.plan.step_time_s) best = std::move(r);
    }
  }
  if (!out.static_feasible)
    out.static_reason = "none of the " + std::to_string(out.candidates_tried) + " " +
                        to_string(method) +
                        " settings fits every step; the last tried: " + out.static_reason;
  for (size_t i = 0; i < n; ++i)
    if (!out.per_step_best[i].feasible)
      out.per_step_best[i].reason = "no " + std::string(to_string(method)) + " setting fits step " +
                                    std::to_string(i) + "; last: " + step_reason[i];
  return out;
}

}  // namespace infinipipe
