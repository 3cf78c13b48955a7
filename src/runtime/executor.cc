// Over 400 lines for a reason: the step's state machine (Executor::Step: forward, backward, the
// pipe transfers, the run), whose actions share the step's bookkeeping, and the Executor that runs
// it; executor.h lists the actions. executor_step.h declares the step; its input checks and the
// spread head's actions have files of their own.
#include "infinipipe/runtime/executor.h"

#include <ATen/ATen.h>
#include <torch/csrc/autograd/autograd.h>
#include <torch/csrc/autograd/grad_mode.h>

#include <algorithm>
#include <chrono>
#include <set>

#include "executor_step.h"
#include "infinipipe/core/error.h"
#include "infinipipe/core/log.h"

namespace infinipipe::runtime {

at::Tensor Executor::Step::buffer(int chunk) const {
  return at::empty({chunk_rows(chunk), opt_.hidden},
                   at::TensorOptions().dtype(opt_.dtype).device(opt_.device));
}

ChunkContextOptions Executor::Step::context_options(int chunk) const {
  ChunkContextOptions options;
  options.chunk = chunk;
  options.device = opt_.device;
  options.attention_scale = opt_.attention_scale;
  options.attention_backend = opt_.attention_backend;
  options.sequence = ex_.sequence_;
  return options;
}

std::shared_ptr<ChunkContext> Executor::Step::make_context(int chunk) {
  const int layers = ex_.module_->num_layers();
  const std::vector<Slice>& slices = plan_.chunks[chunk].slices;
  std::vector<kernels::SliceBuffers> kv(layers);
  for (const Slice& s : slices) {
    kernels::SliceBuffers* buffers = nullptr;
    if (split_[s.seq]) {
      auto it = ex_.kv_.find(s.seq);
      if (it == ex_.kv_.end()) {
        // The first forward of any of the sequence's slices allocates its buffers.
        kernels::SliceBuffers per_layer;
        // With sequence parallelism this rank's heads only.
        for (int l = 0; l < layers; ++l)
          per_layer.push_back(kernels::SequenceKV::create(plan_.lengths[s.seq],
                                                          opt_.kv_heads / ex_.sequence_size(),
                                                          opt_.head_dim, opt_.dtype, opt_.device));
        it = ex_.kv_.emplace(s.seq, std::move(per_layer)).first;
      }
      buffers = &it->second;
    }
    for (int l = 0; l < layers; ++l) kv[l].push_back(buffers ? (*buffers)[l] : nullptr);
  }
  return std::make_shared<ChunkContext>(slices, std::move(kv), context_options(chunk));
}

void Executor::Step::recv(const Action& action) {
  if (action.is_head_transfer()) {
    // The peer was checked against the plan's H actions (check_head_actions).
    const bool hidden = action.type == ActionType::kRecvHead;
    ex_.head_pipes_.post_recv(
        message_tag(action.chunk, hidden ? Direction::kHeadHidden : Direction::kHeadGradient),
        buffer(action.chunk), ex_.rank_of_stage(action.peer_stage));
    return;
  }
  const bool forward = action.type == ActionType::kRecvForward;
  check(forward ? opt_.stage > 0 : !last_stage_,
        stage_text(opt_.stage) + ": action " + action.text() + " has no peer on this stage");
  const int peer = ex_.rank_of_stage(opt_.stage + (forward ? -1 : 1));
  ex_.pipes_.post_recv(
      message_tag(action.chunk, forward ? Direction::kActivation : Direction::kGradient),
      buffer(action.chunk), peer);
}

void Executor::Step::send(const Action& action) {
  const bool forward = action.type == ActionType::kSendForward;
  auto it = ex_.chunks_.find(action.chunk);
  check(it != ex_.chunks_.end() && (forward || it->second->backward_done),
        stage_text(opt_.stage) + ": " + action.text() + " before its " +
            (forward ? "forward" : "backward"));
  check(forward ? !last_stage_ : opt_.stage > 0,
        stage_text(opt_.stage) + ": action " + action.text() + " has no peer on this stage");
  ChunkState& st = *it->second;
  const int peer = ex_.rank_of_stage(opt_.stage + (forward ? 1 : -1));
  if (forward) {
    ex_.pipes_.send(message_tag(action.chunk, Direction::kActivation), st.output.detach(), peer);
    if (forward_only_) ex_.chunks_.erase(it);
  } else {
    ex_.pipes_.send(message_tag(action.chunk, Direction::kGradient), st.input_grad, peer);
    st.input_grad = at::Tensor();
    st.input_grad_sent = true;
    release_if_done(action.chunk);
  }
}

void Executor::Step::release_if_done(int chunk) {
  auto it = ex_.chunks_.find(chunk);
  if (it == ex_.chunks_.end()) return;
  const ChunkState& st = *it->second;
  // The backward is over on this stage: nothing of the chunk is needed any more.
  if (st.backward_done && st.weights_done && (st.input_grad_sent || opt_.stage == 0))
    ex_.chunks_.erase(it);
}

at::Tensor Executor::Step::backward_graph(ChunkState& st, const at::Tensor& output,
                                          const at::Tensor& input, const at::Tensor& grad) {
  // The first stage sends no input gradient: its B computes everything, its W nothing (the
  // chunk is held until then all the same, as the memory walk counts it).
  if (!st.weights_done && opt_.stage > 0) {
    if (parameters_.empty()) parameters_ = ex_.module_->parameters();
    SplitBackward split;
    at::Tensor input_grad = split.input_gradient(output, input, grad, parameters_);
    if (input_grad.defined()) {
      st.weight_graphs.push_back(std::move(split));
      ++stats_.split_graphs;
      return input_grad;
    }
    ++stats_.unsplit_graphs;
    return input.grad();  // the graph did not allow the split: its whole backward ran
  }
  if (grad.defined())
    torch::autograd::backward({output}, {grad});
  else
    torch::autograd::backward({output});
  return input.defined() ? input.grad() : at::Tensor();
}

void Executor::Step::weights(int chunk) {
  auto it = ex_.chunks_.find(chunk);
  check(it != ex_.chunks_.end() && it->second->backward_done && !it->second->weights_done,
        stage_text(opt_.stage) + ": W" + std::to_string(chunk) + " without its B");
  ChunkState& st = *it->second;
  {
    Timer backward(stats_.backward_s), weight(stats_.weight_s);
    at::AutoGradMode grad_mode(true);
    for (SplitBackward& graph : st.weight_graphs) graph.weights();
  }
  st.weight_graphs.clear();
  st.weights_done = true;
  release_if_done(chunk);
}

void Executor::Step::forward(int chunk) {
  check(ex_.chunks_.count(chunk) == 0,
        stage_text(opt_.stage) + ": chunk " + std::to_string(chunk) + " forwarded twice");
  auto state = std::make_unique<ChunkState>();
  ChunkState& st = *state;
  StageModule& module = *ex_.module_;
  const int layers = module.num_layers();
  st.recompute = forward_only_ ? 0 : recompute_layers(plan_.recompute, opt_.stage, chunk);
  st.ctx = make_context(chunk);
  const bool record = !forward_only_;  // evaluation records no autograd graph

  at::Tensor hidden;
  if (opt_.stage == 0) {
    const at::Tensor tokens = shard_tokens(st.ctx->rows(), sequences_).to(opt_.device);
    Timer t(stats_.forward_s);
    at::AutoGradMode grad(record);
    hidden = module.embed(tokens, *st.ctx);
    if (st.recompute > 0) {
      st.embed_out = hidden;
      hidden = hidden.detach();
    }
  } else {
    {
      Timer t(stats_.wait_s);
      hidden = ex_.pipes_.wait_recv(message_tag(chunk, Direction::kActivation));
    }
    if (st.recompute == 0 && record) {
      hidden.requires_grad_(true);
      st.graph_input = hidden;
    }
  }

  Timer t(stats_.forward_s);
  {
    at::NoGradGuard no_grad;
    for (int l = 0; l < st.recompute; ++l) {
      st.checkpoint_inputs.push_back(hidden);
      hidden = module.layer(l, hidden, *st.ctx);
    }
  }
  at::AutoGradMode grad(record);
  if (st.recompute > 0) {
    hidden = hidden.detach().requires_grad_(true);
    st.graph_input = hidden;
  }
  for (int l = st.recompute; l < layers; ++l) hidden = module.layer(l, hidden, *st.ctx);
  const bool loss_here = last_stage_ && !head_spread(chunk);
  if (loss_here) {
    st.output = head_loss(chunk, hidden, *st.ctx);
  } else {
    check(hidden.dim() == 2 && hidden.size(0) == chunk_rows(chunk) && hidden.size(1) == opt_.hidden,
          stage_text(opt_.stage) + ": the stage's output must be [tokens, hidden] = [" +
              std::to_string(chunk_rows(chunk)) + ", " + std::to_string(opt_.hidden) + "]");
    check(hidden.scalar_type() == opt_.dtype,
          stage_text(opt_.stage) + ": the stage's output dtype differs from the executor's");
    st.output = hidden;
  }
  if (forward_only_) {
    // A sequence's last slice ends the use of its K/V buffers: no backward will read them.
    for (const Slice& s : plan_.chunks[chunk].slices)
      if (split_[s.seq] && s.end == plan_.lengths[s.seq]) ex_.kv_.erase(s.seq);
    if (loss_here) return;  // nothing to send: the chunk is done
  }
  ex_.chunks_.emplace(chunk, std::move(state));
}

void Executor::Step::backward(int chunk) {
  auto it = ex_.chunks_.find(chunk);
  check(it != ex_.chunks_.end() && !it->second->backward_done,
        stage_text(opt_.stage) + ": backward of chunk " + std::to_string(chunk) +
            " without its forward");
  ChunkState& st = *it->second;
  StageModule& module = *ex_.module_;

  at::Tensor grad;  // gradient of the loss w.r.t. the current point, walking back
  if (last_stage_ && head_spread(chunk) && head_stage_[chunk] == opt_.stage) {
    check(st.head_done, stage_text(opt_.stage) + ": B" + std::to_string(chunk) + " before H" +
                            std::to_string(chunk));
    grad = std::move(st.head_grad);
  } else if (last_stage_ && head_spread(chunk)) {
    Timer t(stats_.wait_s);
    grad = ex_.head_pipes_.wait_recv(message_tag(chunk, Direction::kHeadGradient));
  } else if (!last_stage_) {
    Timer t(stats_.wait_s);
    grad = ex_.pipes_.wait_recv(message_tag(chunk, Direction::kGradient));
  }
  Timer t(stats_.backward_s);
  at::AutoGradMode grad_mode(true);
  st.weights_done = !has_weight_[chunk];
  // The recorded part: from graph_input (or the embedding) to the output.
  if (st.output.is_same(st.graph_input)) {
    // Every layer is checkpointed and there is no head: the recorded part is the identity.
  } else {
    grad = backward_graph(st, st.output, st.graph_input, grad);
  }
  st.output = at::Tensor();
  st.graph_input = at::Tensor();
  // The checkpointed layers, last to first: re-run with grad from the kept input, back-propagate.
  for (int l = st.recompute - 1; l >= 0; --l) {
    at::Tensor input = st.checkpoint_inputs[l].detach().requires_grad_(true);
    at::Tensor output;
    {
      Timer r(stats_.recompute_s);
      output = module.layer(l, input, *st.ctx);
    }
    ++stats_.recomputed_layers;
    grad = backward_graph(st, output, input, grad);
    st.checkpoint_inputs.pop_back();
  }
  if (st.embed_out.defined()) {
    torch::autograd::backward({st.embed_out}, {grad});
    st.embed_out = at::Tensor();
    grad = at::Tensor();
  }
  if (opt_.stage > 0) {
    check(grad.defined(), stage_text(opt_.stage) + ": chunk " + std::to_string(chunk) +
                              " produced no input gradient (does the stage use its input?)");
    st.input_grad = grad;
  }
  st.backward_done = true;
  // The backward of a sequence's first slice completes its K/V buffers' use on this stage.
  for (const Slice& s : plan_.chunks[chunk].slices)
    if (split_[s.seq] && s.start == 0) ex_.kv_.erase(s.seq);
  st.ctx->module_state.reset();
  st.ctx.reset();
  release_if_done(chunk);
}

void Executor::Step::run_action(const Action& action) {
  switch (action.type) {
    case ActionType::kRecvForward:
    case ActionType::kRecvBackward:
    case ActionType::kRecvHead:
    case ActionType::kRecvHeadGrad:
      recv(action);
      break;
    case ActionType::kSendForward:
    case ActionType::kSendBackward:
      send(action);
      break;
    case ActionType::kSendHead:
      send_head(action);
      break;
    case ActionType::kSendHeadGrad:
      send_head_grad(action);
      break;
    case ActionType::kForward:
      forward(action.chunk);
      break;
    case ActionType::kBackward:
      backward(action.chunk);
      break;
    case ActionType::kHead:
      head(action.chunk);
      break;
    case ActionType::kWeight:
      weights(action.chunk);
      break;
  }
}

void Executor::Step::sample_memory() {
  std::set<const void*> seen;
  int64_t kv = 0, checkpoint = 0;
  for (const auto& [seq, buffers] : ex_.kv_)
    for (const auto& b : buffers) kv += b->nbytes();
  for (const auto& [chunk, st] : ex_.chunks_) {
    for (const at::Tensor& x : st->checkpoint_inputs)
      if (seen.insert(x.storage().data()).second) checkpoint += x.storage().nbytes();
  }
  stats_.peak_kv_bytes = std::max(stats_.peak_kv_bytes, kv);
  stats_.peak_checkpoint_bytes = std::max(stats_.peak_checkpoint_bytes, checkpoint);
  stats_.peak_held_bytes = std::max(stats_.peak_held_bytes, kv + checkpoint);
}

StepStats Executor::Step::run() {
  const auto started = Clock::now();
  stats_.target_tokens = target_tokens_;
  const int64_t sent_before = ex_.bytes_sent();
  const int64_t received_before = ex_.bytes_received();
  const double exchange_before = ex_.sequence_ ? ex_.sequence_->all_to_all_s() : 0.0;
  const int64_t exchanged_before = ex_.sequence_ ? ex_.sequence_->all_to_all_bytes() : 0;
  for (const Action& action : plan_.schedule.stages[opt_.stage]) {
    // Evaluating, H computes the loss only, so its gradient is neither sent nor received.
    const bool backward_action =
        action.type == ActionType::kRecvBackward || action.type == ActionType::kSendBackward ||
        action.type == ActionType::kBackward || action.type == ActionType::kRecvHeadGrad ||
        action.type == ActionType::kSendHeadGrad || action.type == ActionType::kWeight;
    if (forward_only_ && backward_action) continue;
    run_action(action);
    sample_memory();
    if (opt_.after_action) opt_.after_action(action.text());
  }
  {
    Timer t(stats_.wait_s);
    ex_.pipes_.wait_sends();
    ex_.head_pipes_.wait_sends();
  }
  stats_.actions_s = seconds_since(started);
  finish();
  stats_.bytes_sent = ex_.bytes_sent() - sent_before;
  stats_.bytes_received = ex_.bytes_received() - received_before;
  if (ex_.sequence_) {
    stats_.all_to_all_s = ex_.sequence_->all_to_all_s() - exchange_before;
    stats_.all_to_all_bytes = ex_.sequence_->all_to_all_bytes() - exchanged_before;
  }

  // Only the stages that ran heads computed losses (each SP rank its rows' part); every rank
  // returns the sum.
  stats_.loss = ex_.pipes_.all_reduce_sum(loss_sum_, opt_.device);
  stats_.total_s = seconds_since(started);
  return stats_;
}

void Executor::Step::finish() {
  const std::string where = stage_text(opt_.stage) + ", plan " + plan_.hash() + ": ";
  check(ex_.pipes_.pending_recvs() + ex_.head_pipes_.pending_recvs() == 0,
        where + "the step ended with receives nobody waited for (the schedule is inconsistent)");
  check(ex_.chunks_.empty(), where +
                                 "the step ended with chunks whose backward did not run "
                                 "or whose input gradient was not sent");
  check(ex_.head_grads_.empty(),
        where + "the step ended with head gradients that no SEND_HG sent back");
  check(ex_.kv_.empty(), where +
                             "the step ended with K/V buffers of sequences whose first "
                             "slice never ran backward");
}

Executor::Executor(std::shared_ptr<StageModule> module,
                   c10::intrusive_ptr<c10d::ProcessGroup> group, ExecutorOptions options)
    : module_(std::move(module)),
      options_((options.validate(), std::move(options))),
      pipes_(std::move(group), options_.timeout, [this](int rank) { return describe_rank(rank); }),
      head_pipes_(options_.head_group ? options_.head_group : pipes_.group(), options_.timeout,
                  [this](int rank) { return describe_rank(rank); }) {
  check(module_ != nullptr, "executor: the stage module is null");
  const auto& group_ptr = pipes_.group();
  check(head_pipes_.group()->getSize() == group_ptr->getSize() &&
            head_pipes_.group()->getRank() == group_ptr->getRank(),
        "executor: the head group must hold the executor's group's ranks in its order (this "
        "rank is " +
            std::to_string(group_ptr->getRank()) + " of " + std::to_string(group_ptr->getSize()) +
            " there, " + std::to_string(head_pipes_.group()->getRank()) + " of " +
            std::to_string(head_pipes_.group()->getSize()) + " in the head group)");
  check(group_ptr->getSize() >= options_.num_stages,
        "executor: the process group has " + std::to_string(group_ptr->getSize()) +
            " ranks but the pipeline has " + std::to_string(options_.num_stages) +
            " stages; launch one process per stage");
  check(group_ptr->getRank() == rank_of_stage(options_.stage),
        "executor: this process is rank " + std::to_string(group_ptr->getRank()) + " but stage " +
            std::to_string(options_.stage) + " belongs to rank " +
            std::to_string(rank_of_stage(options_.stage)));
  if (options_.sequence_group && options_.sequence_group->getSize() > 1) {
    SequenceParallelOptions sp;
    sp.stage = options_.stage;
    sp.global_ranks = options_.sequence_ranks;
    sp.global_rank = group_ptr->getRank();
    sp.timeout = options_.timeout;
    sequence_ = std::make_shared<SequenceParallel>(options_.sequence_group, std::move(sp));
  }
}

Executor::~Executor() = default;

std::string Executor::describe_rank(int rank) const {
  for (int s = 0; s < options_.num_stages; ++s)
    if (rank_of_stage(s) == rank)
      return "rank " + std::to_string(rank) + " (stage " + std::to_string(s) + ")";
  return "rank " + std::to_string(rank);
}

int Executor::rank_of_stage(int stage) const {
  return options_.stage_ranks.empty() ? stage : options_.stage_ranks.at(stage);
}

StepStats Executor::run(const Plan& plan, const std::vector<at::Tensor>& sequences,
                        int64_t loss_tokens) {
  return run_step(plan, sequences, false, loss_tokens);
}

StepStats Executor::evaluate(const Plan& plan, const std::vector<at::Tensor>& sequences,
                             int64_t loss_tokens) {
  at::NoGradGuard no_grad;
  return run_step(plan, sequences, true, loss_tokens);
}

void Executor::add_peer_tensor(at::Tensor& tensor, int peer_stage, int index) {
  check(peer_stage >= 0 && peer_stage < options_.num_stages && peer_stage != options_.stage,
        stage_text(options_.stage) + ": a tied weight's peer must be another stage, got " +
            std::to_string(peer_stage));
  check(tensor.defined(), stage_text(options_.stage) + ": tied weight " + std::to_string(index) +
                              " has no gradient (did the step run its backward?)");
  const int peer = rank_of_stage(peer_stage);
  const int tag = message_tag(index, Direction::kTiedGradient);
  try {
    pipes_.post_recv(tag, at::empty_like(tensor), peer);
    pipes_.send(tag, tensor, peer);
    at::Tensor theirs = pipes_.wait_recv(tag);
    pipes_.wait_sends();
    // a + b == b + a in floating point: both stages end with bitwise the same sum.
    tensor.add_(theirs);
  } catch (...) {
    pipes_.clear();
    throw;
  }
}

double Executor::all_reduce_sum(double value, const std::string& what) {
  return pipes_.all_reduce_sum(value, options_.device, what);
}

StepStats Executor::run_step(const Plan& plan, const std::vector<at::Tensor>& sequences,
                             bool forward_only, int64_t loss_tokens) {
  Step step(*this, plan, sequences, forward_only, loss_tokens);
  step.check_inputs();
  try {
    StepStats stats = step.run();
    if (log::enabled(log::Level::kDebug))
      log::debug(stage_text(options_.stage) + (forward_only ? " evaluated" : " ran") + " plan " +
                 plan.hash() + ": loss " + std::to_string(stats.loss) + ", " +
                 std::to_string(stats.total_s) + " s (waiting " + std::to_string(stats.wait_s) +
                 " s, recompute " + std::to_string(stats.recompute_s) + " s)");
    return stats;
  } catch (...) {
    // Leave nothing of the failed step behind (buffers, graphs, pending transfers).
    chunks_.clear();
    kv_.clear();
    head_grads_.clear();
    pipes_.clear();
    head_pipes_.clear();
    throw;
  }
}

std::vector<at::Tensor> Executor::held_tensors() const {
  std::vector<at::Tensor> held;
  for (const auto& [seq, buffers] : kv_)
    for (const auto& b : buffers)
      for (const at::Tensor* t : {&b->k, &b->v, &b->dk, &b->dv}) held.push_back(*t);
  for (const auto& [chunk, st] : chunks_) {
    for (const at::Tensor& x : st->checkpoint_inputs) held.push_back(x);
    for (const SplitBackward& graph : st->weight_graphs) graph.kept_gradients(held);
  }
  return held;
}

}  // namespace infinipipe::runtime
