#include "infinipipe/cost/parallel_layout.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "infinipipe/core/error.h"
#include "support/error_of.h"

namespace infinipipe {
namespace {

using test_support::error_of;
using test_support::expect_error;

ParallelLayout layout(int sequence, int data = 1, int zero = 1, int gpus_per_node = 8) {
  ParallelLayout l;
  l.sequence = sequence;
  l.data = data;
  l.zero = zero;
  l.gpus_per_node = gpus_per_node;
  return l;
}

TEST(ParallelLayout, DefaultIsOneRankPerStageAndValid) {
  const ParallelLayout l;
  EXPECT_EQ(l.sequence, 1);
  EXPECT_EQ(l.data, 1);
  EXPECT_EQ(l.gradient_group(), 1);
  EXPECT_NO_THROW(l.validate());
  EXPECT_EQ(l.describe(4), "d_s=1 x d_p=4 x d_r=1, ZeRO-1, 8 GPUs per node");
}

TEST(ParallelLayout, ValidateNamesTheField) {
  expect_error([] { layout(0).validate(); }, {"sequence", "got 0"});
  expect_error([] { layout(1, 0).validate(); }, {"data", "got 0"});
  expect_error([] { layout(1, 1, 4).validate(); }, {"ZeRO level", "got 4"});
  expect_error([] { layout(1, 1, 1, 0).validate(); }, {"gpus_per_node"});
}

TEST(ParallelLayout, SequenceDegreeMustDivideHeadsAndKvHeads) {
  // LLaMA-30B has 52 heads: 8 does not divide them, 4 does.
  expect_error([] { layout(8).check_fits(ModelShape::builtin("llama-30b")); },
               {"d_s = 8", "52 heads", "llama-30b"});
  EXPECT_NO_THROW(layout(4).check_fits(ModelShape::builtin("llama-30b")));
  // tiny: 4 heads, 2 KV heads: d_s = 4 divides the heads but not the KV heads.
  expect_error([] { layout(4).check_fits(ModelShape::builtin("tiny")); },
               {"d_s = 4", "2 KV heads"});
  EXPECT_NO_THROW(layout(2).check_fits(ModelShape::builtin("tiny")));
  EXPECT_NO_THROW(layout(8).check_fits(ModelShape::builtin("llama-13b")));
}

TEST(ParallelLayout, RanksPlaceSequenceInnermostThenStagesThenReplicas) {
  ParallelLayout l;
  l.sequence = 2;
  l.data = 2;
  const int stages = 2;
  ASSERT_EQ(l.world(stages), 8);
  for (int rank = 0; rank < 8; ++rank) {
    const ParallelLayout::Place p = l.place(rank, stages);
    EXPECT_EQ(p.replica, rank / 4);
    EXPECT_EQ(p.stage, (rank / 2) % 2);
    EXPECT_EQ(p.sequence_rank, rank % 2);
    EXPECT_EQ(l.rank_of(p, stages), rank);
  }
  // Rank 5: replica 1, stage 0, sequence rank 1 (as python/infinipipe/distributed/layout.py
  // numbers it).
  EXPECT_EQ(l.pipeline_ranks(5, stages), (std::vector<int>{5, 7}));
  EXPECT_EQ(l.sequence_ranks(5, stages), (std::vector<int>{4, 5}));
  EXPECT_EQ(l.gradient_ranks(0, stages), (std::vector<int>{0, 1, 4, 5}));
  EXPECT_THROW(l.place(8, stages), Error);
  EXPECT_THROW(l.place(-1, stages), Error);
}

TEST(ParallelLayout, NodeCrossingsFollowTheRankOrder) {
  // d_s = 8 on 8-GPU nodes: every SP group is a node, every stage boundary crosses nodes.
  const ParallelLayout node_per_stage = layout(8);
  for (int p = 0; p < 4; ++p) {
    EXPECT_FALSE(node_per_stage.sequence_group_crosses_nodes(p, 4));
    if (p < 3) EXPECT_TRUE(node_per_stage.boundary_crosses_nodes(p, 4));
  }
  // d_s = 4: stages 0 and 1 share node 0, stages 2 and 3 node 1.
  const ParallelLayout half = layout(4);
  EXPECT_FALSE(half.boundary_crosses_nodes(0, 4));
  EXPECT_TRUE(half.boundary_crosses_nodes(1, 4));
  EXPECT_FALSE(half.boundary_crosses_nodes(2, 4));
  // d_s = 16: the group itself spans two nodes.
  EXPECT_TRUE(layout(16).sequence_group_crosses_nodes(0, 2));
  // d_s = 3: stage 2's group is ranks 6, 7, 8, across the node edge at 8.
  EXPECT_FALSE(layout(3).sequence_group_crosses_nodes(1, 4));
  EXPECT_TRUE(layout(3).sequence_group_crosses_nodes(2, 4));
  // d_s = 1: only the boundary at the node edge; with replicas, each replica's own edges count.
  EXPECT_FALSE(layout(1).boundary_crosses_nodes(6, 16));
  EXPECT_TRUE(layout(1).boundary_crosses_nodes(7, 16));
  EXPECT_FALSE(layout(1).boundary_crosses_nodes(1, 4));
  // 3 stages per replica: replica 2's stage 1 -> 2 is ranks 7 -> 8.
  EXPECT_FALSE(layout(1, 2).boundary_crosses_nodes(1, 3));
  EXPECT_TRUE(layout(1, 3).boundary_crosses_nodes(1, 3));
}

TEST(ParallelLayout, AGradientGroupCrossesNodesWhenItsReplicasDo) {
  // Without replicas the gradient group is the SP group.
  EXPECT_FALSE(layout(8).gradient_group_crosses_nodes(0, 4));
  EXPECT_TRUE(layout(16).gradient_group_crosses_nodes(0, 2));
  // d_s = 4 x d_p = 4 x d_r = 2: stage 0 is ranks 0-3 and 16-19, two nodes.
  EXPECT_TRUE(layout(4, 2).gradient_group_crosses_nodes(0, 4));
  // d_s = 2 x d_p = 1 x d_r = 2: ranks 0-1 and 2-3, one node.
  EXPECT_FALSE(layout(2, 2).gradient_group_crosses_nodes(0, 1));
}

TEST(ParallelLayout, ModelStatePerRankFollowsTheZeroEquations) {
  // 1000 parameters at 16 bytes (bf16 weight 2, gradient 2, optimizer 12), N = 8 x 2 = 16.
  const double psi = 1000;
  EXPECT_DOUBLE_EQ(model_state_bytes_per_rank(psi, 16, 2, layout(8, 2, 0)), 16000);
  EXPECT_DOUBLE_EQ(model_state_bytes_per_rank(psi, 16, 2, layout(8, 2, 1)), 4000 + 12000 / 16.0);
  EXPECT_DOUBLE_EQ(model_state_bytes_per_rank(psi, 16, 2, layout(8, 2, 2)), 2000 + 14000 / 16.0);
  EXPECT_DOUBLE_EQ(model_state_bytes_per_rank(psi, 16, 2, layout(8, 2, 3)), 16000 / 16.0);
  // One rank per gradient group: nothing to shard, at any level.
  for (int zero = 0; zero <= 3; ++zero)
    EXPECT_EQ(model_state_bytes_per_rank(psi, 16, 2, layout(1, 1, zero)), 16000);
  // Fewer bytes than weights and gradients leave no optimizer state to shard.
  expect_error([&] { model_state_bytes_per_rank(psi, 3, 2, layout(2)); },
               {"less than weights plus gradients", "ZeRO-1"});
}

TEST(ParallelLayout, JsonRoundTripsAndRejectsBadFields) {
  const ParallelLayout l = layout(8, 4, 2, 4);
  EXPECT_EQ(nlohmann::json(l).get<ParallelLayout>(), l);
  nlohmann::json j = l;
  j["pipeline"] = 4;
  expect_error([&] { j.get<ParallelLayout>(); }, {"unknown field 'pipeline'"});
  j = l;
  j["zero"] = 7;
  expect_error([&] { j.get<ParallelLayout>(); }, {"ZeRO level", "got 7"});
}

}  // namespace
}  // namespace infinipipe
