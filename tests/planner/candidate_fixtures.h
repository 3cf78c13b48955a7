#pragma once
// EPP search candidates for the tests of the plan part's internals (candidate, candidate_plans,
// recompute_choice, wave_grouping): a random instance's chunks at one of a few settings (the
// sequence processor's and the baselines'), with pipeline_bound filled in as the search does.
#include <algorithm>
#include <random>
#include <string>
#include <vector>

#include "candidate.h"
#include "infinipipe/planner/planner.h"
#include "infinipipe/planner/static_baseline.h"
#include "planner/instances.h"
#include "planner/plan_checks.h"

namespace infinipipe::testing {

// A setting of EPP's search for the instance, chosen by `pick` among a fixed few.
inline Setting some_setting(const Instance& inst, int pick) {
  const int64_t longest = longest_of(inst.lengths);
  Setting s;
  switch (pick % 6) {
    case 0:
      break;  // K = 1: whole sequences packed
    case 1:
      s.epp_k = static_cast<int>(std::min<int64_t>(4, longest));
      break;
    case 2:
      s.epp_k = static_cast<int>(std::min<int64_t>(2, longest));
      s.epp_token_cap = 2048;
      break;
    case 3:
      s.epp_k = static_cast<int>(std::min<int64_t>(8, longest));
      s.strict_packing = true;
      break;
    case 4:
      s.chunker = Method::kSeq1F1B;
      s.k = static_cast<int>(std::min<int64_t>(4, longest));
      s.token_cap = longest;
      break;
    case 5:
      s.chunker = Method::kChunkFlow;
      s.chunk_tokens = 2048;
      break;
  }
  return s;
}

// The search's candidate for `setting`: its chunks and pipeline_bound's bounds and key.
inline planning::Candidate candidate(const Instance& inst, const Setting& setting) {
  planning::Candidate cand;
  cand.setting = setting;
  cand.chunks = setting_chunks(Method::kEpp, inst.lengths, setting, inst.cost);
  planning::pipeline_bound(cand, inst.cost, inst.options.num_stages,
                           inst.options.memory_budget_bytes);
  return cand;
}

// What a check of `setting`'s candidate is traced by: the instance and the setting.
inline std::string described(const Instance& inst, const Setting& setting) {
  return inst.description + "; " + describe(Method::kEpp, setting);
}

}  // namespace infinipipe::testing

namespace infinipipe {

// The tests of the planner's internals name these unqualified (and plan_checks.h's).
using planning::Candidate, testing::candidate, testing::described, testing::some_setting;

}  // namespace infinipipe
