// Layer splits from per-stage costs: water filling against brute force, the head's stage, and the
// choice over sample steps through the planner.
#include "infinipipe/planner/stage_balance.h"

#include <algorithm>
#include <functional>
#include <limits>
#include <random>

#include <gtest/gtest.h>

#include "infinipipe/core/error.h"
#include "support/a800_cost.h"
#include "support/random_lengths.h"

namespace infinipipe {
namespace {

using test_support::a800_cost;

// The least busiest-stage load over every split of `layers` into work's stages (each >= 1).
double brute_force_busiest(const StageWork& work, int layers) {
  const int stages = static_cast<int>(work.layer_s.size());
  std::vector<int> split(stages, 1);
  double best = std::numeric_limits<double>::infinity();
  std::function<void(int, int)> fill = [&](int p, int left) {
    if (p == stages - 1) {
      split[p] = left;
      best = std::min(best, work.busiest_s(split));
      return;
    }
    for (int l = 1; l <= left - (stages - 1 - p); ++l) {
      split[p] = l;
      fill(p + 1, left - l);
    }
  };
  fill(0, layers);
  return best;
}

TEST(StageBalance, WaterFillingIsExactAgainstBruteForce) {
  std::mt19937_64 rng(5);
  std::uniform_real_distribution<double> unit(0.0, 1.0);
  for (int trial = 0; trial < 2000; ++trial) {
    const int stages = std::uniform_int_distribution<int>(1, 5)(rng);
    const int layers = std::uniform_int_distribution<int>(stages, 12)(rng);
    StageWork work;
    // Mostly identical layers with a heavy first or last stage (the real case), sometimes
    // layers of different cost per stage (SP links) and exact ties.
    const bool identical = unit(rng) < 0.7;
    const double layer = 0.5 + unit(rng);
    for (int p = 0; p < stages; ++p) {
      work.layer_s.push_back(identical ? layer : 0.5 + unit(rng));
      work.fixed_s.push_back(0.0);
    }
    work.fixed_s.back() += unit(rng) < 0.2 ? 2 * layer : 3 * layer * unit(rng);
    work.fixed_s.front() += unit(rng) < 0.5 ? 0.0 : layer * unit(rng);
    const std::vector<int> split = balanced_layer_split(work, layers);
    ASSERT_EQ(static_cast<int>(split.size()), stages);
    int sum = 0;
    for (int l : split) {
      EXPECT_GE(l, 1);
      sum += l;
    }
    EXPECT_EQ(sum, layers);
    EXPECT_EQ(work.busiest_s(split), brute_force_busiest(work, layers))
        << "trial " << trial << ", " << stages << " stages, " << layers << " layers";
  }
}

TEST(StageBalance, TiesGoToLaterStagesAndBadInputThrows) {
  StageWork flat{{1.0, 1.0, 1.0}, {0.0, 0.0, 0.0}};
  EXPECT_EQ(balanced_layer_split(flat, 4), (std::vector<int>{1, 1, 2}));
  EXPECT_EQ(balanced_layer_split(flat, 5), (std::vector<int>{1, 2, 2}));
  EXPECT_THROW(balanced_layer_split(flat, 2), Error);
  StageWork bad{{1.0, -1.0}, {0.0, 0.0}};
  EXPECT_THROW(balanced_layer_split(bad, 4), Error);
}

TEST(StageBalance, StageWorkPutsTheEmbeddingFirstAndTheHeadLast) {
  const CostModel cost = a800_cost("llama-13b", 4);
  const std::vector<std::vector<int64_t>> steps = {{4096, 100, 30000}, {512}};
  const StageWork work = stage_work(steps, cost);
  const CostCoefficients& k = cost.coefficients();
  double tokens = 4096 + 100 + 30000 + 512;
  ASSERT_EQ(work.layer_s.size(), 4u);
  for (int p = 1; p < 4; ++p) EXPECT_EQ(work.layer_s[p], work.layer_s[0]);
  // The head and the embedding, forward and backward, of each step's tokens as one chunk: whole
  // steps of 34708 and 512 tokens, the head's GEMM at the curve's top and at 512 rows.
  double head = 0;
  for (const auto& step : steps) {
    double n = 0;
    for (int64_t length : step) n += double(length);
    head += n * k.head_s_per_token *
            (k.backward_gemm_s_per_token.at(n) / k.gemm_s_per_token.last() +
             k.gemm_s_per_token.at(n) / k.gemm_s_per_token.last());
  }
  EXPECT_DOUBLE_EQ(work.fixed_s[3], head);
  EXPECT_GT(work.fixed_s[3], (1 + k.backward_ratio) * tokens * k.head_s_per_token);
  EXPECT_EQ(work.fixed_s[1], 0.0);
  EXPECT_DOUBLE_EQ(work.fixed_s[0], (1 + k.backward_ratio) * tokens * k.embedding_s_per_token);
  // A layer's work is what the cost model charges one whole-sequence chunk per step.
  double layer = 0;
  for (const auto& step : steps) {
    Chunk c;
    for (size_t i = 0; i < step.size(); ++i)
      c.slices.push_back({static_cast<int>(i), 0, step[i], step[i]});
    layer += cost.layer_forward_time(c) + cost.layer_backward_time(c);
  }
  EXPECT_DOUBLE_EQ(work.layer_s[0], layer);
  EXPECT_EQ(work.stage_s(cost.layers_per_stage())[2], 10 * layer);
}

TEST(StageBalance, AnIdealEvenHeadIsEveryStagesShareAndSurvivesASplit) {
  const CostModel cost = a800_cost("llama3-8b", 4).with_ideal_even_head();
  const std::vector<std::vector<int64_t>> steps = {{4096, 100, 30000}};
  const StageWork work = stage_work(steps, cost);
  const CostCoefficients& k = cost.coefficients();
  const double head = (1 + k.backward_ratio) * (4096 + 100 + 30000) * k.head_s_per_token;
  EXPECT_DOUBLE_EQ(work.fixed_s[3], head / 4);
  EXPECT_DOUBLE_EQ(work.fixed_s[1], head / 4);
  // With no head of its own the last stage keeps its layers: the split stays even.
  EXPECT_EQ(balanced_layer_split(steps, cost), std::vector<int>({8, 8, 8, 8}));
  EXPECT_TRUE(with_layer_split(cost, {7, 9, 8, 8}).ideal_even_head());
  EXPECT_FALSE(with_layer_split(a800_cost("llama3-8b", 4), {7, 9, 8, 8}).ideal_even_head());
  // So do a spread-head trainer's replicas (their memory and sync), which a split once dropped.
  const CostModel replicas = a800_cost("llama3-8b", 4).with_head_replicas();
  EXPECT_TRUE(with_layer_split(replicas, {7, 9, 8, 8}).head_replicas());
  EXPECT_FALSE(with_layer_split(a800_cost("llama3-8b", 4), {7, 9, 8, 8}).head_replicas());
}

TEST(StageBalance, LargeVocabularyMovesLayersOffTheLastStage) {
  std::mt19937_64 rng(3);
  const std::vector<std::vector<int64_t>> steps = {test_support::random_lengths(rng, 64, 32768)};
  // LLaMA-3-8B: the 128K vocabulary's head is about two layers, so the last stage gives some up.
  const CostModel llama3 = a800_cost("llama3-8b", 8);
  const std::vector<int> split = balanced_layer_split(steps, llama3);
  EXPECT_LT(split.back(), 4) << "the last stage keeps all its layers";
  const StageWork work = stage_work(steps, llama3);
  EXPECT_LT(work.busiest_s(split), work.busiest_s(llama3.layers_per_stage()));
  // LLaMA-13B on 8 stages: the head is under half a layer, and a stage of 5 layers cannot give
  // one up without another holding 6: the even split is already the balanced one.
  const CostModel l13 = a800_cost("llama-13b", 8);
  EXPECT_EQ(balanced_layer_split(steps, l13), l13.layers_per_stage());
}

TEST(StageBalance, CandidatesAreDistinctAndBounded) {
  std::mt19937_64 rng(9);
  const std::vector<std::vector<int64_t>> steps = {test_support::random_lengths(rng, 32, 16384),
                                                   test_support::random_lengths(rng, 32, 16384)};
  const CostModel cost = a800_cost("llama3-8b", 4);
  const auto candidates = layer_split_candidates(steps, cost);
  ASSERT_GE(candidates.size(), 2u);
  EXPECT_EQ(candidates[0].name, "balanced");
  for (size_t i = 0; i < candidates.size(); ++i) {
    for (size_t j = 0; j < i; ++j) EXPECT_NE(candidates[i].split, candidates[j].split);
    // The balanced split has the least summed busiest-stage compute; per step it is a bound.
    EXPECT_GE(stage_work(steps, cost).busiest_s(candidates[i].split),
              stage_work(steps, cost).busiest_s(candidates[0].split));
    EXPECT_GT(candidates[i].bound_s, 0);
  }
}

TEST(StageBalance, ChoiceThroughThePlannerIsDeterministicAndNeverSlowerThanEven) {
  std::mt19937_64 rng(13);
  std::vector<std::vector<int64_t>> steps;
  for (int i = 0; i < 2; ++i) steps.push_back(test_support::random_lengths(rng, 24, 16384));
  const CostModel cost = a800_cost("llama3-8b", 4);
  const PlannerOptions options = PlannerOptions::for_training(4, 80.0 * (1 << 30));
  const LayerSplitChoice a = choose_layer_split(steps, cost, options);
  const LayerSplitChoice b = choose_layer_split(steps, cost, options);
  EXPECT_EQ(a.split, b.split);
  EXPECT_EQ(a.name, b.name);
  const LayerSplitCandidate* chosen = nullptr;
  const LayerSplitCandidate* even = nullptr;
  for (const LayerSplitCandidate& c : a.candidates) {
    if (c.split == a.split) chosen = &c;
    if (c.name == "even") even = &c;
    if (c.planned && c.feasible_steps == 2) EXPECT_GE(c.mean_step_s, c.bound_s * (1 - 1e-12));
  }
  ASSERT_NE(chosen, nullptr);
  ASSERT_NE(even, nullptr);
  ASSERT_TRUE(chosen->planned);
  EXPECT_EQ(chosen->feasible_steps, 2);
  ASSERT_EQ(a.plans.size(), 2u);
  for (const PlanResult& r : a.plans) EXPECT_EQ(r.plan.layers_per_stage, a.split);
  EXPECT_DOUBLE_EQ((a.plans[0].plan.step_time_s + a.plans[1].plan.step_time_s) / 2,
                   chosen->mean_step_s);
  // Skipped only when its bound could not beat the chosen one.
  if (!even->planned) EXPECT_GE(even->bound_s, chosen->mean_step_s);
  if (even->planned) EXPECT_LE(chosen->mean_step_s, even->mean_step_s);
  EXPECT_THROW(choose_layer_split({}, cost, options), Error);
}

TEST(StageBalance, WithTheSpreadHeadEverySplitIsPlanned) {
  // The bounds keep the head on the last stage, so with the spread head none may skip a split.
  std::mt19937_64 rng(13);
  std::vector<std::vector<int64_t>> steps = {test_support::random_lengths(rng, 24, 16384)};
  const CostModel cost = a800_cost("llama3-8b", 4);
  PlannerOptions options = PlannerOptions::for_training(4, 80.0 * (1 << 30));
  options.spread_head = true;
  const LayerSplitChoice choice = choose_layer_split(steps, cost, options);
  for (const LayerSplitCandidate& c : choice.candidates) EXPECT_TRUE(c.planned) << c.name;
}

}  // namespace
}  // namespace infinipipe
