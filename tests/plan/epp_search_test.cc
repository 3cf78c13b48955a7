// EPP's search knobs and the search itself: the chunk token cap, strict packing, packed chunks
// lightest first and the drain taper keep every token in exactly one slice and respect their
// limits; the search never loses to a setting it could have taken that fits as it is, its own
// or a baseline's chunking (its bounds are sound); the recompute it keeps is never slower in simulation than the tied or
// untied programs on the same schedule; a plan's setting gives its chunks again.
#include <algorithm>
#include <map>
#include <random>
#include <tuple>

#include <gtest/gtest.h>

#include "infinipipe/checkpoint/checkpoint_planner.h"
#include "infinipipe/chunking/sequence_processor.h"
#include "infinipipe/core/error.h"
#include "infinipipe/plan/planner.h"
#include "infinipipe/plan/static_baseline.h"
#include "infinipipe/schedule/scheduler.h"
#include "infinipipe/sim/simulator.h"
#include "plan/instances.h"

namespace infinipipe {
namespace {

using testing::Instance;
using testing::random_instance;
using testing::random_lengths;

bool packed(const Chunk& chunk) {
  return std::all_of(chunk.slices.begin(), chunk.slices.end(), [](const Slice& s) { return s.whole(); });
}

int split_slices(const Chunk& chunk) {
  int count = 0;
  for (const Slice& s : chunk.slices) count += !s.whole();
  return count;
}

// Per-layer time of the chunk's slices, without the per-chunk overhead (as the mesh's T_t).
double slices_time(const Chunk& chunk, const CostModel& cost) {
  double t = 0;
  for (const Slice& s : chunk.slices) t += cost.slice_layer_time(s.context(), s.length());
  return t;
}

std::map<std::tuple<int, int64_t, int64_t>, int> slice_counts(const std::vector<Chunk>& chunks) {
  std::map<std::tuple<int, int64_t, int64_t>, int> counts;
  for (const Chunk& c : chunks)
    for (const Slice& s : c.slices) ++counts[{s.seq, s.start, s.end}];
  return counts;
}

TEST(EppChunking, KnobsCoverEveryTokenAndRespectTheCap) {
  std::mt19937_64 rng(31);
  const CostModel cost = CostModel::analytic(ModelShape::builtin("llama-13b"), Hardware::builtin("a800"), 4);
  const int64_t caps[] = {0, 97, 1024, 4096};
  int capped_chunks = 0;
  for (int trial = 0; trial < 150; ++trial) {
    const std::vector<int64_t> lengths = random_lengths(rng, 40, 65536);
    const int64_t longest = *std::max_element(lengths.begin(), lengths.end());
    EppChunkingOptions o;
    o.k = static_cast<int>(std::uniform_int_distribution<int64_t>(1, std::min<int64_t>(longest, 48))(rng));
    o.max_chunk_tokens = caps[trial % 4];
    o.relax_time_target = trial % 3 != 0;
    o.packed_light_first = trial % 2 == 0;
    o.drain_chunks = trial % 5 == 0 ? 4 : 0;
    o.drain_split = 3;
    SCOPED_TRACE("trial " + std::to_string(trial) + " K=" + std::to_string(o.k) + " cap=" +
                 std::to_string(o.max_chunk_tokens));
    const std::vector<Chunk> chunks = epp_chunks(lengths, o, cost);
    ASSERT_NO_THROW(check_coverage(chunks, lengths));
    for (const Chunk& c : chunks) {
      EXPECT_LE(split_slices(c), 1) << "two slices of split sequences share a chunk";
      if (o.max_chunk_tokens > 0) {
        EXPECT_LE(c.tokens(), o.max_chunk_tokens);
        ++capped_chunks;
      }
    }
  }
  EXPECT_GT(capped_chunks, 100);
}

TEST(EppChunking, DefaultOptionsAreThePaperAlgorithm) {
  std::mt19937_64 rng(32);
  const CostModel cost = CostModel::analytic(ModelShape::builtin("tiny"), Hardware::builtin("a800"), 2);
  for (int trial = 0; trial < 30; ++trial) {
    const std::vector<int64_t> lengths = random_lengths(rng, 30, 8192);
    const int k = 1 + trial % 8;
    EppChunkingOptions o;
    o.k = k;
    const std::vector<Chunk> a = epp_chunks(lengths, k, cost), b = epp_chunks(lengths, o, cost);
    ASSERT_EQ(a.size(), b.size());
    EXPECT_EQ(slice_counts(a), slice_counts(b));
    for (size_t c = 0; c < a.size(); ++c) EXPECT_EQ(a[c].tokens(), b[c].tokens());
  }
}

TEST(EppChunking, CappedMeshKeepsItsCutsAndSplitsOnlyLongSlices) {
  const CostModel cost = CostModel::analytic(ModelShape::builtin("llama-13b"), Hardware::builtin("a800"), 8);
  for (int64_t longest : {5000, 40000, 98304}) {
    for (int k : {1, 3, 8, 24}) {
      for (int64_t cap : {512, 1024, 3000}) {
        SCOPED_TRACE(std::to_string(longest) + " K=" + std::to_string(k) + " cap=" + std::to_string(cap));
        const SplitMesh mesh = cost_balanced_mesh(longest, k, cost);
        const SplitMesh capped = cap_mesh_slices(mesh, cap, cost);
        EXPECT_EQ(capped.time_target, mesh.time_target);
        for (int64_t b : mesh.boundaries)
          EXPECT_TRUE(std::binary_search(capped.boundaries.begin(), capped.boundaries.end(), b));
        int64_t longest_slice = 0;
        for (size_t i = 1; i < capped.boundaries.size(); ++i) {
          const int64_t len = capped.boundaries[i] - capped.boundaries[i - 1];
          ASSERT_GT(len, 0);
          EXPECT_LE(len, cap);
          longest_slice = std::max(longest_slice, len);
        }
        EXPECT_EQ(capped.token_cap, longest_slice);
        // A mesh slice within the cap is kept whole; one over it becomes at least
        // ceil(len / cap) pieces of near-equal cost.
        for (size_t j = 1; j < mesh.boundaries.size(); ++j) {
          const int64_t from = mesh.boundaries[j - 1], to = mesh.boundaries[j];
          const auto lo = std::lower_bound(capped.boundaries.begin(), capped.boundaries.end(), from);
          const auto hi = std::lower_bound(capped.boundaries.begin(), capped.boundaries.end(), to);
          const int64_t pieces = hi - lo;
          if (to - from <= cap) {
            EXPECT_EQ(pieces, 1);
            continue;
          }
          EXPECT_GE(pieces, (to - from + cap - 1) / cap);
          double most = 0, least = 1e30;
          for (auto it = lo; it != hi; ++it) {
            const double t = cost.slice_layer_time(*it, *(it + 1) - *it);
            most = std::max(most, t);
            least = std::min(least, t);
          }
          // Integer cuts: pieces differ by at most about one token at the slice's end context.
          EXPECT_LE(most - least, 2 * cost.slice_layer_time(to, 1) + 1e-12);
        }
      }
    }
  }
  EXPECT_THROW(cap_mesh_slices(cost_balanced_mesh(1000, 2, cost), 0, cost), Error);
}

TEST(EppChunking, StrictPackingKeepsEveryChunkWithinTheTimeTarget) {
  std::mt19937_64 rng(33);
  const CostModel cost = CostModel::analytic(ModelShape::builtin("llama-13b"), Hardware::builtin("a800"), 8);
  int relaxed_over = 0;
  for (int trial = 0; trial < 60; ++trial) {
    const std::vector<int64_t> lengths = random_lengths(rng, 60, 32768);
    const int64_t longest = *std::max_element(lengths.begin(), lengths.end());
    EppChunkingOptions o;
    o.k = 1 + trial % 24;
    if (o.k > longest) continue;
    const SplitMesh mesh = cost_balanced_mesh(longest, o.k, cost);
    // Integer cuts can put one token's cost (at the longest context) over T_t.
    const double target = mesh.time_target + cost.slice_layer_time(longest, 1);
    o.relax_time_target = false;
    for (const Chunk& c : epp_chunks(lengths, o, cost)) EXPECT_LE(slices_time(c, cost), target);
    o.relax_time_target = true;
    for (const Chunk& c : epp_chunks(lengths, o, cost)) relaxed_over += slices_time(c, cost) > target;
  }
  EXPECT_GT(relaxed_over, 0) << "the relaxing packer never went over T_t: the comparison shows nothing";
}

TEST(EppChunking, LightFirstAndDrainTaperOnlyReorderAndRepackPackedChunks) {
  std::mt19937_64 rng(34);
  const CostModel cost = CostModel::analytic(ModelShape::builtin("llama-13b"), Hardware::builtin("a800"), 8);
  int tapered = 0;
  for (int trial = 0; trial < 60; ++trial) {
    const std::vector<int64_t> lengths = random_lengths(rng, 200, 32768);
    EppChunkingOptions o;
    o.k = 1 + trial % 16;
    o.relax_time_target = trial % 2 == 0;
    const std::vector<Chunk> plain = epp_chunks(lengths, o, cost);
    o.packed_light_first = true;
    const std::vector<Chunk> light = epp_chunks(lengths, o, cost);
    EXPECT_EQ(slice_counts(plain), slice_counts(light));
    ASSERT_EQ(plain.size(), light.size());
    int64_t previous = 0;
    for (const Chunk& c : light) {
      if (!packed(c)) continue;
      EXPECT_GE(c.tokens(), previous) << "packed chunks not lightest first";
      previous = c.tokens();
    }
    int packed_chunks = 0;
    for (const Chunk& c : light) packed_chunks += packed(c);
    o.drain_chunks = 4;
    o.drain_split = 3;
    const std::vector<Chunk> drained = epp_chunks(lengths, o, cost);
    EXPECT_EQ(slice_counts(light), slice_counts(drained));
    if (packed_chunks < 4) continue;
    // All but the last four packed chunks stay as they were; the rest become up to 12 chunks at
    // the end, heaviest first.
    const size_t kept = light.size() - 4;
    ASSERT_GE(drained.size(), kept + 4);
    ASSERT_LE(drained.size(), kept + 12);
    for (size_t c = 0; c < kept; ++c) EXPECT_EQ(slice_counts({light[c]}), slice_counts({drained[c]}));
    for (size_t c = kept; c < drained.size(); ++c) {
      EXPECT_TRUE(packed(drained[c]));
      if (c > kept) {
        EXPECT_LE(slices_time(drained[c], cost), slices_time(drained[c - 1], cost) + 1e-15);
      }
    }
    tapered += drained.size() > light.size();
  }
  EXPECT_GT(tapered, 10);
}

TEST(EppChunking, BadKnobsAreErrors) {
  const CostModel cost = CostModel::analytic(ModelShape::builtin("tiny"), Hardware::builtin("a800"), 2);
  EppChunkingOptions o;
  o.k = 2;
  o.max_chunk_tokens = -5;
  EXPECT_THROW(epp_chunks({100, 2000}, o, cost), Error);
  o.max_chunk_tokens = 0;
  o.drain_chunks = -1;
  EXPECT_THROW(epp_chunks({100, 2000}, o, cost), Error);
}

// The search ranks settings by a bound that must never exceed what the simulator finds; if it
// did, a setting that fits as it is could be skipped. With max_k 6 every K, cap and packing
// mode is in the search, so EPP must be at least as fast as each that fits one wave without
// recompute.
TEST(EppSearch, NeverSlowerThanASettingThatFitsAsItIs) {
  std::mt19937_64 rng(35);
  int compared = 0, borrowed_compared = 0;
  for (int trial = 0; trial < 25; ++trial) {
    Instance inst = random_instance(rng);
    inst.options.max_k = 6;
    SCOPED_TRACE(inst.description);
    const PlanResult epp = plan_epp(inst.lengths, inst.cost, inst.options);
    const int64_t longest = *std::max_element(inst.lengths.begin(), inst.lengths.end());
    std::vector<Setting> settings;
    for (int k = 1; k <= std::min<int64_t>(6, longest); ++k) {
      for (int64_t cap : inst.options.chunk_token_caps) {
        for (bool strict : {false, true}) {
          Setting s;
          s.k = k;
          s.token_cap = cap;
          s.strict_packing = strict;
          settings.push_back(s);
        }
      }
    }
    for (Method baseline : {Method::kSeq1F1B, Method::kChunkFlow})
      for (Setting s : candidate_settings(baseline, longest)) {
        s.chunker = baseline;
        if (s.k <= inst.options.max_k) settings.push_back(s);
      }
    for (const Setting& s : settings) {
      const std::vector<Chunk> chunks = setting_chunks(Method::kEpp, inst.lengths, s, inst.cost);
      ScheduleOptions schedule_options;
      schedule_options.num_stages = inst.options.num_stages;
      Wave all(chunks.size());
      for (size_t c = 0; c < chunks.size(); ++c) all[c] = static_cast<int>(c);
      SimOptions sim_options;
      sim_options.memory_budget_bytes = inst.options.memory_budget_bytes;
      sim_options.record_events = false;
      const SimResult one = simulate(build_schedule(chunks, {all}, schedule_options), chunks,
                                     inst.cost, {}, sim_options);
      if (one.over_budget) continue;
      ++compared;
      ASSERT_TRUE(epp.feasible) << describe(Method::kEpp, s) << " fits but EPP found nothing";
      EXPECT_LE(epp.plan.step_time_s, one.step_time_s * (1 + 1e-9))
          << describe(Method::kEpp, s) << " takes " << one.step_time_s << " s, EPP "
          << describe(Method::kEpp, epp.plan.setting) << " " << epp.plan.step_time_s << " s";
      borrowed_compared += s.chunker != Method::kEpp;
    }
  }
  EXPECT_GE(compared, 100);
  EXPECT_GE(borrowed_compared, 50);
}

// The recompute EPP keeps was chosen by simulation among the tied programs (greedy, CBC) and the
// untied greedy: solving them again on the plan's own schedule finds nothing faster. (CBC is
// compared only when it proves its answer optimal: a time-limited answer can differ run to run.)
TEST(EppSearch, KeptRecomputeIsNeverSlowerThanTiedOrUntied) {
  std::mt19937_64 rng(36);
  int with_recompute = 0, untied_won = 0, tied_won = 0;
  for (int trial = 0; trial < 60 && with_recompute < 15; ++trial) {
    const Instance inst = random_instance(rng);
    SCOPED_TRACE(inst.description);
    const PlanResult epp = plan_epp(inst.lengths, inst.cost, inst.options);
    if (!epp.feasible || epp.plan.recompute_s == 0) continue;
    ++with_recompute;
    const Plan& plan = epp.plan;
    untied_won += plan.checkpoint_solver.rfind("untied", 0) == 0;
    tied_won += plan.checkpoint_solver.rfind("tied", 0) == 0;
    for (CheckpointMethod method : {CheckpointMethod::kStageAwareGreedy, CheckpointMethod::kUntiedGreedy,
                                    CheckpointMethod::kStageAware}) {
      CheckpointOptions o;
      o.method = method;
      o.memory_budget_bytes = inst.options.memory_budget_bytes;
      o.time_limit_s = inst.options.checkpoint_time_limit_s;
      const CheckpointResult ck = plan_checkpointing(plan.schedule, plan.chunks, inst.cost, o);
      if (!ck.feasible || (method == CheckpointMethod::kStageAware && ck.solver != "cbc")) continue;
      SimOptions sim_options;
      sim_options.memory_budget_bytes = inst.options.memory_budget_bytes;
      sim_options.record_events = false;
      const SimResult sim = simulate(plan.schedule, plan.chunks, inst.cost, ck.recompute, sim_options);
      EXPECT_LE(plan.step_time_s, sim.step_time_s * (1 + 1e-9))
          << ck.solver << " on the plan's schedule is faster than the kept " << plan.checkpoint_solver;
    }
  }
  EXPECT_GE(with_recompute, 8);
  EXPECT_EQ(untied_won + tied_won, with_recompute) << "the solver field does not say tied or untied";
}

TEST(EppSearch, PlanSettingGivesItsChunksAgainAndCapsHold) {
  std::mt19937_64 rng(37);
  int capped = 0, drained = 0;
  for (int trial = 0; trial < 40; ++trial) {
    Instance inst = random_instance(rng);
    inst.options.chunk_token_caps = {0, 512};
    SCOPED_TRACE(inst.description);
    const PlanResult epp = plan_epp(inst.lengths, inst.cost, inst.options);
    if (!epp.feasible) continue;
    const Setting& s = epp.plan.setting;
    capped += s.token_cap > 0;
    drained += s.drain_chunks > 0;
    const std::vector<Chunk> again = setting_chunks(Method::kEpp, inst.lengths, s, inst.cost);
    ASSERT_EQ(again.size(), epp.plan.chunks.size());
    EXPECT_EQ(slice_counts(again), slice_counts(epp.plan.chunks));
    for (size_t c = 0; c < again.size(); ++c) EXPECT_EQ(slice_counts({again[c]}), slice_counts({epp.plan.chunks[c]}));
    if (s.token_cap > 0) {
      for (const Chunk& c : epp.plan.chunks) EXPECT_LE(c.tokens(), s.token_cap);
    }
    if (epp.plan.waves.size() == 1 && epp.plan.recompute_s == 0) {
      const PlanResult same = plan_epp_at(inst.lengths, s, inst.cost, inst.options);
      ASSERT_TRUE(same.feasible) << same.reason;
      EXPECT_EQ(same.plan.hash(), epp.plan.hash());
    }
  }
  // The instances must take each knob somewhere, or the checks above prove little.
  EXPECT_GT(capped, 0);
  EXPECT_GT(drained, 0);
}

TEST(EppSearch, NegativeCapIsAnError) {
  const CostModel cost = CostModel::analytic(ModelShape::builtin("tiny"), Hardware::builtin("a800"), 2);
  PlannerOptions o;
  o.num_stages = 2;
  o.memory_budget_bytes = 1e12;
  o.chunk_token_caps = {0, -1024};
  EXPECT_THROW(plan_epp({100, 2000}, cost, o), Error);
}

}  // namespace
}  // namespace infinipipe
