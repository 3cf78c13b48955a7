#pragma once
// Times a stage module's layer as the executor runs it, for calibrating the cost model
// (cost/calibration.h fits the times; `infinipipe-profile` and `python -m infinipipe profile`
// drive both).
//
// Each grid point (tokens s, context c) is one chunk holding one slice of one sequence: a
// ChunkContext with the slice at rows [0, s) starting at position c, and for c > 0 a SequenceKV
// per layer whose first c rows hold (random) K/V of the earlier slices, its dK/dV accumulators
// allocated, as for every slice but the last of a split sequence. The module's first two local
// layers run one after the other, as a stage runs its layers (one layer where the module has
// one), on a random input that requires grad, and the second one's forward is timed; their
// backward from a gradient of ones runs later, timed and halved: once `in_flight` later points
// have run forward, so that, as in a pipeline stage, forwards run while other chunks' saved
// tensors are held and a backward runs long after its forward. Parameter gradients accumulate
// across runs as across a step's chunks. Before them the same layers run without autograd, the
// second timed too: a checkpointed layer's first forward in the executor. After each backward the
// layer runs once more as the executor's backward runs a checkpointed layer, its recorded forward
// and at once its backward, timed together (both: CostCoefficients::checkpointed_forward_ratio).
// The embedding (forward)
// and the head with the cross-entropy loss (forward) are timed per token count when the module
// has them, since the cost model charges them per token on the first and last stage.
#include <cstdint>
#include <functional>
#include <vector>

#include <c10/core/Device.h>
#include <c10/core/ScalarType.h>

#include "infinipipe/cost/calibration.h"
#include "infinipipe/runtime/stage_module.h"

namespace infinipipe::runtime {

// Where the attention the executor runs on `device` changes how many query rows it tiles
// together. On the CPU (chunk attention calls ATen's flash attention for CPU): 32 rows below 192
// query tokens, 64 below 768, 256 from 768 (aten/src/ATen/native/cpu/FlashAttentionKernel.cpp),
// and the time per unit of attention work changes with the tile, so a CPU profile fits a1 per
// regime (CostCoefficients::a1_by_query). Elsewhere: none (one a1).
std::vector<int64_t> attention_query_cuts(c10::Device device);

struct LayerProfilerOptions {
  std::vector<GridPoint> points;
  int repeats = 5;  // timed runs per point
  // Sizes under it get more runs: timed_runs(tokens, repeats, min_timed_tokens) (profile_grid.h).
  int64_t min_timed_tokens = 0;
  int warmup = 1;  // untimed rounds over every point first (allocator, kernel selection)
  at::ScalarType dtype = at::kFloat;
  at::Device device = at::kCPU;
  int64_t hidden = 0;
  int64_t kv_heads = 0;
  int64_t head_dim = 0;
  int64_t vocab = 0;  // token ids and targets for the embedding and the head
  kernels::Backend attention_backend = kernels::Backend::Auto;
  uint64_t seed = 0;  // the order of the runs
  // Recorded forwards held before the oldest one's backward runs: a 1F1B stage holds several
  // chunks' saved tensors at once (the first of the validation's 2-stage pipelines 2 to 5). On a
  // 2-core Xeon (tiny LLaMA, one thread) holding 4 rather than none made the recorded forward
  // 0-7% dearer (docs/benchmarks.md, "Simulator validation"). 0: each backward right after its
  // forward.
  int in_flight = 4;
  // Time with the calling thread's CPU clock instead of the wall clock. On a CPU with one
  // intra-op thread all of a run's work (backward included) is on the calling thread, so this
  // leaves out the time other processes take the core: calibration on a shared machine.
  bool thread_cpu_time = false;
  // Called after every run (warm-up included) with (runs done, total runs).
  std::function<void(int done, int total)> progress;

  void validate() const;  // Error naming the field
};

struct PointRuns {
  GridPoint point;
  std::vector<double> forward_s, backward_s;   // one per repeat, in the order they ran
  std::vector<double> checkpointed_forward_s;  // the forward without autograd, one per repeat
  // A checkpointed layer's part of the backward: the recorded forward again, then its backward
  // at once (CostCoefficients::checkpointed_forward_ratio), one per repeat.
  std::vector<double> recomputed_s;
};

struct PartRuns {
  int64_t tokens = 0;
  std::vector<double> seconds;
};

struct LayerProfile {
  std::vector<PointRuns> layer;     // in the options' point order
  std::vector<PartRuns> embedding;  // per distinct token count; empty without an embedding
  std::vector<PartRuns> head;       // head + loss; empty without a head

  // Every point's runs reduced by `statistic`. The median is the default because the planner
  // predicts real steps, where every layer runs once at its typical speed: on the 2-core dev
  // machine (one thread, thread CPU clock) a point's median run is 4-30% (about 8% typically)
  // above its fastest, and a calibration on the minimum predicted 2-rank pipelined steps about
  // that much too fast (benchmarks/experiments/validate_simulator.py). The minimum fits the grid a
  // little more tightly (held-out forward medians over 20 splits of the same runs: 3-5% against
  // 3-7% with the median; on the wall clock of a loaded machine 3-14% against 11-24%), so it is the
  // better choice for comparing kernels. The .meta.json of python -m infinipipe profile records
  // the held-out errors of all three statistics.
  CalibrationSamples samples(Statistic statistic = Statistic::Median) const;
};

LayerProfile profile_layer(StageModule& module, const LayerProfilerOptions& options);

}  // namespace infinipipe::runtime
