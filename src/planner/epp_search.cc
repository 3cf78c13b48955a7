// Over 400 lines for a reason: one search, whose stages (candidates, best first, recompute,
// waves, the winner's tapers) share its frontier; candidate*.cc and recompute_choice.cc hold
// what each candidate gets.
// EPP's per-step search (planner.h describes it; docs/design.md, "The EPP search"): every knob
// setting becomes a candidate with cheap bounds, candidates are looked at best first until none
// can beat the best plan found, and the winner gets drain tapers and the exact tied program.
#include <algorithm>
#include <cstdio>
#include <queue>

#include "candidate.h"
#include "candidate_plans.h"
#include "infinipipe/core/error.h"
#include "infinipipe/core/log.h"
#include "infinipipe/core/memory_text.h"
#include "infinipipe/planner/planner.h"
#include "infinipipe/planner/static_baseline.h"
#include "planner_support.h"
#include "recompute_choice.h"
#include "spread_plan.h"
#include "wave_grouping.h"
#include "zero_bubble_plan.h"

namespace infinipipe {

using namespace planning;

namespace {

Plan plan_of(Candidate cand, const std::vector<int64_t>& lengths, const CostModel& cost) {
  return make_plan(Method::kEpp, cand.setting, lengths, std::move(cand.chunks),
                   std::move(cand.waves), std::move(cand.schedule),
                   std::move(cand.checkpoint.recompute), cost, cand.sim, cand.checkpoint.solver);
}

// With the spread head or zero bubble tried, `runners_up` (candidates that fit, besides the
// winner) get them too and the fastest plan wins (ties: the winner, then the faster runner-up):
// the search ranks candidates with the head on the last stage and without W actions, and a
// chunking that loses there can win once its heads are spread or its backwards split.
PlanResult finish_epp(Candidate best, const std::vector<int64_t>& lengths, const CostModel& cost,
                      const PlannerOptions& options, const PlanningCall& call,
                      std::vector<Candidate> runners_up = {}) {
  PlanResult result;
  result.feasible = true;
  result.plan = plan_of(std::move(best), lengths, cost);
  // The recompute programs the search weighs (search_recompute), CBC's when allowed.
  std::vector<RecomputeMethod> methods = {RecomputeMethod::kStageAwareGreedy,
                                          RecomputeMethod::kUntiedGreedy};
  if (options.recompute_time_limit_s > 0) methods.push_back(RecomputeMethod::kStageAware);
  const ZeroBubbleChoice zero_bubble = zero_bubble_choice(options);
  auto finish = [&](Plan& plan) {
    spread_heads_if_faster(plan, cost, options, methods);
    if (zero_bubble == ZeroBubbleChoice::kTry)
      split_backwards_if_faster(plan, cost, options, methods);
  };
  finish(result.plan);
  for (Candidate& cand : runners_up) {
    if (same_chunks(cand.chunks, result.plan.chunks) && cand.waves == result.plan.waves) continue;
    check_not_cancelled(options);
    Plan other = plan_of(std::move(cand), lengths, cost);
    finish(other);
    if (other.step_time_s < result.plan.step_time_s) result.plan = std::move(other);
  }
  // Forced (ablations), the mode goes on the finished plan whatever the time.
  std::string reason;
  if (zero_bubble == ZeroBubbleChoice::kAlways &&
      !split_backwards(result.plan, cost, options, methods, parse_zero_bubble(options.zero_bubble),
                       true, reason))
    return infeasible("EPP's plan " + describe(Method::kEpp, result.plan.setting) + ": " + reason);
  call.finish(result.plan, cost);
  return result;
}

// With the spread head or zero bubble tried: how many runners-up get them besides the winner
// (the fastest that fit as the search planned them), and how many candidates the search left
// unsimulated are simulated for them (best bound first): the search's bounds assume neither.
constexpr size_t kFinishRunnersUp = 6;
constexpr int kFinishUnsearched = 6;

// Whether finish_epp gives the runners-up the finishing touches too.
bool finishes_runners_up(const PlannerOptions& options) {
  return options.spread_head || zero_bubble_choice(options) == ZeroBubbleChoice::kTry;
}

}  // namespace

PlanResult plan_epp_at(const std::vector<int64_t>& lengths, const Setting& setting,
                       const CostModel& cost, const PlannerOptions& options) {
  PlanningCall call;
  SolveMemo memo;
  search_work() = 0;
  call.report.candidates = call.report.tried = 1;  // the one setting
  check_inputs(lengths, cost, options);
  Candidate cand;
  cand.setting = setting;
  try {
    cand.chunks = setting_chunks(Method::kEpp, lengths, setting, cost);
  } catch (const Error& e) {
    return infeasible(label(setting) + ": " + e.what());
  }
  pipeline_bound(cand, cost, options.num_stages, options.memory_budget_bytes);
  one_wave_without_recompute(cand, cost, options);
  if (cand.sim.over_budget) {
    std::string reason;
    bool grouped = false;
    call.report.recomputed = 1;
    if (!plan_with_recompute(cand, kInfinity, true, cost, options, reason, grouped))
      return infeasible(reason);
    choose_recompute(cand, {RecomputeMethod::kUntiedGreedy, RecomputeMethod::kStageAware}, cost,
                     options);
  }
  call.report.work = search_work();
  return finish_epp(std::move(cand), lengths, cost, options, call);
}

// The checkpointing programs of one wave grow with the chunks squared (a single long sequence's
// slices are all in flight on the first stage), and so does the recompute choice: for one
// 2,097,152-token sequence (`infinipipe-plan --model tiny --hardware cpu --stages 2 --memory-gib
// 64 --method epp`) a candidate of 8,192 chunks took 6.4 s, one of 4,096 1.35 s, and one
// 4,194,304-token sequence's 16,384-chunk candidates ran past the property sweep's 30 s.
// Candidates with more chunks than this get no recompute (nor waves) unless none has fewer. The
// default comparison's candidates (`--distribution wikipedia --batch 512 --context 98304 --model
// llama-13b --stages 8 --steps 5`) have at most 1,493 chunks, plan_fingerprints' at most 3,777
// (extreme, batch 128, context 32768).
constexpr size_t kMaxRecomputeChunks = 4096;

namespace {

// Whether no chunking of the step fits without recompute: the longest sequence's activations on
// some stage, every layer kept, are over the budget with the stage's model state. Whatever the
// chunks, when the forward of its last slice ends every chunk holding a slice of it is in flight
// there (its backward starts at that slice), and activation bytes grow linearly with tokens, so
// those chunks hold at least this much. The margin keeps rounding from calling a fit a miss.
bool nothing_fits_as_is(const std::vector<int64_t>& lengths, const CostModel& cost,
                        double budget_bytes) {
  const auto longest = std::max_element(lengths.begin(), lengths.end());
  const Chunk whole{{Slice{static_cast<int>(longest - lengths.begin()), 0, *longest, *longest}}};
  for (int p = 0; p < cost.num_stages(); ++p)
    if (cost.model_state_bytes(p) + cost.activation_bytes(whole, p, 0) > budget_bytes * (1 + 1e-6))
      return true;
  return false;
}

}  // namespace

PlanResult plan_epp(const std::vector<int64_t>& lengths, const CostModel& cost,
                    const PlannerOptions& options) {
  PlanningCall call;
  SolveMemo memo;
  search_work() = 0;
  check_inputs(lengths, cost, options);
  for (int64_t cap : options.chunk_token_caps)
    check(cap >= 0, "chunk token caps must be 0 (none) or positive, got " + std::to_string(cap));
  const int64_t longest = *std::max_element(lengths.begin(), lengths.end());
  // However finely it is sliced and checkpointed, a split sequence keeps its whole K/V buffer and,
  // during its backward, their gradients on every stage: fail at once (the sweep would grow with
  // the sequence for nothing).
  const int64_t longest_index = std::max_element(lengths.begin(), lengths.end()) - lengths.begin();
  for (int p = 0; p < cost.num_stages(); ++p) {
    const double floor = cost.model_state_bytes(p) + 2 * cost.kv_buffer_bytes(longest, p);
    if (floor > options.memory_budget_bytes)
      return infeasible(
          "sequence " + std::to_string(longest_index) + " (" + std::to_string(longest) +
          " tokens) cannot fit on stage " + std::to_string(p) +
          " however it is sliced: its K/V "
          "buffers and their gradients take " +
          gib_text(2 * cost.kv_buffer_bytes(longest, p)) + " on top of " +
          gib_text(cost.model_state_bytes(p)) + " of model state, against a budget of " +
          gib_text(options.memory_budget_bytes) +
          ". Use more pipeline stages (fewer layers per "
          "stage), a larger memory budget, or a shorter context.");
  }

  // Every knob setting: slice count K, chunk token cap, and packing that relaxes T_t (the
  // paper's) or not; packed chunks always lightest first. Settings that give the same chunks are
  // tried once.
  std::vector<Candidate> candidates;
  std::string reason;  // of the last candidate that failed
  // The candidate of `setting`: false, with the reason, when the setting cannot chunk the step.
  // time_target_relaxed: whether the sequence processor's packing relaxed T_t (below).
  EppChunkingReport packing;
  auto chunked = [&](const Setting& setting, Candidate& cand) {
    cand.setting = setting;
    packing = EppChunkingReport{};
    try {
      if (setting.chunker == Method::kEpp)
        cand.chunks = epp_chunks(lengths, epp_chunking(setting), cost, packing);
      else
        cand.chunks = setting_chunks(Method::kEpp, lengths, setting, cost);
      return true;
    } catch (const Error& e) {
      reason = label(setting) + ": " + e.what();
      return false;
    }
  };
  // A candidate over the budget as it is, with more chunks than any recompute is tried on, is
  // never simulated (below): never_fits_as_is says so at the first moment over the budget, and
  // its bound (the walk over every stage and chunk, up to 52,000 chunks on a uniform step) is
  // left unknown. unbounded[i]: candidate i's is.
  std::vector<char> unbounded;
  auto add = [&](Candidate cand) {
    const bool doomed =
        cand.chunks.size() > kMaxRecomputeChunks &&
        never_fits_as_is(cand.chunks, cost, options.num_stages, options.memory_budget_bytes);
    if (doomed)
      cand.never_fits_as_is = true;
    else
      pipeline_bound(cand, cost, options.num_stages, options.memory_budget_bytes);
    unbounded.push_back(doomed);
    candidates.push_back(std::move(cand));
  };
  // Capped settings that cannot give a plan are left unchunked while skip_unplannable is set
  // (below); `unchunked` counts them.
  int64_t total_tokens = 0;
  for (int64_t n : lengths) total_tokens += n;
  int unchunked = 0;
  auto make_candidates = [&](bool skip_unplannable) {
    for (int k = 1; k <= options.max_k && k <= longest; ++k) {
      check_not_cancelled(options);
      // Neighbouring large K differ by a few percent of slice length: every other K above 16,
      // every fourth above 32.
      if ((k > 16 && k % 2 != 0) || (k > 32 && k % 4 != 0)) continue;
      const SplitMesh mesh = cost_balanced_mesh(longest, k, cost);
      if (k > 1 && shortest_slice(mesh) < kMinSliceTokens) break;
      std::vector<int64_t> caps;
      for (int64_t cap : options.chunk_token_caps) {
        // A cap the mesh already respects changes nothing. Where it binds, K only moves the cuts
        // of the long sequences' late (short, uncapped) slices, so coarser steps of K do.
        const int64_t effective = cap >= mesh.token_cap ? 0 : cap;
        if (effective > 0 && !(k <= 6 || (k <= 16 && k % 2 == 0) || k % 4 == 0)) continue;
        if (std::find(caps.begin(), caps.end(), effective) == caps.end()) caps.push_back(effective);
      }
      for (int64_t cap : caps) {
        // Every chunk of a capped setting holds at most `cap` tokens. When nothing fits without
        // recompute and the cap gives more chunks than recompute is tried on, the setting's
        // candidate could only be dropped unplanned (below; on a uniform step 103 of 166, 1.6
        // million chunks made and freed): it is not chunked, unless no candidate is within the
        // limit (then the settings are chunked again, these included).
        if (skip_unplannable && cap > 0 &&
            (total_tokens + cap - 1) / cap > int64_t{kMaxRecomputeChunks}) {
          ++unchunked;
          continue;
        }
        bool relaxed_as_strict = false;  // the relaxing packing, chunked, never relaxed T_t
        for (bool relax : {true, false}) {
          Setting setting;
          setting.epp_k = k;
          setting.epp_token_cap = cap;
          setting.strict_packing = !relax;
          // Then strict packing gives the same chunks, which are dropped below: not chunked (on a
          // uniform step most strict settings were, tens of thousands of chunks each).
          if (!relax && relaxed_as_strict) continue;
          Candidate cand;
          if (!chunked(setting, cand)) continue;
          relaxed_as_strict = relax && !packing.time_target_relaxed;
          // Strict packing only differs when relaxing T_t would have helped some sequence.
          if (!relax && !candidates.empty() && candidates.back().setting.epp_k == k &&
              candidates.back().setting.epp_token_cap == cap &&
              same_chunks(candidates.back().chunks, cand.chunks))
            continue;
          add(std::move(cand));
        }
      }
    }

    // The baselines' chunkings too, as their static search would try them for this step: EPP's
    // waves and stage-aware recompute on them can only do better than the baseline does. Where
    // memory is plentiful, finely sliced micro-batches (Seq1F1B) can beat the sequence
    // processor's chunks, whose packing serves memory first.
    for (Method baseline : {Method::kSeq1F1B, Method::kChunkFlow}) {
      if (!options.baseline_chunkings) break;
      std::vector<Setting> settings = candidate_settings(baseline, longest);
      for (int64_t other : options.baseline_longest) {
        if (other <= longest) continue;
        for (const Setting& setting : candidate_settings(baseline, other))
          if (std::find(settings.begin(), settings.end(), setting) == settings.end())
            settings.push_back(setting);
      }
      for (Setting setting : settings) {
        check_not_cancelled(options);
        if (setting.k > options.max_k) continue;
        setting.chunker = baseline;
        Candidate cand;
        if (!chunked(setting, cand)) continue;
        if (std::none_of(candidates.begin(), candidates.end(), [&](const Candidate& other) {
              return same_chunks(other.chunks, cand.chunks);
            }))
          add(std::move(cand));
      }
    }
  };
  make_candidates(skip_unplannable_settings() &&
                  nothing_fits_as_is(lengths, cost, options.memory_budget_bytes));
  if (unchunked > 0 && std::none_of(candidates.begin(), candidates.end(), [](const Candidate& c) {
        return c.chunks.size() <= kMaxRecomputeChunks;
      })) {
    candidates.clear();
    unbounded.clear();
    unchunked = 0;
    make_candidates(false);
  }

  // Best first by search_key, which only grows as a candidate is looked at more closely: first
  // one wave without recompute is simulated (exact if it fits; otherwise the simulated peaks add
  // to the excess bytes), then recompute, and waves if they can win. The search ends when no
  // candidate's key is below the best time found. Recompute and grouping are the expensive
  // steps; they are limited to max_recompute_candidates and max_wave_groupings candidates
  // (without limit while nothing fits) for the sequence processor's chunks, and as many again for
  // the baselines' (whose bounds are often tight but whose recompute is heavy: sharing one limit,
  // they would crowd out the chunks that fit memory better).
  auto later = [&](int a, int b) {
    return candidates[a].key > candidates[b].key ||
           (candidates[a].key == candidates[b].key && a > b);
  };
  std::priority_queue<int, std::vector<int>, decltype(later)> queue(later);
  // Every candidate is either simulated (tried) or still waiting, unsimulated, when the search
  // stops because no waiting key beats the best plan (pruned by its bound).
  PlannerReport& counts = call.report;
  counts.candidates = static_cast<int>(candidates.size()) + unchunked;
  // Recompute and grouping only for candidates of at most kMaxRecomputeChunks chunks, or of the
  // fewest chunks any candidate has when all have more.
  size_t fewest_chunks = candidates.empty() ? 0 : candidates.front().chunks.size();
  for (const Candidate& cand : candidates)
    fewest_chunks = std::min(fewest_chunks, cand.chunks.size());
  const size_t recompute_chunk_limit = std::max<size_t>(kMaxRecomputeChunks, fewest_chunks);
  // The unbounded candidates would be popped and dropped unsimulated (over the budget, too many
  // chunks for recompute): they never enter the queue, and count as pruned. Those within the
  // limit after all (every candidate has more than kMaxRecomputeChunks) get their bound.
  for (int i = 0; i < static_cast<int>(candidates.size()); ++i) {
    if (unbounded[i] && candidates[i].chunks.size() <= recompute_chunk_limit) {
      pipeline_bound(candidates[i], cost, options.num_stages, options.memory_budget_bytes);
      unbounded[i] = 0;
    }
    if (!unbounded[i]) queue.push(i);
  }
  bool have_best = false, have_own = false;
  Candidate best, best_own;  // best_own: the best of the sequence processor's chunks
  int evaluated[2] = {0, 0}, groupings[2] = {0, 0};  // sequence processor's chunks, baselines'
  std::vector<Candidate> runners_up;  // finishes_runners_up: the fastest that fit, fastest first
  auto remember = [&](const Candidate& cand) {
    auto at = std::upper_bound(runners_up.begin(), runners_up.end(), cand.sim.step_time_s,
                               [](double t, const Candidate& c) { return t < c.sim.step_time_s; });
    if (static_cast<size_t>(at - runners_up.begin()) >= kFinishRunnersUp) return;
    runners_up.insert(at, cand);
    if (runners_up.size() > kFinishRunnersUp) runners_up.pop_back();
  };
  auto keep = [&](Candidate& cand) {
    if (finishes_runners_up(options)) remember(cand);
    if (cand.setting.chunker == Method::kEpp &&
        (!have_own || cand.sim.step_time_s < best_own.sim.step_time_s)) {
      best_own = cand;
      have_own = true;
    }
    if (!have_best || cand.sim.step_time_s < best.sim.step_time_s) {
      best = std::move(cand);
      have_best = true;
    }
  };

  // INFINIPIPE_LOG_LEVEL=trace: one line per candidate looked at, to see where a search goes.
  auto trace_step = [&](const char* what, const Candidate& cand) {
    if (!log::enabled(log::Level::kTrace)) return;
    char text[1200];
    std::snprintf(text, sizeof text,
                  "epp search: %s %s, %zu chunks, key %.3f, step %.3f, best %.3f, work %lld, "
                  "cpu %.0f ms",
                  what, label(cand.setting).c_str(), cand.chunks.size(), cand.key,
                  cand.sim.step_time_s, have_best ? best.sim.step_time_s : -1.0,
                  static_cast<long long>(search_work()), thread_cpu_ms() - call.cpu_start_ms);
    log::write(log::Level::kTrace, text);
  };
  auto over_limit = [&]() { return have_best && search_work_exhausted(options); };
  while (!queue.empty()) {
    check_not_cancelled(options);
    Candidate& cand = candidates[queue.top()];
    const int index = queue.top();
    queue.pop();
    if (have_best && cand.key >= best.sim.step_time_s) break;
    if (over_limit()) {
      counts.budget_exhausted = true;
      break;
    }
    const int family = cand.setting.chunker == Method::kEpp ? 0 : 1;
    // Once a plan is found and its family has had its recompute searches, a candidate over the
    // budget is popped again only to be skipped (below): the simulation could not matter.
    const bool no_recompute_left =
        have_best && evaluated[family] >= options.max_recompute_candidates;
    if (!cand.simulated) {
      // Known over the budget as it is, and no recompute to come (too many chunks, or none
      // left for its family): the simulation would only confirm that it needs recompute. On
      // extreme's steps most of the hundred simulations were such.
      if (cand.never_fits_as_is && cand.chunks.size() > recompute_chunk_limit) {
        trace_step("over the budget, too many chunks for recompute:", cand);
        continue;
      }
      if (cand.never_fits_as_is && no_recompute_left && skip_hopeless_simulations()) {
        trace_step("over the budget, no recompute left for its family:", cand);
        continue;
      }
      // Over the budget as it is, and no recompute can make it fit: not in one wave
      // (pipeline_bound's floor with every layer recomputed), nor in waves, when its family may
      // group no more or every wave holding its longest chains is over too (no_grouping_fits).
      // Both stay so whatever the search finds next, so a simulation would only rank a candidate
      // that cannot give a plan (on a uniform step, all but one of 60 simulated). Found without a
      // solve, it takes none of its family's recompute searches, so candidates after it may get
      // them (2,500 random steps: 32 plans faster, by up to 24%, none slower by more than 0.06%;
      // tests/plan/epp_search_test.cc). It counts as one of its family's groupings, as a grouping
      // found blocked always has: on a uniform step, the candidates after the winner would
      // otherwise run the grouping DP (0.2 s for the first) and not beat it.
      if (cand.never_fits_as_is && cand.never_fits_recomputed && drop_unplannable_candidates()) {
        const bool may_group = !have_best || groupings[family] < options.max_wave_groupings;
        const bool several = several_chain_lengths(cand.chunks);
        std::string why = label(cand.setting) + ": one wave does not fit on stage " +
                          std::to_string(cand.never_fits_stage) +
                          " even with every layer recomputed (pipeline_bound's floor)";
        if (!may_group || !several || no_grouping_fits(cand, cost, options, why)) {
          reason = why;
          groupings[family] += may_group && several;
          trace_step("no recompute fits, not simulated:", cand);
          continue;
        }
      }
      ++counts.tried;
      // Only a step faster than the best plan can matter (for the sequence processor's chunks,
      // faster than the best of those, which gets the drain tapers): one that fits is kept only
      // then, and one over the budget would wait with a key above its time, beaten already. So
      // the simulation stops once a stage's clock passes it (at 32 stages most candidates'
      // bounds are well below their simulated time, and 100 of them are simulated).
      double matters_below = kInfinity;
      if (have_best)
        matters_below = cand.setting.chunker != Method::kEpp ? best.sim.step_time_s
                        : have_own                           ? best_own.sim.step_time_s
                                                             : kInfinity;
      one_wave_without_recompute(cand, cost, options, matters_below);
      if (cand.sim.stopped_early) {
        trace_step("simulated until slower than the best", cand);
        cand.schedule = Schedule{};
        cand.checkpoint = RecomputeResult{};
        continue;
      }
      trace_step("simulated", cand);
      // A candidate keeps no schedule once simulated: one that fits is done (keep copies it if
      // it is the best), one over the budget waits for recompute and grouping, which build
      // their own. At batch 2048 on 32 stages the hundred simulated ones held 190 of the 360 MB
      // peak.
      const bool over_budget = cand.sim.over_budget;
      if (!over_budget) keep(cand);
      cand.schedule = Schedule{};
      cand.checkpoint = RecomputeResult{};
      if (over_budget) queue.push(index);
      continue;
    }
    if (no_recompute_left) continue;
    if (cand.chunks.size() > recompute_chunk_limit) continue;
    ++evaluated[family];
    // What plan_with_recompute would conclude, without its cost: a long sequence near the
    // memory limit, where most settings cannot fit, spent seconds on each (issue 15).
    if (recompute_cannot_fit(cand, cost, options, reason)) continue;
    const bool may_group = !have_best || groupings[family] < options.max_wave_groupings;
    bool grouped = false;
    ++counts.recomputed;
    const bool fits = plan_with_recompute(cand, have_best ? best.sim.step_time_s : kInfinity,
                                          may_group, cost, options, reason, grouped);
    groupings[family] += grouped;
    trace_step(fits ? "recomputed" : ("recompute failed: " + reason).c_str(), cand);
    if (fits) keep(cand);
  }
  for (int extra = 0;
       finishes_runners_up(options) && have_best && extra < kFinishUnsearched && !queue.empty();
       queue.pop()) {
    Candidate& cand = candidates[queue.top()];
    if (cand.simulated || cand.never_fits_as_is) continue;
    check_not_cancelled(options);
    ++extra;
    one_wave_without_recompute(cand, cost, options);
    if (!cand.sim.over_budget) remember(cand);
  }
  candidates.clear();
  if (!have_best)
    return infeasible(
        "no EPP setting (slice count K up to " + std::to_string(options.max_k) +
        ", chunk token caps, packing, the baselines' chunkings) fits the memory budget" +
        (reason.empty() ? std::string() : "; the last one tried: " + reason));

  // Drain tapers of the best of the sequence processor's chunks (the winner, or close behind a
  // baseline's chunking) when it runs as one wave without recompute; a tapered plan is kept if
  // it still does and is faster than the winner.
  if (have_own && best_own.waves.size() == 1 && best_own.checkpoint.recompute_s == 0) {
    const Setting untapered = best_own.setting;
    for (int drain : options.drain_taper_chunks)
      for (int split : options.drain_taper_splits) {
        check_not_cancelled(options);
        Candidate tapered;
        tapered.setting = untapered;
        tapered.setting.drain_chunks = drain;
        tapered.setting.drain_split = split;
        tapered.chunks = setting_chunks(Method::kEpp, lengths, tapered.setting, cost);
        if (same_chunks(tapered.chunks, best_own.chunks)) continue;
        ++counts.candidates;
        pipeline_bound(tapered, cost, options.num_stages, options.memory_budget_bytes);
        if (tapered.bound >= best.sim.step_time_s) continue;
        if (over_limit()) {
          counts.budget_exhausted = true;
          break;
        }
        ++counts.tried;
        one_wave_without_recompute(tapered, cost, options, best.sim.step_time_s);
        if (!tapered.sim.stopped_early && !tapered.sim.over_budget &&
            tapered.sim.step_time_s < best.sim.step_time_s)
          best = std::move(tapered);
      }
  }
  counts.pruned = counts.candidates - counts.tried;
  counts.work = search_work();
  choose_recompute(best, {RecomputeMethod::kStageAware}, cost, options);
  return finish_epp(std::move(best), lengths, cost, options, call, std::move(runners_up));
}

}  // namespace infinipipe
