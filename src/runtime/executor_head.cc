// The spread head's actions (docs/design.md, "Spread head"): H runs a chunk's LM head and loss
// on the stage the plan chose, SEND_H / SEND_HG carry its hidden state there and its gradient
// back; their receives are executor.cc's recv.
#include "executor_step.h"

#include <memory>
#include <string>
#include <vector>

#include <ATen/ATen.h>
#include <torch/csrc/autograd/autograd.h>
#include <torch/csrc/autograd/grad_mode.h>

#include "infinipipe/core/error.h"
#include "infinipipe/runtime/next_token_loss.h"

namespace infinipipe::runtime {

// The head's whereabouts before any communication: a module without the head where the plan
// runs one, and head transfers whose peers contradict the plan's H actions, are errors here
// rather than receives that never complete.
void Executor::Step::check_head_actions(const std::string& where) const {
  const int stage = opt_.stage;
  const int last = opt_.num_stages - 1;
  const bool has_head = ex_.module_->has_head();
  const auto chunk_text = [](int c) { return "chunk " + std::to_string(c); };
  if (last_stage_)
    for (int c = 0; c < static_cast<int>(head_stage_.size()); ++c)
      check(head_spread(c) || has_head,
            where + "the last stage computes " + chunk_text(c) +
                "'s head and loss in its forward (no H action runs it elsewhere) but its module "
                "has no LM head");
  for (const Action& a : plan_.schedule.stages[stage]) {
    const int c = a.chunk;
    const std::string action = "action " + a.text() + ": ";
    switch (a.type) {
      case ActionType::kHead:
        check(head_stage_[c] == stage, where + action + chunk_text(c) + "'s head also runs on " +
                                           stage_text(head_stage_[c]) +
                                           "; a chunk's head runs on one stage");
        check(has_head, where + action + "the plan runs " + chunk_text(c) +
                            "'s LM head on this stage but its module has no head; build every "
                            "stage with a replica of the final norm and the LM head (spread "
                            "head: Trainer(spread_head=True))");
        break;
      case ActionType::kSendHead:
      case ActionType::kRecvHeadGrad:
        check(last_stage_ && head_spread(c) && head_stage_[c] != stage &&
                  a.peer_stage == head_stage_[c],
              where + action +
                  "only the last stage sends a chunk's hidden state to the stage of "
                  "its H action and receives its gradient from there; " +
                  chunk_text(c) + "'s head is " +
                  (head_spread(c) ? "on " + stage_text(head_stage_[c])
                                  : std::string("computed by the last stage's forward")));
        break;
      case ActionType::kRecvHead:
      case ActionType::kSendHeadGrad:
        check(!last_stage_ && head_stage_[c] == stage && a.peer_stage == last,
              where + action +
                  "only the stage of a chunk's H action, when it is not the last, "
                  "receives the hidden state from the last stage (" +
                  stage_text(last) + ") and sends its gradient back");
        break;
      default:
        break;
    }
  }
}

// The context of a chunk's H on a stage that does not run its layers: its rows, no K/V buffers
// (the head attends nothing).
std::shared_ptr<ChunkContext> Executor::Step::make_head_context(int chunk) const {
  return std::make_shared<ChunkContext>(
      plan_.chunks[chunk].slices, std::vector<kernels::SliceBuffers>{}, context_options(chunk));
}

// SEND_H on the last stage: the chunk's last hidden state to its head stage.
void Executor::Step::send_head(const Action& action) {
  auto it = ex_.chunks_.find(action.chunk);
  check(it != ex_.chunks_.end(),
        stage_text(opt_.stage) + ": " + action.text() + " before its forward");
  ex_.head_pipes_.send(message_tag(action.chunk, Direction::kHeadHidden),
                       it->second->output.detach(), ex_.rank_of_stage(action.peer_stage));
  // Evaluating, the last stage is done with the chunk once its hidden state is on its way.
  if (forward_only_) ex_.chunks_.erase(it);
}

// SEND_HG on the head stage: the gradient its H left, back to the last stage.
void Executor::Step::send_head_grad(const Action& action) {
  auto it = ex_.head_grads_.find(action.chunk);
  check(it != ex_.head_grads_.end(),
        stage_text(opt_.stage) + ": " + action.text() + " before H" + std::to_string(action.chunk));
  ex_.head_pipes_.send(message_tag(action.chunk, Direction::kHeadGradient), it->second,
                       ex_.rank_of_stage(action.peer_stage));
  ex_.head_grads_.erase(it);
}

// The head, the chunk's loss (summed over its rows' targets, divided by the step's target
// tokens: the chunks' losses add up to the step's mean) and its part of the step's loss.
at::Tensor Executor::Step::head_loss(int chunk, const at::Tensor& hidden, ChunkContext& ctx) {
  at::Tensor logits = ex_.module_->head(hidden, ctx);
  check(logits.dim() == 2 && logits.size(0) == chunk_rows(chunk),
        stage_text(opt_.stage) + ": the head must return logits [tokens, vocab]");
  const at::Tensor targets = shard_targets(ctx.rows(), sequences_).to(opt_.device);
  at::Tensor loss = next_token_loss(logits, targets, static_cast<double>(loss_tokens_));
  loss_sum_ += loss.detach().item<double>();
  return loss;
}

// H's compute on a hidden state without history: the head's forward and loss, then (training)
// their backward, which adds to the head's parameter gradients and returns d(loss)/d(hidden).
at::Tensor Executor::Step::run_head(int chunk, at::Tensor hidden, ChunkContext& ctx) {
  if (!forward_only_) hidden.requires_grad_(true);
  at::Tensor loss;
  {
    Timer t(stats_.forward_s);
    at::AutoGradMode grad(!forward_only_);
    loss = head_loss(chunk, hidden, ctx);
  }
  if (forward_only_) return at::Tensor();
  Timer t(stats_.backward_s);
  at::AutoGradMode grad(true);
  torch::autograd::backward({loss});
  check(hidden.grad().defined(), stage_text(opt_.stage) + ": chunk " + std::to_string(chunk) +
                                     "'s head produced no gradient of its hidden state");
  return hidden.grad();
}

// H c: on the last stage from its own forward's output (its B then starts from the gradient),
// elsewhere from the hidden state RECV_H posted the receive of (SEND_HG sends the gradient).
void Executor::Step::head(int chunk) {
  if (!last_stage_) {
    at::Tensor hidden;
    {
      Timer t(stats_.wait_s);
      hidden = ex_.head_pipes_.wait_recv(message_tag(chunk, Direction::kHeadHidden));
    }
    const std::shared_ptr<ChunkContext> ctx = make_head_context(chunk);
    at::Tensor grad = run_head(chunk, hidden, *ctx);
    ctx->module_state.reset();
    if (grad.defined()) ex_.head_grads_[chunk] = grad;
    return;
  }
  auto it = ex_.chunks_.find(chunk);
  check(it != ex_.chunks_.end() && !it->second->head_done,
        stage_text(opt_.stage) + ": H" + std::to_string(chunk) +
            (it == ex_.chunks_.end() ? " before its forward" : " twice"));
  ChunkState& st = *it->second;
  st.head_grad = run_head(chunk, st.output.detach(), *st.ctx);
  st.head_done = true;
  if (forward_only_) ex_.chunks_.erase(it);  // evaluating: nothing else needs the chunk
}

}  // namespace infinipipe::runtime
