#pragma once
// A plan: everything one training step needs (chunks, waves, every stage's action list, the
// recompute count of every (stage, chunk)) and what the simulator predicts for it. Plans travel
// as JSON; hash() lets ranks check that they hold the same one.
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "infinipipe/core/chunk.h"
#include "infinipipe/core/recompute.h"
#include "infinipipe/plan/planner_report.h"
#include "infinipipe/schedule/action.h"
#include "infinipipe/schedule/scheduler.h"
#include "infinipipe/sim/simulator.h"

namespace infinipipe {

enum class Method {
  kEpp,        // elastic: per-step search of K, cap and packing; waves; stage-aware checkpointing
  kBatch,      // whole sequences packed into micro-batches of a token cap
  kSeq1F1B,    // packed micro-batches cut into k slices of equal forward cost
  kChunkFlow,  // fixed-size chunks
};

const char* to_string(Method method);          // "epp", "batch", "seq1f1b", "chunkflow"
Method parse_method(const std::string& name);  // Error listing the valid names
std::vector<Method> all_methods();             // in the order above

// The knobs a plan was made with, each method's under its own names: the baselines' (k,
// token_cap, chunk_tokens, uniform_recompute), which an EPP plan on a baseline's chunks
// (chunker) also reads, and EPP's own chunking, which its search chooses per step (epp_k,
// epp_token_cap, strict_packing, the drain taper). An EPP plan may take a baseline's chunks and
// give them EPP's waves and recompute: its search weighs those too, so no baseline's chunking
// beats it on a step.
struct Setting {
  // Seq1F1B: slices per micro-batch.
  int k = 1;
  // Batch-level 1F1B, Seq1F1B: tokens per micro-batch (0: the step's longest sequence).
  int64_t token_cap = 0;
  // ChunkFlow: tokens per chunk.
  int64_t chunk_tokens = 0;
  // Baselines: layers recomputed on every stage and chunk; -1 = the smallest count that fits.
  int uniform_recompute = -1;
  // EPP: the longest sequence cut into epp_k cost-balanced slices (the paper's K).
  int epp_k = 1;
  // EPP: the most tokens in a chunk (0: the mesh's own cap, T_m).
  int64_t epp_token_cap = 0;
  // EPP: packing never raises T_t (EppChunkingOptions::relax_time_target false)
  bool strict_packing = false;
  // EPP: drain taper (EppChunkingOptions::drain_chunks, drain_split)
  int drain_chunks = 0;
  int drain_split = 1;
  // EPP: whose chunking made the chunks (kEpp: the sequence processor)
  Method chunker = Method::kEpp;
  // Any method: whether its backwards were split into B and W (PlannerOptions::zero_bubble).
  ZeroBubble zero_bubble = ZeroBubble::kOff;

  // The knobs a user sets, each once (EPP's own are its search's to choose): the Python
  // PlanConfig's and plan_step's keywords are made from this list. visit(name, member, doc).
  template <class Visit>
  static void visit_fields(Visit&& visit) {
    visit("k", &Setting::k, "Seq1F1B: slices per micro-batch");
    visit("token_cap", &Setting::token_cap,
          "batch-level and Seq1F1B: tokens per micro-batch (0: the step's longest sequence)");
    visit("chunk_tokens", &Setting::chunk_tokens, "ChunkFlow: tokens per chunk");
    visit("uniform_recompute", &Setting::uniform_recompute,
          "baselines: layers recomputed on every stage and chunk; -1: the fewest that fit");
  }

  bool operator==(const Setting& o) const {
    return k == o.k && token_cap == o.token_cap && chunk_tokens == o.chunk_tokens &&
           uniform_recompute == o.uniform_recompute && epp_k == o.epp_k &&
           epp_token_cap == o.epp_token_cap && strict_packing == o.strict_packing &&
           drain_chunks == o.drain_chunks && drain_split == o.drain_split && chunker == o.chunker &&
           zero_bubble == o.zero_bubble;
  }
};

// "K=4", "K=24 cap=1024 strict drain=32/4", "cap=98304 k=2 recompute=3", ...: the knobs that matter
// for `method`.
std::string describe(Method method, const Setting& setting);

struct Plan {
  Method method = Method::kEpp;
  Setting setting;
  // --- executable part (what hash() covers) ---
  std::vector<int64_t> lengths;
  std::vector<Chunk> chunks;
  std::vector<Wave> waves;
  Schedule schedule;
  Recompute recompute;  // [stage][chunk]
  std::vector<int> layers_per_stage;
  // --- prediction ---
  double step_time_s = 0;
  double recompute_s = 0;                     // summed over stages
  std::vector<double> stage_recompute_s;      // per stage
  std::vector<double> busy_s;                 // per stage
  double bubble_fraction = 0;                 // mean over stages
  std::vector<double> peak_memory_bytes;      // per stage, of one rank (the cost model's layout)
  std::vector<double> stage_alltoall_s;       // per stage: one rank's SP all-to-alls (in busy_s)
  std::vector<double> stage_p2p_s;            // per stage: one rank's sends to its neighbours
  std::vector<double> stage_gradient_sync_s;  // per stage: one rank's gradient sync at step end
  std::string checkpoint_solver;
  double plan_ms = 0;  // wall clock of the planning call
  PlannerReport planner;

  int64_t tokens() const;
  // Error unless what the executor relies on holds: every token in exactly one slice, a valid
  // schedule (validator.h), one layer count per stage, recompute within each stage's layers.
  void validate() const;
  // Fills the prediction fields (step time, recompute, busy time, bubbles, peaks) from a
  // simulation of this plan.
  void set_prediction(const SimResult& sim);
  // 16 hex digits: FNV-1a 64 over the canonical JSON of the executable part. Predictions,
  // planning time and the planner's report are left out so that ranks with different timings
  // still agree.
  std::string hash() const;
};

void to_json(nlohmann::json& j, const Setting& s);
void from_json(const nlohmann::json& j, Setting& s);
// A plan's setting as its JSON holds it: one "k" and one "token_cap", an EPP plan on its own
// chunks writing its epp_k and epp_token_cap there (so files written before they had names of
// their own read alike), every other plan its baseline knobs.
nlohmann::json setting_json(const Plan& plan);
// The setting of a `method` plan from that JSON.
Setting setting_from_json(Method method, const nlohmann::json& j);
// Chunks are written as lists of [seq, start, end]; sequence lengths come from "lengths".
// from_json throws Error naming the field that is missing, mistyped or inconsistent.
void to_json(nlohmann::json& j, const Plan& plan);
void from_json(const nlohmann::json& j, Plan& plan);

void save_plan(const Plan& plan, const std::string& path);
Plan load_plan(const std::string& path);  // Error names the file

}  // namespace infinipipe
