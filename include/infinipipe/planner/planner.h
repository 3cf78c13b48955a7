#pragma once
// Plans one step: EPP (search the chunking knobs per step, group chains into waves, stage-aware
// checkpointing, keep what the simulator predicts fastest) and the baselines at a given setting.
// A method that cannot fit memory is reported infeasible with the reason, never thrown, so a
// comparison of several methods always completes; malformed input (empty batch, bad lengths,
// options that contradict the cost model) throws Error.
//
// EPP's search. Knobs: the slice count K of the cost-balanced mesh (every K to 16, every other
// to 32, every fourth beyond), a chunk token cap (chunk_token_caps), and packing that relaxes
// T_t (the paper's) or never does; and the baselines' chunkings (Seq1F1B's sliced micro-batches,
// ChunkFlow's fixed-size chunks, at their static search's settings), which then get EPP's waves
// and recompute, so no baseline's chunking beats EPP on a step. Every setting gets a cheap bound
// (no plan of its chunks in one wave is faster: busiest stage plus the first chunk's fill and the
// last chunk's drain) and the activation bytes 1F1B keeps in flight; settings are then looked at
// best first, the simulator on one wave without recompute, then recompute (the tied greedy program;
// the untied one too when close to the best) and the grouping into waves for those that do not fit,
// until no setting can beat the best found. The winner gets drain tapers (finer last chunks) and
// the exact tied program (CBC), each kept only if the simulator finds it faster.
#include <atomic>
#include <cstdint>
#include <string>
#include <vector>

#include "infinipipe/chunking/sequence_processor.h"
#include "infinipipe/cost/cost_model.h"
#include "infinipipe/plan/plan.h"

namespace infinipipe {

struct PlannerOptions {
  int num_stages = 1;              // must equal the cost model's
  double memory_budget_bytes = 0;  // per stage, model state included
  int max_k = 64;                  // EPP: largest slice count tried
  // EPP: CBC time limit for the winner's checkpointing (CBC can overrun it by tens of ms).
  // Zero or less skips CBC: what CBC finds within a time limit depends on the machine's load, so
  // ranks that plan independently and must agree (the trainer) plan with the greedy solvers only.
  double recompute_time_limit_s = 0.05;
  // EPP: chunk token caps swept jointly with K (0 = only the mesh's own cap T_m); see
  // EppChunkingOptions::max_chunk_tokens. Caps at or above a K's T_m are that K's plan again.
  std::vector<int64_t> chunk_token_caps = {0, 16384, 8192, 4096, 2048, 1024};
  // EPP: at most this many settings that do not fit one wave without recompute get recompute
  // (more while no setting fits at all), and at most max_wave_groupings of them the grouping
  // into waves: these are the expensive part of planning.
  // EPP: also weigh the baselines' chunkings (Setting::chunker); false keeps to the sequence
  // processor's (the paper's search alone, for ablations).
  bool baseline_chunkings = true;
  // EPP: with baseline_chunkings, the baselines' settings as they are sized from these longest
  // sequences too, besides the step's own (candidate_settings: caps of 1-4 times the longest).
  // A baseline planned over several steps sizes its caps from their longest sequence: the plan
  // tool passes it, so that EPP's search holds every chunking the baselines' per-step bests try.
  std::vector<int64_t> baseline_longest;
  // EPP: try several waves overlapped too (ScheduleOptions::overlap_waves), keeping the faster;
  // false keeps waves back to back (the paper's schedule, for ablations).
  bool overlap_waves = true;
  int max_recompute_candidates = 6;
  int max_wave_groupings = 2;
  // Run chunks' LM heads on the stages the planner assigns (docs/design.md, "Spread head"), for
  // EPP and the baselines alike, where the simulator finds it faster (plan_epp: its winner, six
  // runners-up that fit and six candidates its search left unsimulated; a baseline: its plan at
  // its setting, also when that fits only spread); false keeps every head on the last stage and
  // every plan as it was. The executor needs the head's replica on every stage that runs heads
  // (the trainer's spread_head).
  bool spread_head = false;
  // EPP: the search's work limit, counted in chunk-stages, not seconds, so every rank stops at
  // the same candidate: every simulation and every checkpoint program (of a candidate, or of a
  // wave the grouping weighs) adds its chunks x stages. Once reached with a plan found, the
  // search keeps the best plan so far (the report says so); before that it goes on. 0: no limit.
  int64_t search_work_limit = 8000000;
  // EPP: drain tapers tried on the winner (EppChunkingOptions::drain_chunks x drain_split),
  // kept when the simulator finds them faster.
  std::vector<int> drain_taper_chunks = {8, 16, 24, 32, 48, 64};
  std::vector<int> drain_taper_splits = {2, 4};
  // Zero bubble (ScheduleOptions::zero_bubble, docs/design.md "Zero bubble"): "try" gives EPP's
  // finished plan ZB-H1's W actions, and apart ZB-H2's (W actions on a longer warm-up), each
  // with recompute solved again for the memory it holds, and keeps the faster where the
  // simulator finds it faster within the budget; "h1" or "h2" gives every method's plan that
  // mode whatever the time (for ablations; a plan that then fits no recompute is infeasible);
  // "off" never. Off by default until measured faster on hardware (docs/design.md, "Zero
  // bubble"); the executor runs W actions.
  std::string zero_bubble = "off";
  // Set from another thread to stop EPP's search between candidates with an Error (the Python
  // bindings set it on Ctrl-C); null: never stopped.
  const std::atomic<bool>* cancelled = nullptr;

  // The options a user sets, each once, with what it does: the bindings make the Python
  // PlannerOptions' properties and PlanConfig's fields from this list (their defaults from
  // for_training), so no setting is copied by hand. visit(name, member pointer, doc).
  template <class Visit>
  static void visit_fields(Visit&& visit) {
    visit("max_k", &PlannerOptions::max_k, "EPP: the largest slice count K tried");
    visit("recompute_time_limit_s", &PlannerOptions::recompute_time_limit_s,
          "EPP: CBC's time limit for the winner's recompute plan; 0 or less skips CBC (the "
          "greedy solvers alone: deterministic, as ranks planning on their own need)");
    visit("chunk_token_caps", &PlannerOptions::chunk_token_caps,
          "EPP: chunk token caps swept with K (0: only the mesh's own cap)");
    visit("baseline_chunkings", &PlannerOptions::baseline_chunkings,
          "EPP: also weigh the baselines' chunkings with EPP's waves and recompute");
    visit("overlap_waves", &PlannerOptions::overlap_waves,
          "EPP: a wave may start in the previous one's cool-down, where faster");
    visit("max_recompute_candidates", &PlannerOptions::max_recompute_candidates,
          "EPP: settings given recompute when none fits one wave without it");
    visit("max_wave_groupings", &PlannerOptions::max_wave_groupings,
          "EPP: settings grouped into several waves");
    visit("spread_head", &PlannerOptions::spread_head,
          "chunks' LM heads and losses may run on any stage (docs/design.md, \"Spread head\"); "
          "the trainer then holds the head's replica on every stage");
    visit("search_work_limit", &PlannerOptions::search_work_limit,
          "EPP: the search keeps its best plan so far after this much work, in chunk-stages "
          "(the same on every rank); 0: no limit");
    visit("drain_taper_chunks", &PlannerOptions::drain_taper_chunks,
          "EPP: drain tapers tried on the winner: how many last chunks are cut finer");
    visit("drain_taper_splits", &PlannerOptions::drain_taper_splits,
          "EPP: drain tapers tried on the winner: into how many pieces");
    visit("zero_bubble", &PlannerOptions::zero_bubble,
          "zero-bubble W actions: 'try' (EPP, where faster), 'h1' (every method), 'off'");
  }

  // The options a trainer plans with, where every rank plans the step on its own, before the
  // step and on its critical path, and all must reach the same plan (the plan tool plans offline
  // with the defaults above). No CBC: what it finds within a wall-clock limit depends on the
  // machine's load, so ranks could disagree. Slice counts up to 32: on the plan tool's default
  // case (wikipedia, LLaMA-13B, 8 stages, 96K, batch 512, seeds 0-4, no CBC) K up to 64 planned
  // 10-45% longer for plans 0-0.8% faster (`infinipipe-plan --distribution wikipedia --steps 5
  // --method epp --json --recompute-seconds 0 --max-k 32`, then 64).
  static PlannerOptions for_training(int num_stages, double memory_budget_bytes);
};

struct PlanResult {
  bool feasible = false;
  std::string reason;  // when infeasible
  Plan plan;           // when feasible
};

// The planner's entry point: EPP's search (`setting` unused), or a baseline at `setting`
// (token_cap 0: the step's longest sequence). Returns the validated plan; Error when the method
// cannot fit the step, with the reason and what to change.
Plan plan_step(Method method, const std::vector<int64_t>& lengths, const CostModel& cost,
               const PlannerOptions& options, Setting setting = {});

// EPP. Slice counts whose slices would be shorter than kMinSliceTokens are not tried.
constexpr int64_t kMinSliceTokens = 128;
PlanResult plan_epp(const std::vector<int64_t>& lengths, const CostModel& cost,
                    const PlannerOptions& options);

// The chunking options an EPP plan's setting stands for (plan_epp always orders packed chunks
// lightest first), so that epp_chunks(lengths, epp_chunking(plan.setting), cost) gives
// plan.chunks again.
EppChunkingOptions epp_chunking(const Setting& setting);

// The chunks `method` makes of `lengths` at `setting`; for EPP, those of setting.chunker (the
// sequence processor's, or a baseline's with that baseline's knobs). Error when the setting
// cannot hold a sequence (a token cap below it).
std::vector<Chunk> setting_chunks(Method method, const std::vector<int64_t>& lengths,
                                  const Setting& setting, const CostModel& cost);

// EPP at one setting (k, token_cap, strict_packing, drain taper), without the search: the
// same waves, scheduling and checkpoint choice as plan_epp gives its winner. For tests and
// benchmarks that compare settings.
PlanResult plan_epp_at(const std::vector<int64_t>& lengths, const Setting& setting,
                       const CostModel& cost, const PlannerOptions& options);

// A baseline (kBatch, kSeq1F1B, kChunkFlow) at one setting: its chunking, one wave, 1F1B,
// uniform recompute (setting.uniform_recompute layers on every stage and chunk, capped at the
// stage's layers, or the smallest count that fits when it is -1).
PlanResult plan_with_setting(Method method, const std::vector<int64_t>& lengths,
                             const Setting& setting, const CostModel& cost,
                             const PlannerOptions& options);

}  // namespace infinipipe
