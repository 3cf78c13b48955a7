#pragma once
// Executor::Step, one run() of the executor (internal to the runtime part). Its actions share the
// step's bookkeeping, so they are one class; its definitions are split by concern: the input
// checks (executor_checks.cc), the spread head's actions (executor_head.cc) and the rest of the
// state machine (executor.cc).
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <ATen/core/Tensor.h>

#include "infinipipe/runtime/executor.h"
#include "split_backward.h"

namespace infinipipe::runtime {

using Clock = std::chrono::steady_clock;

inline double seconds_since(Clock::time_point since) {
  return std::chrono::duration<double>(Clock::now() - since).count();
}

// Adds to `total` the time from construction to destruction.
class Timer {
 public:
  explicit Timer(double& total) : total_(total), started_(Clock::now()) {}
  ~Timer() { total_ += seconds_since(started_); }

 private:
  double& total_;
  Clock::time_point started_;
};

inline std::string stage_text(int stage) { return "stage " + std::to_string(stage); }

// What a stage keeps of a chunk between its forward and its backward.
struct Executor::ChunkState {
  std::shared_ptr<ChunkContext> ctx;
  int recompute = 0;
  at::Tensor embed_out;                       // first stage with checkpointed layers
  std::vector<at::Tensor> checkpoint_inputs;  // inputs of the checkpointed layers, no graph
  at::Tensor graph_input;  // leaf where the recorded part starts (undefined: at the embedding)
  at::Tensor output;       // the recorded part's output: hidden states, or the loss
  at::Tensor input_grad;   // after the backward, for SEND_B
  // Spread head run on this (the last) stage by H: d(loss)/d(output), the B's output gradient.
  at::Tensor head_grad;
  bool head_done = false;
  bool backward_done = false;
  // Zero bubble (a W for the chunk on this stage): what B kept for W, one per recorded graph (the
  // recorded part, each recomputed layer). The chunk is done once its input gradient is sent
  // (the first stage sends none) and its W has run.
  std::vector<SplitBackward> weight_graphs;
  bool input_grad_sent = false;
  bool weights_done = true;

  ~ChunkState() {
    // Drop the module's per-chunk state first: it may refer back to the context.
    if (ctx) ctx->module_state.reset();
  }
};

// One run(): the plan, the inputs and the bookkeeping of the step.
class Executor::Step {
 public:
  Step(Executor& ex, const Plan& plan, const std::vector<at::Tensor>& sequences, bool forward_only,
       int64_t loss_tokens)
      : ex_(ex),
        opt_(ex.options_),
        plan_(plan),
        sequences_(sequences),
        last_stage_(opt_.stage == opt_.num_stages - 1),
        forward_only_(forward_only),
        loss_tokens_(loss_tokens) {}

  void check_inputs();  // executor_checks.cc
  StepStats run();

 private:
  // executor_checks.cc
  void check_message_order(const std::string& where) const;
  // executor_head.cc
  void check_head_actions(const std::string& where) const;
  void head(int chunk);
  at::Tensor head_loss(int chunk, const at::Tensor& hidden, ChunkContext& ctx);
  at::Tensor run_head(int chunk, at::Tensor hidden, ChunkContext& ctx);
  void send_head(const Action& action);
  void send_head_grad(const Action& action);
  std::shared_ptr<ChunkContext> make_head_context(int chunk) const;
  // executor.cc
  void forward(int chunk);
  void backward(int chunk);
  // B's backward of one recorded graph from `output` (given its gradient; undefined for the loss)
  // to `input`: all of it, or with the chunk's W, the input gradient only. Returns d/d(input).
  at::Tensor backward_graph(ChunkState& st, const at::Tensor& output, const at::Tensor& input,
                            const at::Tensor& grad);
  void weights(int chunk);
  // Erases the chunk once nothing of it is needed any more (ChunkState::weight_graphs).
  void release_if_done(int chunk);
  void send(const Action& action);
  void recv(const Action& action);
  void run_action(const Action& action);
  ChunkContextOptions context_options(int chunk) const;
  std::shared_ptr<ChunkContext> make_context(int chunk);
  // The chunk's head runs in an H action (on this stage or another), not in the last stage's F.
  bool head_spread(int chunk) const { return head_stage_[chunk] >= 0; }
  // This rank's rows of the chunk: all of them, or its share under sequence parallelism.
  int64_t chunk_rows(int chunk) const {
    return shard_rows(plan_.chunks[chunk].slices, ex_.sequence_size(), ex_.sequence_rank()).local;
  }
  at::Tensor buffer(int chunk) const;
  void sample_memory();
  void finish();

  Executor& ex_;
  const ExecutorOptions& opt_;
  const Plan& plan_;
  const std::vector<at::Tensor>& sequences_;
  const bool last_stage_;
  const bool forward_only_;       // evaluate(): forwards only, no grad, nothing kept for a backward
  std::vector<bool> split_;       // per sequence: cut into several slices
  std::vector<int> head_stage_;   // per chunk: the stage of its H action, -1 for none
  std::vector<char> has_weight_;  // per chunk: this stage's list has its W (zero bubble)
  std::vector<at::Tensor> parameters_;  // the module's, asked once per step for split backwards
  int64_t loss_tokens_;                 // the loss denominator (check_inputs: the plan's when 0)
  int64_t target_tokens_ = 0;
  double loss_sum_ = 0;  // sum of the losses of the chunks whose head ran here
  StepStats stats_;
};

}  // namespace infinipipe::runtime
