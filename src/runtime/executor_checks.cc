// What the executor refuses before any communication: options that cannot describe a stage and
// plans that do not fit this stage's module, the batch or the backend's message matching. Every
// rank of the pipeline checks the same plan, so every rank refuses it alike. check_inputs also
// keeps what it works out on the way for the step (target tokens, split sequences, head stages).
#include "executor_step.h"

#include <string>

#include <ATen/ATen.h>

#include "infinipipe/core/error.h"
#include "infinipipe/runtime/message_order.h"

namespace infinipipe::runtime {

void ExecutorOptions::validate() const {
  check(num_stages >= 1,
        "executor: num_stages must be at least 1, got " + std::to_string(num_stages));
  check(stage >= 0 && stage < num_stages, "executor: stage " + std::to_string(stage) +
                                              " is out of range for " + std::to_string(num_stages) +
                                              " stages");
  check(hidden > 0, "executor: hidden must be positive, got " + std::to_string(hidden));
  check(kv_heads > 0, "executor: kv_heads must be positive, got " + std::to_string(kv_heads));
  check(head_dim > 0, "executor: head_dim must be positive, got " + std::to_string(head_dim));
  check(at::isFloatingType(dtype), "executor: dtype must be a floating type");
  check(timeout.count() > 0, "executor: the timeout must be positive");
  check(stage_ranks.empty() || static_cast<int>(stage_ranks.size()) == num_stages,
        "executor: stage_ranks must list one rank per stage (" + std::to_string(num_stages) +
            "), got " + std::to_string(stage_ranks.size()));
  if (sequence_group) {
    // Before any communication: a degree that does not divide the K/V heads cannot shard them.
    const int d_s = sequence_group->getSize();
    check(kv_heads % d_s == 0,
          "executor: the sequence-parallel degree " + std::to_string(d_s) +
              " must divide kv_heads (" + std::to_string(kv_heads) +
              "): each rank of a stage attends with kv_heads / d_s key/value heads; use a "
              "degree that divides " +
              std::to_string(kv_heads));
    check(sequence_ranks.empty() || static_cast<int>(sequence_ranks.size()) == d_s,
          "executor: sequence_ranks must list the global rank of each of the sequence group's " +
              std::to_string(d_s) + " ranks, got " + std::to_string(sequence_ranks.size()));
  }
}

void Executor::Step::check_inputs() {
  const int stage = opt_.stage;
  const std::string where = "plan " + plan_.hash() + ", " + stage_text(stage) + ": ";
  // Virtual stages are planned and validated (docs/design.md, "Virtual stages"), not yet run.
  check(plan_.schedule.ranks.empty(),
        where + "the plan places its " + std::to_string(plan_.schedule.num_stages()) +
            " stages on " + std::to_string(plan_.schedule.num_ranks()) +
            " ranks (virtual stages), which this executor does not run yet; plan one stage per "
            "rank");
  check(plan_.schedule.num_stages() == opt_.num_stages,
        where + "the plan is for " + std::to_string(plan_.schedule.num_stages()) +
            " stages but this pipeline has " + std::to_string(opt_.num_stages));
  check(static_cast<int>(plan_.layers_per_stage.size()) == opt_.num_stages &&
            plan_.layers_per_stage[stage] == ex_.module_->num_layers(),
        where + "the plan gives this stage " +
            (static_cast<int>(plan_.layers_per_stage.size()) > stage
                 ? std::to_string(plan_.layers_per_stage[stage])
                 : std::string("no")) +
            " layers but its module has " + std::to_string(ex_.module_->num_layers()) +
            "; plan with the model's layer split");
  check(ex_.module_->has_embedding() == (stage == 0),
        where + "the first stage, and only it, must hold the embedding");
  check(sequences_.size() == plan_.lengths.size(),
        where + "the plan has " + std::to_string(plan_.lengths.size()) + " sequences but " +
            std::to_string(sequences_.size()) + " were given");
  for (size_t i = 0; i < sequences_.size(); ++i) {
    const at::Tensor& s = sequences_[i];
    check(s.defined() && s.dim() == 1 && s.scalar_type() == at::kLong &&
              s.size(0) == plan_.lengths[i],
          where + "sequence " + std::to_string(i) + " must be a 1-D int64 tensor of " +
              std::to_string(plan_.lengths[i]) + " tokens (the plan's length)");
    target_tokens_ += plan_.lengths[i] - 1;
  }
  check(target_tokens_ > 0, where +
                                "the batch has no target tokens (every sequence has one "
                                "token); give sequences of at least two tokens");
  check(loss_tokens_ == 0 || loss_tokens_ >= target_tokens_,
        where + "the loss is averaged over " + std::to_string(loss_tokens_) +
            " target tokens but the plan alone has " + std::to_string(target_tokens_) +
            "; give the whole batch's count (or 0 for the plan's)");
  if (loss_tokens_ == 0) loss_tokens_ = target_tokens_;
  const int n = static_cast<int>(plan_.chunks.size());
  check(plan_.recompute.empty() || (static_cast<int>(plan_.recompute.size()) == opt_.num_stages &&
                                    static_cast<int>(plan_.recompute[stage].size()) == n),
        where + "recompute must be [stages][chunks]");
  for (int c = 0; c < n; ++c) {
    const int r = recompute_layers(plan_.recompute, stage, c);
    check(r >= 0 && r <= ex_.module_->num_layers(),
          where + "chunk " + std::to_string(c) + " checkpoints " + std::to_string(r) +
              " layers but the stage has " + std::to_string(ex_.module_->num_layers()));
  }
  split_.assign(plan_.lengths.size(), false);
  for (const Chunk& chunk : plan_.chunks)
    for (const Slice& s : chunk.slices) {
      check(s.seq >= 0 && s.seq < static_cast<int>(plan_.lengths.size()) && s.start >= 0 &&
                s.end > s.start && s.end <= plan_.lengths[s.seq],
            where + "a slice lies outside its sequence");
      if (!s.whole()) split_[s.seq] = true;
    }
  // Every action must refer to a chunk of the plan.
  for (const Action& a : plan_.schedule.stages[stage])
    check(a.chunk >= 0 && a.chunk < n,
          where + "action " + a.text() + " names a chunk the plan does not have");
  has_weight_.assign(n, 0);
  for (const Action& a : plan_.schedule.stages[stage])
    if (a.type == ActionType::kWeight) has_weight_[a.chunk] = 1;
  head_stage_ = plan_.schedule.head_stages(n);
  check_head_actions(where);
  check_message_order(where);
}

// On NCCL (CUDA tensors go through it) messages between two ranks match in issue order, tags
// ignored: a schedule that sends them in another order than they are received would exchange
// their contents (message_order.h). Every rank checks every pair, so all refuse the plan alike.
// Gloo matches tags, CUDA tensors included (Pipes stages them through host memory).
void Executor::Step::check_message_order(const std::string& where) const {
  const bool in_issue_order = ex_.pipes_.group()->getBackendName() == "nccl" ||
                              (opt_.device.is_cuda() && !ex_.pipes_.stages_through_host());
  if (!in_issue_order) return;
  const std::string conflict =
      message_order_conflict(plan_.schedule, ex_.options_.head_group != nullptr);
  check(conflict.empty(), where +
                              "NCCL matches the messages between two ranks in the order "
                              "they are sent, whatever their tags, but " +
                              conflict + "; the schedule must send in the order its peer receives");
}

}  // namespace infinipipe::runtime
