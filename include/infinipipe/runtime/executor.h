#pragma once
// Runs one stage's part of a plan (docs/design.md, "Executor"): the stage's action list,
// in order, on a stage module, with its activations and gradients travelling through Pipes.
//
//   RECV_F c / RECV_B c  post the receive into a buffer of the chunk's shape [tokens, hidden]
//   F c   stage 0 embeds the chunk's packed tokens, other stages wait for their input; the first
//         recompute[stage][c] layers run without grad keeping only their inputs, the rest record
//         autograd graphs; the last stage adds the head and the chunk's loss: cross-entropy summed
//         over its target tokens divided by the target tokens of the whole step
//   SEND_F c  send the output;  SEND_B c  send the input gradient
//   B c   wait for the output gradient (the last stage differentiates its loss), back-propagate
//         the recorded layers, then re-run each checkpointed layer with grad and back-propagate
//         it, last to first; parameter gradients accumulate across the step's chunks and waves
//
// Spread head (docs/design.md, "Spread head"): chunks with an H action have their LM head and
// loss run on that action's stage o, whose module holds a replica of the head.
//   F c   on the last stage: its layers only; the output waits for SEND_H c@o (or H c when
//         o is the last stage itself)
//   SEND_H c@o / RECV_H c@d-1  the output [tokens, hidden] from the last stage to o
//   H c   wait for it, run the head and the chunk's loss (as the last stage's F would) with the
//         hidden state as a leaf, back-propagate them at once (the head's parameter gradients
//         accumulate) and keep d(loss)/d(hidden)
//   SEND_HG c@d-1 / RECV_HG c@o  that gradient back; the last stage's B c waits for it as for
//         an output gradient (after a local H it takes it directly)
// Head messages have their own tags (pipe.h, Direction). H's head and loss count as forward
// time, their backward as backward time, its wait for the hidden state as waiting. Evaluating,
// H computes the loss only and the head-gradient transfers are skipped.
//
// K/V buffers of a split sequence (one per stage layer) exist from the first forward of any of
// its slices to the end of the backward of its first slice. The step's loss (the sum of the
// losses of every stage's heads) is all-reduced, so every rank returns it.
//
// Sequence parallelism (options.sequence_group of d_s ranks; sequence_parallel.h): this rank is
// SP rank j of its stage and runs every action on its share of each chunk's rows, padded rows
// [j * T_pad / d_s, (j + 1) * T_pad / d_s) (sequence_rows.h): pipes carry [T_pad / d_s, hidden],
// stage 0 embeds its rows (padding: token 0), the last stage's loss covers its rows' targets
// (padding: none), attention exchanges heads with the group, K/V buffers hold kv_heads / d_s
// heads. Parameter gradients are this rank's rows' part: the caller sums them over the group.
#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <ATen/core/Tensor.h>
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>

#include "infinipipe/plan/plan.h"
#include "infinipipe/runtime/chunk_context.h"
#include "infinipipe/runtime/pipe.h"
#include "infinipipe/runtime/sequence_parallel.h"
#include "infinipipe/runtime/stage_module.h"

namespace infinipipe::runtime {

struct ExecutorOptions {
  int stage = 0;
  int num_stages = 1;
  at::ScalarType dtype = at::kFloat;  // activations, gradients and K/V buffers
  at::Device device = at::kCPU;
  int64_t hidden = 0;
  int64_t kv_heads = 0;
  int64_t head_dim = 0;
  double attention_scale = 0;  // <= 0: 1 / sqrt(head_dim)
  kernels::Backend attention_backend = kernels::Backend::Auto;
  std::chrono::milliseconds timeout{std::chrono::seconds(300)};  // every wait on a peer
  std::vector<int> stage_ranks;  // rank of every stage in the group; empty: stage s is rank s
  // Ulysses sequence parallelism: the group of this stage's d_s ranks, this rank among them
  // (null or one rank: none). stage_ranks then lists this rank's pipeline: the ranks of the same
  // SP rank in every stage. d_s must divide kv_heads (and the heads).
  c10::intrusive_ptr<c10d::ProcessGroup> sequence_group;
  // The global rank of each of sequence_group's ranks, for messages; empty: gathered over the
  // sequence group when the executor is built.
  std::vector<int> sequence_ranks;
  // Spread head: the group carrying the head's hidden states and their gradients (the executor's
  // group's ranks, in its order); null: the executor's group. NCCL matches the messages between
  // two ranks in issue order whatever their tags, so on one group a head message and an
  // activation or gradient between the last stage and the one before it must be sent in the
  // order they are received (message_order.h); on a group of its own every (sender, receiver,
  // group) carries one kind of message, the validator's channels. The trainer always gives one.
  c10::intrusive_ptr<c10d::ProcessGroup> head_group;
  // Called after every action with its text (for example to sample memory with held_tensors()).
  std::function<void(const std::string& action)> after_action;

  void validate() const;  // Error naming the field
};

struct StepStats {
  double loss = 0;  // mean loss over the step's target tokens (the same on every rank)
  int64_t target_tokens = 0;
  // This stage, measured.
  double total_s = 0;
  // Until its last action and sends were done, before the step's closing collectives (where a
  // stage that finished early waits for the others).
  double actions_s = 0;
  double forward_s = 0;   // forwards (recorded and checkpointed layers, head, loss)
  double backward_s = 0;  // backwards, recompute and W actions included
  double weight_s = 0;    // zero bubble: W actions (part of backward_s)
  // Zero bubble: recorded graphs whose backward B and W ran apart, and those whose graph did not
  // allow it (a parameter reached other than on the way to the input), which B ran whole.
  int split_graphs = 0;
  int unsplit_graphs = 0;
  double recompute_s = 0;  // re-running checkpointed layers
  double wait_s = 0;       // blocked on receives and sends
  int64_t bytes_sent = 0;
  int64_t bytes_received = 0;
  int64_t peak_kv_bytes = 0;          // K/V buffers (with their dK/dV accumulators)
  int64_t peak_checkpoint_bytes = 0;  // inputs kept by checkpointed layers
  int64_t peak_held_bytes = 0;        // both together, at the moment their sum peaked
  int recomputed_layers = 0;          // layer re-runs in backwards
  double all_to_all_s = 0;            // sequence parallelism: in attention's all-to-alls
  int64_t all_to_all_bytes = 0;       // sent by them
};

class Executor {
 public:
  Executor(std::shared_ptr<StageModule> module, c10::intrusive_ptr<c10d::ProcessGroup> group,
           ExecutorOptions options);
  ~Executor();
  Executor(const Executor&) = delete;
  Executor& operator=(const Executor&) = delete;

  // Runs this stage's actions of `plan`. sequences[i]: the tokens of the plan's sequence i
  // (1-D int64, any device), needed by the first stage (inputs) and the last (targets). Checks
  // everything it can before any communication and throws Error on a plan that does not fit the
  // stage, and on a lost peer (naming it). After an error the executor is ready for a new step.
  // loss_tokens: the target tokens the loss is averaged over; 0: the plan's. Data-parallel
  // replicas each run a plan of their share of the batch and pass the whole batch's count, so
  // their losses and gradients add up to the batch's mean (docs/design.md, "Parallel layout").
  StepStats run(const Plan& plan, const std::vector<at::Tensor>& sequences,
                int64_t loss_tokens = 0);

  // Evaluation: only the plan's forward actions (F, RECV_F, SEND_F), without grad and without
  // recompute; nothing is kept for a backward, and a split sequence's K/V buffers live until its
  // last slice's forward. Returns the step's loss as run() does; parameter gradients are untouched.
  StepStats evaluate(const Plan& plan, const std::vector<at::Tensor>& sequences,
                     int64_t loss_tokens = 0);

  // For a weight tied across two stages (input and output embeddings): both stages call this
  // with their own copy's gradient, in the same order; each ends holding the sum. `index` tells
  // several tied weights apart. The executor's timeout applies; a lost peer is a PeerError.
  void add_peer_tensor(at::Tensor& tensor, int peer_stage, int index);

  // Sum of `value` over every rank of the group (e.g. squared gradient norms), with the timeout.
  double all_reduce_sum(double value, const std::string& what);

  // Tensors held right now outside autograd's saved tensors: K/V buffers, the inputs kept by
  // checkpointed layers and the gradients a split B kept for its W. For memory measurement (a
  // probe may call it during run()).
  std::vector<at::Tensor> held_tensors() const;

  // Every rank's `mine`, in rank order, over the executor's group (Pipes::all_gather_text).
  std::vector<std::string> all_gather_text(const std::string& mine) {
    return pipes_.all_gather_text(mine, options_.device);
  }

  const ExecutorOptions& options() const { return options_; }
  void set_after_action(std::function<void(const std::string&)> probe) {
    options_.after_action = std::move(probe);
  }
  StageModule& module() { return *module_; }
  int rank_of_stage(int stage) const;
  std::string describe_rank(int rank) const;  // "rank 1 (stage 1)", for messages
  int sequence_rank() const { return sequence_ ? sequence_->rank() : 0; }
  int sequence_size() const { return sequence_ ? sequence_->size() : 1; }

 private:
  struct ChunkState;
  class Step;
  StepStats run_step(const Plan& plan, const std::vector<at::Tensor>& sequences, bool forward_only,
                     int64_t loss_tokens);

  std::shared_ptr<StageModule> module_;
  ExecutorOptions options_;
  Pipes pipes_;
  Pipes head_pipes_;  // the spread head's messages: over options_.head_group, else pipes_' group
  int64_t bytes_sent() const { return pipes_.bytes_sent() + head_pipes_.bytes_sent(); }
  int64_t bytes_received() const { return pipes_.bytes_received() + head_pipes_.bytes_received(); }
  std::shared_ptr<SequenceParallel> sequence_;  // null without sequence parallelism
  // Live only during run(); held_tensors() reads them.
  std::map<int, std::unique_ptr<ChunkState>> chunks_;
  std::map<int, std::vector<std::shared_ptr<kernels::SequenceKV>>> kv_;  // by sequence
  // Spread head on a stage other than the last: per chunk, the gradient its H left for SEND_HG.
  std::map<int, at::Tensor> head_grads_;
};

}  // namespace infinipipe::runtime
