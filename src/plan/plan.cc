#include "infinipipe/plan/plan.h"

#include <algorithm>

#include <cstdio>
#include <fstream>
#include <sstream>
#include <utility>

#include <nlohmann/json.hpp>

#include "infinipipe/core/error.h"
#include "infinipipe/schedule/validator.h"
#include "plan_json_fields.h"

namespace infinipipe {

using planning::read_field;
using planning::read_optional;

namespace {

struct MethodName {
  Method method;
  const char* name;
};
constexpr MethodName kMethodNames[] = {
    {Method::kEpp, "epp"},
    {Method::kBatch, "batch"},
    {Method::kSeq1F1B, "seq1f1b"},
    {Method::kChunkFlow, "chunkflow"},
};

nlohmann::json chunks_to_json(const std::vector<Chunk>& chunks) {
  nlohmann::json out = nlohmann::json::array();
  for (const Chunk& chunk : chunks) {
    nlohmann::json slices = nlohmann::json::array();
    for (const Slice& s : chunk.slices) slices.push_back({s.seq, s.start, s.end});
    out.push_back(std::move(slices));
  }
  return out;
}

std::vector<Chunk> chunks_from_json(const nlohmann::json& j, const std::vector<int64_t>& lengths) {
  std::vector<std::vector<std::vector<int64_t>>> raw;
  read_field(j, "chunks", raw);
  std::vector<Chunk> chunks;
  for (size_t c = 0; c < raw.size(); ++c) {
    Chunk chunk;
    for (const auto& triple : raw[c]) {
      const std::string where = "plan JSON: field \"chunks\"[" + std::to_string(c) + "]";
      check(triple.size() == 3, where + ": a slice must be [seq, start, end]");
      check(triple[0] >= 0 && triple[0] < static_cast<int64_t>(lengths.size()),
            where + ": sequence " + std::to_string(triple[0]) + " is not among the " +
                std::to_string(lengths.size()) + " of \"lengths\"");
      Slice s;
      s.seq = static_cast<int>(triple[0]);
      s.start = triple[1];
      s.end = triple[2];
      s.seq_length = lengths[s.seq];
      chunk.slices.push_back(s);
    }
    chunks.push_back(std::move(chunk));
  }
  return chunks;
}

// The part every rank executes; predictions are left out.
nlohmann::json executable_json(const Plan& plan) {
  nlohmann::json j;
  j["method"] = to_string(plan.method);
  j["lengths"] = plan.lengths;
  j["chunks"] = chunks_to_json(plan.chunks);
  j["waves"] = plan.waves;
  j["schedule"] = plan.schedule;
  j["recompute"] = plan.recompute;
  j["layers_per_stage"] = plan.layers_per_stage;
  return j;
}

uint64_t fnv1a64(const std::string& text) {
  uint64_t h = 0xcbf29ce484222325ULL;  // FNV-1a 64 offset basis
  for (unsigned char ch : text) {
    h ^= ch;
    h *= 0x100000001b3ULL;  // FNV-1a 64 prime
  }
  return h;
}

}  // namespace

const char* to_string(Method method) {
  for (const MethodName& m : kMethodNames)
    if (m.method == method) return m.name;
  return "?";
}

Method parse_method(const std::string& name) {
  std::string valid;
  for (const MethodName& m : kMethodNames) {
    if (name == m.name) return m.method;
    valid += std::string(valid.empty() ? "" : ", ") + m.name;
  }
  throw Error("unknown method \"" + name + "\"; use one of: " + valid);
}

std::vector<Method> all_methods() {
  std::vector<Method> out;
  for (const MethodName& m : kMethodNames) out.push_back(m.method);
  return out;
}

namespace {

// The chunking knobs of `method` (no recompute).
void describe_chunking(std::ostream& out, Method method, const Setting& s) {
  switch (method) {
    case Method::kEpp:
      out << "K=" << s.epp_k;
      if (s.epp_token_cap > 0) out << " cap=" << s.epp_token_cap;
      if (s.strict_packing) out << " strict";
      if (s.drain_chunks > 0) out << " drain=" << s.drain_chunks << "/" << s.drain_split;
      break;
    case Method::kBatch:
      out << "cap=" << s.token_cap;
      break;
    case Method::kSeq1F1B:
      out << "cap=" << s.token_cap << " k=" << s.k;
      break;
    case Method::kChunkFlow:
      out << "chunk=" << s.chunk_tokens;
      break;
  }
}

}  // namespace

std::string describe(Method method, const Setting& s) {
  std::ostringstream out;
  if (method == Method::kEpp && s.chunker != Method::kEpp) {
    out << to_string(s.chunker) << " chunks ";
    describe_chunking(out, s.chunker, s);
  } else {
    describe_chunking(out, method, s);
    if (method != Method::kEpp) {
      out << " recompute=";
      if (s.uniform_recompute < 0)
        out << "auto";
      else
        out << s.uniform_recompute;
    }
  }
  if (s.zero_bubble != ZeroBubble::kOff) out << " zero-bubble=" << to_string(s.zero_bubble);
  return out.str();
}

int64_t Plan::tokens() const {
  int64_t total = 0;
  for (int64_t n : lengths) total += n;
  return total;
}

std::string Plan::hash() const {
  char buffer[17];
  std::snprintf(buffer, sizeof buffer, "%016llx",
                static_cast<unsigned long long>(fnv1a64(executable_json(*this).dump())));
  return buffer;
}

void to_json(nlohmann::json& j, const Setting& s) {
  j = nlohmann::json{{"k", s.k},
                     {"token_cap", s.token_cap},
                     {"chunk_tokens", s.chunk_tokens},
                     {"uniform_recompute", s.uniform_recompute},
                     {"strict_packing", s.strict_packing},
                     {"drain_chunks", s.drain_chunks},
                     {"drain_split", s.drain_split}};
  // Only an EPP plan on a baseline's chunks says so; every other setting reads as before.
  if (s.chunker != Method::kEpp) j["chunker"] = to_string(s.chunker);
  // Likewise only a zero-bubble plan names its mode.
  if (s.zero_bubble != ZeroBubble::kOff) j["zero_bubble"] = to_string(s.zero_bubble);
}

void from_json(const nlohmann::json& j, Setting& s) {
  s = Setting{};
  read_optional(j, "k", s.k);
  read_optional(j, "token_cap", s.token_cap);
  read_optional(j, "chunk_tokens", s.chunk_tokens);
  read_optional(j, "uniform_recompute", s.uniform_recompute);
  read_optional(j, "strict_packing", s.strict_packing);
  read_optional(j, "drain_chunks", s.drain_chunks);
  read_optional(j, "drain_split", s.drain_split);
  std::string chunker = to_string(s.chunker);
  read_optional(j, "chunker", chunker);
  s.chunker = parse_method(chunker);
  std::string zero_bubble = to_string(s.zero_bubble);
  read_optional(j, "zero_bubble", zero_bubble);
  s.zero_bubble = parse_zero_bubble(zero_bubble);
}

// An EPP plan on the sequence processor's chunks: its setting's knobs are EPP's own.
static bool own_epp_chunks(Method method, const Setting& setting) {
  return method == Method::kEpp && setting.chunker == Method::kEpp;
}

nlohmann::json setting_json(const Plan& plan) {
  nlohmann::json j = plan.setting;
  if (own_epp_chunks(plan.method, plan.setting)) {
    j["k"] = plan.setting.epp_k;
    j["token_cap"] = plan.setting.epp_token_cap;
  }
  return j;
}

// A `method` plan's setting as its JSON "setting" held it: setting_json's "k" and "token_cap"
// are EPP's own on its own chunks.
static Setting with_epp_knobs(Method method, Setting s) {
  if (own_epp_chunks(method, s)) {
    s.epp_k = std::exchange(s.k, Setting{}.k);
    s.epp_token_cap = std::exchange(s.token_cap, Setting{}.token_cap);
  }
  return s;
}

Setting setting_from_json(Method method, const nlohmann::json& j) {
  return with_epp_knobs(method, j.get<Setting>());
}

void to_json(nlohmann::json& j, const Plan& plan) {
  j = executable_json(plan);
  j["setting"] = setting_json(plan);
  j["hash"] = plan.hash();
  j["predicted"] = {{"step_time_s", plan.step_time_s},
                    {"recompute_s", plan.recompute_s},
                    {"stage_recompute_s", plan.stage_recompute_s},
                    {"busy_s", plan.busy_s},
                    {"bubble_fraction", plan.bubble_fraction},
                    {"peak_memory_bytes", plan.peak_memory_bytes},
                    {"stage_alltoall_s", plan.stage_alltoall_s},
                    {"stage_p2p_s", plan.stage_p2p_s},
                    {"checkpoint_solver", plan.checkpoint_solver},
                    {"plan_ms", plan.plan_ms}};
  // Only where there is any, so plans without a gradient group write what they always wrote.
  const auto& sync = plan.stage_gradient_sync_s;
  if (std::any_of(sync.begin(), sync.end(), [](double s) { return s > 0; }))
    j["predicted"]["stage_gradient_sync_s"] = sync;
  j["planner"] = plan.planner;
}

void from_json(const nlohmann::json& j, Plan& plan) {
  plan = Plan{};
  std::string method;
  read_field(j, "method", method);
  try {
    plan.method = parse_method(method);
  } catch (const Error& e) {
    throw Error(std::string("plan JSON: field \"method\": ") + e.what());
  }
  read_field(j, "lengths", plan.lengths);
  for (size_t i = 0; i < plan.lengths.size(); ++i)
    check(plan.lengths[i] > 0, "plan JSON: field \"lengths\"[" + std::to_string(i) + "] is " +
                                   std::to_string(plan.lengths[i]) + "; lengths must be positive");
  plan.chunks = chunks_from_json(j, plan.lengths);
  read_field(j, "waves", plan.waves);
  for (const Wave& wave : plan.waves)
    for (int c : wave)
      check(c >= 0 && c < static_cast<int>(plan.chunks.size()),
            "plan JSON: field \"waves\" names chunk " + std::to_string(c) + " of " +
                std::to_string(plan.chunks.size()));
  try {
    read_field(j, "schedule", plan.schedule);
  } catch (const Error& e) {
    throw Error(std::string(e.what()).find("plan JSON") == 0
                    ? e.what()
                    : std::string("plan JSON: field \"schedule\": ") + e.what());
  }
  read_field(j, "recompute", plan.recompute);
  read_field(j, "layers_per_stage", plan.layers_per_stage);
  const size_t stages = plan.layers_per_stage.size();
  check(plan.schedule.stages.size() == stages,
        "plan JSON: field \"schedule\" has " + std::to_string(plan.schedule.stages.size()) +
            " stages but \"layers_per_stage\" has " + std::to_string(stages));
  // Every chunk runs forward and backward on every stage, so each stage lists at least two
  // actions per chunk. Checked here, before Plan::validate sizes its tables by stages x chunks:
  // a short file naming many of both (10,000 empty stages, 10,000 chunks: 318 KB) made it
  // allocate 2.4 GB.
  for (size_t p = 0; p < stages; ++p)
    check(plan.schedule.stages[p].size() >= 2 * plan.chunks.size(),
          "plan JSON: field \"schedule\": stage " + std::to_string(p) + " lists " +
              std::to_string(plan.schedule.stages[p].size()) + " actions, fewer than the " +
              std::to_string(2 * plan.chunks.size()) + " (a forward and a backward of each of " +
              std::to_string(plan.chunks.size()) + " chunks) every stage runs");
  check(plan.recompute.empty() || plan.recompute.size() == stages,
        "plan JSON: field \"recompute\" has " + std::to_string(plan.recompute.size()) +
            " stages but \"layers_per_stage\" has " + std::to_string(stages));
  for (size_t p = 0; p < plan.recompute.size(); ++p) {
    check(plan.recompute[p].size() == plan.chunks.size(),
          "plan JSON: field \"recompute\"[" + std::to_string(p) + "] has " +
              std::to_string(plan.recompute[p].size()) + " entries for " +
              std::to_string(plan.chunks.size()) + " chunks");
    for (int layers : plan.recompute[p])
      check(layers >= 0 && layers <= plan.layers_per_stage[p],
            "plan JSON: field \"recompute\"[" + std::to_string(p) + "] holds " +
                std::to_string(layers) + " layers; stage " + std::to_string(p) + " has " +
                std::to_string(plan.layers_per_stage[p]));
  }
  read_optional(j, "setting", plan.setting);
  plan.setting = with_epp_knobs(plan.method, plan.setting);
  if (j.contains("predicted")) {
    const nlohmann::json& p = j["predicted"];
    read_optional(p, "step_time_s", plan.step_time_s);
    read_optional(p, "recompute_s", plan.recompute_s);
    read_optional(p, "stage_recompute_s", plan.stage_recompute_s);
    read_optional(p, "busy_s", plan.busy_s);
    read_optional(p, "bubble_fraction", plan.bubble_fraction);
    read_optional(p, "peak_memory_bytes", plan.peak_memory_bytes);
    read_optional(p, "stage_alltoall_s", plan.stage_alltoall_s);  // absent in older plans
    read_optional(p, "stage_p2p_s", plan.stage_p2p_s);
    read_optional(p, "stage_gradient_sync_s", plan.stage_gradient_sync_s);
    read_optional(p, "checkpoint_solver", plan.checkpoint_solver);
    read_optional(p, "plan_ms", plan.plan_ms);
  }
  read_optional(j, "planner", plan.planner);
  // A stored hash is a promise about the executable part: refuse a plan edited behind it.
  if (j.contains("hash")) {
    std::string stored;
    read_field(j, "hash", stored);
    check(stored == plan.hash(), "plan JSON: field \"hash\" is " + stored +
                                     " but the plan hashes to " + plan.hash() +
                                     "; the plan was changed after it was written");
  }
}

void save_plan(const Plan& plan, const std::string& path) {
  std::ofstream out(path);
  check(static_cast<bool>(out), "cannot write the plan to " + path);
  out << nlohmann::json(plan).dump(1) << "\n";
  check(static_cast<bool>(out), "failed writing the plan to " + path);
}

Plan load_plan(const std::string& path) {
  std::ifstream in(path);
  check(static_cast<bool>(in), "cannot open plan file " + path);
  nlohmann::json j;
  try {
    in >> j;
  } catch (const nlohmann::json::exception& e) {
    // Not only parse_error: a number beyond double's range ("1e999") is out_of_range.
    throw Error(path + ": not valid JSON: " + e.what());
  }
  try {
    return j.get<Plan>();
  } catch (const Error& e) {
    throw Error(path + ": " + e.what());
  }
}

void Plan::set_prediction(const SimResult& sim) {
  step_time_s = sim.step_time_s;
  recompute_s = sim.total_recompute_s();
  stage_recompute_s = sim.recompute_s;
  busy_s = sim.busy_s;
  bubble_fraction = sim.mean_bubble_fraction();
  peak_memory_bytes = sim.peak_memory_bytes;
  stage_alltoall_s = sim.alltoall_s;
  stage_p2p_s = sim.p2p_s;
  stage_gradient_sync_s = sim.gradient_sync_s;
}

void Plan::validate() const {
  check_coverage(chunks, lengths);
  validate_schedule(schedule, chunks);
  const int stages = schedule.num_stages();
  check(static_cast<int>(layers_per_stage.size()) == stages,
        "plan: layers_per_stage has " + std::to_string(layers_per_stage.size()) + " entries for " +
            std::to_string(stages) + " stages");
  if (recompute.empty()) return;
  check(static_cast<int>(recompute.size()) == stages,
        "plan: recompute must have one row per stage");
  for (int p = 0; p < stages; ++p) {
    check(recompute[p].size() == chunks.size(),
          "plan: recompute[" + std::to_string(p) + "] must have one entry per chunk");
    for (size_t c = 0; c < chunks.size(); ++c)
      check(recompute[p][c] >= 0 && recompute[p][c] <= layers_per_stage[p],
            "plan: recompute[" + std::to_string(p) + "][" + std::to_string(c) +
                "] = " + std::to_string(recompute[p][c]) + " is outside [0, " +
                std::to_string(layers_per_stage[p]) + "]");
  }
}

}  // namespace infinipipe
