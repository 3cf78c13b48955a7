#include "infinipipe/runtime/layer_profiler.h"

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <torch/csrc/autograd/autograd.h>
#include <torch/csrc/autograd/grad_mode.h>
#include <torch/cuda.h>

#include <algorithm>
#include <chrono>
#include <deque>
#include <memory>
#include <random>
#include <set>

#include <time.h>

#include "infinipipe/core/error.h"
#include "infinipipe/runtime/next_token_loss.h"

namespace infinipipe::runtime {

std::vector<int64_t> attention_query_cuts(c10::Device device) {
  if (device.is_cpu()) return {192, 768};
  return {};
}

namespace {

enum class Kind { Layer, Embedding, Head };

struct Task {
  Kind kind;
  int index;  // into the layer points or the part token counts
};

class Bench {
 public:
  Bench(StageModule& module, const LayerProfilerOptions& o)
      : module_(module), o_(o), float_(at::TensorOptions().dtype(o.dtype).device(o.device)) {}

  // A context that drops the module's per-chunk state when it goes, as the executor does when a
  // chunk is done (that state may refer back to the context: a Python module's does).
  struct OwnedContext {
    std::shared_ptr<ChunkContext> ctx;
    ~OwnedContext() { ctx->module_state.reset(); }
    ChunkContext& operator*() const { return *ctx; }
  };

  // One chunk holding the slice (tokens s at context c) of sequence 0; for c > 0 every timed
  // layer has its K/V buffer.
  OwnedContext context(GridPoint p) const {
    std::vector<kernels::SliceBuffers> kv(module_.num_layers(), {nullptr});
    for (int l = 0; l < chain() && p.context > 0; ++l) {
      auto buffer = kernels::SequenceKV::create(p.context + p.tokens, o_.kv_heads, o_.head_dim,
                                                o_.dtype, o_.device);
      buffer->k.normal_();
      buffer->v.normal_();
      buffer->allocate_grad();
      kv[l][0] = buffer;
    }
    const int64_t end = p.context + p.tokens;
    ChunkContextOptions options;
    options.device = o_.device;
    options.attention_backend = o_.attention_backend;
    return {std::make_shared<ChunkContext>(std::vector<Slice>{{0, p.context, end, end}},
                                           std::move(kv), options)};
  }

  // The layers run per point: the module's first two, one after the other as a stage runs its
  // layers, when it has two. The second one's forward is timed: a recorded layer of a stage
  // writes its saved tensors to memory that no freed tensor of the layer before it hands back
  // (the first layer's are held too), and on a 2-core Xeon (tiny LLaMA, one thread) that made a
  // stage's recorded forward 7-18% dearer per layer than one layer recorded right after the same
  // layer ran without autograd (whose freed memory it reused), while a forward without autograd
  // costs the same either way (docs/notes/2026-11-27-validation-python-stage.md;
  // docs/benchmarks.md, "Simulator validation").
  int chain() const { return std::min(2, module_.num_layers()); }

  struct ForwardTimes {
    double forward = 0, checkpointed_forward = 0;
  };

  // Seconds of the chain's last layer at `p`: its forward without autograd, as the executor runs
  // a checkpointed layer, then its recorded forward, whose backward waits in flight (below).
  ForwardTimes forward(GridPoint p, int point, bool timed) {
    auto ctx = context(p);
    const int last = chain() - 1;
    at::Tensor x = at::randn({p.tokens, o_.hidden}, float_);
    ForwardTimes times;
    {
      // The executor runs all of a stage's layers on one context: the first builds the chunk's
      // module state (rotary tables, the Python adapter's context) and the others reuse it.
      // Build it untimed, so that the time is that of the typical layer.
      at::NoGradGuard no_grad;
      at::Tensor h = module_.layer(0, x, *ctx);
      if (last == 0) h = x;
      const double t0 = now();
      module_.layer(last, h, *ctx);
      times.checkpointed_forward = since(t0);
    }
    x.requires_grad_(true);
    at::AutoGradMode grad_mode(true);
    const at::Tensor h = last == 0 ? x : module_.layer(0, x, *ctx);
    const double t0 = now();
    at::Tensor out = module_.layer(last, h, *ctx);
    times.forward = since(t0);
    in_flight_.push_back({point, timed, std::move(ctx), std::move(out)});
    return times;
  }

  size_t in_flight() const { return in_flight_.size(); }

  struct BackwardTime {
    int point;
    bool timed;
    double seconds;     // a recorded layer's backward
    double recomputed;  // a checkpointed layer's part of the backward
  };

  // The backward of the oldest recorded forward in flight, through the whole chain (its layers
  // are the same shape), timed per layer. Then, on the same chunk, what the executor's backward
  // does for a checkpointed layer once the recorded layers above it are done: its recorded
  // forward again from the kept input, at once followed by its backward. That forward's saved
  // tensors are used and freed right away, as a lone layer's, not held as a stage's: on a 2-core
  // Xeon (tiny LLaMA, one thread, 1024 tokens) a lone recorded forward took 8.15 ms against
  // 9.19 ms per layer of a stage's four (docs/notes/2026-11-27-validation-python-stage.md), so
  // charging the recompute as the stage's recorded forward over-charged every checkpointed layer.
  BackwardTime backward_oldest() {
    InFlight f = std::move(in_flight_.front());
    in_flight_.pop_front();
    at::AutoGradMode grad_mode(true);
    double t0 = now();
    torch::autograd::backward({f.out}, {at::ones_like(f.out)});
    const double backward = since(t0) / chain();
    f.out = at::Tensor();
    const at::Tensor input =
        at::randn({o_.points[f.point].tokens, o_.hidden}, float_).requires_grad_(true);
    t0 = now();
    const at::Tensor out = module_.layer(chain() - 1, input, *f.ctx);
    torch::autograd::backward({out}, {at::ones_like(out)});
    return {f.point, f.timed, backward, since(t0)};
  }

  double embedding(int64_t tokens) {
    const auto ctx = context({tokens, 0});
    const at::Tensor ids = at::randint(o_.vocab, {tokens}, at::dtype(at::kLong).device(o_.device));
    at::AutoGradMode grad_mode(true);
    const double t0 = now();
    const at::Tensor out = module_.embed(ids, *ctx);
    return since(t0);
  }

  // The head and the executor's loss on it (forward: the cost model charges the backward as
  // backward_ratio times the forward).
  double head(int64_t tokens) {
    const auto ctx = context({tokens, 0});
    const at::Tensor hidden = at::randn({tokens, o_.hidden}, float_).requires_grad_(true);
    const at::Tensor targets =
        at::randint(o_.vocab, {tokens}, at::dtype(at::kLong).device(o_.device));
    {
      at::NoGradGuard no_grad;  // the chunk's module state, made by its layers in the executor
      module_.head(hidden.detach(), *ctx);
    }
    at::AutoGradMode grad_mode(true);
    const double t0 = now();
    const at::Tensor logits = module_.head(hidden, *ctx);
    const at::Tensor loss = next_token_loss(logits, targets, static_cast<double>(tokens));
    loss.detach().item<double>();
    return since(t0);
  }

 private:
  // Seconds on the options' clock. Kernels are asynchronous on GPUs: wait for them at both ends
  // of a timed region.
  double now() const {
    if (o_.device.is_cuda()) torch::cuda::synchronize(o_.device.index());
    if (o_.thread_cpu_time) {
      timespec ts;
      clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
      return double(ts.tv_sec) + 1e-9 * double(ts.tv_nsec);
    }
    return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch())
        .count();
  }
  double since(double t0) const { return now() - t0; }

  // A recorded forward whose backward is still to come: its saved tensors, and its context's
  // K/V buffers, stay held as a pipeline stage holds its chunks in flight (options.in_flight).
  struct InFlight {
    int point;  // into o_.points
    bool timed;
    OwnedContext ctx;
    at::Tensor out;
  };

  StageModule& module_;
  const LayerProfilerOptions& o_;
  at::TensorOptions float_;
  std::deque<InFlight> in_flight_;
};

}  // namespace

void LayerProfilerOptions::validate() const {
  check(!points.empty(), "layer profiler: no grid points");
  for (const GridPoint& p : points)
    check(p.tokens >= 1 && p.context >= 0,
          "layer profiler: grid point (tokens " + std::to_string(p.tokens) + ", context " +
              std::to_string(p.context) + ") needs tokens >= 1 and context >= 0");
  check(repeats >= 1, "layer profiler: repeats must be at least 1");
  check(min_timed_tokens >= 0, "layer profiler: min_timed_tokens must be zero or positive");
  check(warmup >= 0, "layer profiler: warmup must be zero or positive");
  check(in_flight >= 0,
        "layer profiler: in_flight must be zero or positive, got " + std::to_string(in_flight));
  check(hidden > 0 && kv_heads > 0 && head_dim > 0,
        "layer profiler: hidden, kv_heads and head_dim must be positive");
  check(at::isFloatingType(dtype), "layer profiler: dtype must be a floating type");
  check(!thread_cpu_time || (device.is_cpu() && at::get_num_threads() == 1),
        "layer profiler: thread CPU time needs the CPU with one intra-op thread (other threads' "
        "work would not be counted)");
}

CalibrationSamples LayerProfile::samples(Statistic statistic) const {
  CalibrationSamples out;
  for (const PointRuns& r : layer)
    out.layer.push_back({r.point.tokens, r.point.context, robust_time(r.forward_s, statistic),
                         robust_time(r.backward_s, statistic),
                         robust_time(r.checkpointed_forward_s, statistic),
                         robust_time(r.recomputed_s, statistic)});
  for (const PartRuns& r : embedding)
    out.embedding.push_back({r.tokens, robust_time(r.seconds, statistic)});
  for (const PartRuns& r : head) out.head.push_back({r.tokens, robust_time(r.seconds, statistic)});
  return out;
}

LayerProfile profile_layer(StageModule& module, const LayerProfilerOptions& options) {
  options.validate();
  check(!(module.has_embedding() || module.has_head()) || options.vocab > 0,
        "layer profiler: the module has an embedding or a head, so vocab must be positive");
  LayerProfile profile;
  std::vector<Task> round;
  for (int i = 0; i < int(options.points.size()); ++i) {
    profile.layer.push_back({options.points[i], {}, {}, {}, {}});
    round.push_back({Kind::Layer, i});
  }
  std::set<int64_t> token_counts;
  for (const GridPoint& p : options.points) token_counts.insert(p.tokens);
  for (int64_t s : token_counts) {
    if (module.has_embedding()) {
      round.push_back({Kind::Embedding, int(profile.embedding.size())});
      profile.embedding.push_back({s, {}});
    }
    if (module.has_head()) {
      round.push_back({Kind::Head, int(profile.head.size())});
      profile.head.push_back({s, {}});
    }
  }
  // Every (task, repeat) in one shuffled order, so that drift (frequency scaling, other
  // processes) spreads over all points instead of biasing the ones measured together.
  // Round r holds the tasks timed more than r times (every task, without min_timed_tokens).
  std::vector<int> runs;
  for (const Task& t : round) {
    const int64_t tokens = t.kind == Kind::Layer       ? options.points[t.index].tokens
                           : t.kind == Kind::Embedding ? profile.embedding[t.index].tokens
                                                       : profile.head[t.index].tokens;
    runs.push_back(timed_runs(tokens, options.repeats, options.min_timed_tokens));
  }
  std::vector<Task> order;
  const int most = *std::max_element(runs.begin(), runs.end());
  for (int r = 0; r < most; ++r)
    for (size_t i = 0; i < round.size(); ++i)
      if (runs[i] > r) order.push_back(round[i]);
  std::mt19937_64 rng(options.seed);
  for (int i = int(order.size()) - 1; i > 0; --i)
    std::swap(order[i], order[rng() % uint64_t(i + 1)]);

  Bench bench(module, options);
  // The backwards of the oldest recorded forwards, until at most `keep` are in flight.
  auto backwards = [&](size_t keep) {
    while (bench.in_flight() > keep) {
      const auto b = bench.backward_oldest();
      if (!b.timed) continue;
      profile.layer[b.point].backward_s.push_back(b.seconds);
      profile.layer[b.point].recomputed_s.push_back(b.recomputed);
    }
  };
  const int total = int(round.size()) * options.warmup + int(order.size());
  int done = 0;
  auto run = [&](const Task& t, bool timed) {
    switch (t.kind) {
      case Kind::Layer: {
        PointRuns& r = profile.layer[t.index];
        const auto times = bench.forward(r.point, t.index, timed);
        if (timed) {
          r.forward_s.push_back(times.forward);
          r.checkpointed_forward_s.push_back(times.checkpointed_forward);
        }
        backwards(options.in_flight);
        break;
      }
      case Kind::Embedding: {
        PartRuns& r = profile.embedding[t.index];
        const double s = bench.embedding(r.tokens);
        if (timed) r.seconds.push_back(s);
        break;
      }
      case Kind::Head: {
        PartRuns& r = profile.head[t.index];
        const double s = bench.head(r.tokens);
        if (timed) r.seconds.push_back(s);
        break;
      }
    }
    if (options.progress) options.progress(++done, total);
  };
  for (int w = 0; w < options.warmup; ++w)
    for (const Task& t : round) run(t, false);
  for (const Task& t : order) run(t, true);
  backwards(0);
  return profile;
}

}  // namespace infinipipe::runtime
