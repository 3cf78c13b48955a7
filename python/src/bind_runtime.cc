// Over 400 lines for a reason: one face of _C, the runtime: the executor and its options, the
// Python stage protocol, the layer profiler's entry, sharing the GIL and tensor conversions.
// infinipipe._C.runtime: the executor and its Python face.
//
// The process group comes from torch.distributed in Python: torch registers c10d::ProcessGroup
// with pybind11 and an intrusive_ptr holder, and this module is built against torch's bundled
// pybind11 and libtorch_python, so the Python object casts straight to
// c10::intrusive_ptr<c10d::ProcessGroup> (one code path for Gloo and NCCL; docs/runtime.md).
#include <pybind11/functional.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>
#include <torch/csrc/autograd/python_variable.h>
#include <torch/csrc/utils/pybind.h>

#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>

#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <tuple>

#include "bindings.h"
#include "infinipipe/core/error.h"
#include "infinipipe/runtime/executor.h"
#include "infinipipe/runtime/layer_profiler.h"
#include "infinipipe/runtime/message_order.h"
#include "infinipipe/runtime/next_token_loss.h"
#include "infinipipe/runtime/pipe.h"

namespace py = pybind11;

namespace infinipipe::python {

namespace {

using runtime::ChunkContext;
using runtime::Executor;
using runtime::ExecutorOptions;
using runtime::StageModule;
using runtime::StepStats;

// A stage module written in Python: any object with num_layers, has_embedding, has_head,
// embed(tokens, ctx), layer(local_index, hidden, ctx), head(hidden, ctx), parameters(). ctx is
// the chunk's ChunkContext; its Python object lives as long as the chunk (in module_state), so
// attributes a module sets on it (per-chunk caches) last from the chunk's forward to its
// backward.
class PythonStageModule : public StageModule {
 public:
  explicit PythonStageModule(py::object impl) : impl_(std::move(impl)) {
    for (const char* name :
         {"num_layers", "has_embedding", "has_head", "embed", "layer", "head", "parameters"})
      check(py::hasattr(impl_, name),
            std::string("stage module: the Python object lacks '") + name + "'");
    num_layers_ = impl_.attr("num_layers").cast<int>();
    has_embedding_ = impl_.attr("has_embedding").cast<bool>();
    has_head_ = impl_.attr("has_head").cast<bool>();
    check(num_layers_ >= 1, "stage module: num_layers must be at least 1");
  }
  ~PythonStageModule() override {
    py::gil_scoped_acquire gil;
    impl_ = py::object();
  }

  int num_layers() const override { return num_layers_; }
  bool has_embedding() const override { return has_embedding_; }
  bool has_head() const override { return has_head_; }

  at::Tensor embed(const at::Tensor& tokens, ChunkContext& ctx) override {
    py::gil_scoped_acquire gil;
    return tensor_result(impl_.attr("embed")(tokens, context(ctx)), "embed");
  }
  at::Tensor layer(int local_index, const at::Tensor& hidden, ChunkContext& ctx) override {
    py::gil_scoped_acquire gil;
    return tensor_result(impl_.attr("layer")(local_index, hidden, context(ctx)), "layer");
  }
  at::Tensor head(const at::Tensor& hidden, ChunkContext& ctx) override {
    py::gil_scoped_acquire gil;
    return tensor_result(impl_.attr("head")(hidden, context(ctx)), "head");
  }
  std::vector<at::Tensor> parameters() override {
    py::gil_scoped_acquire gil;
    std::vector<at::Tensor> out;
    for (py::handle p : impl_.attr("parameters")()) out.push_back(p.cast<at::Tensor>());
    return out;
  }

 private:
  static at::Tensor tensor_result(const py::object& out, const char* method) {
    if (!THPVariable_Check(out.ptr()))
      throw Error(std::string("stage module: ") + method + "() must return a tensor, got " +
                  std::string(py::str(py::type::of(out))));
    return THPVariable_Unpack(out.ptr());
  }

  // The chunk's context as one Python object for the chunk's lifetime (the executor resets
  // module_state when the chunk is done, which breaks the cycle through it).
  static py::object context(ChunkContext& ctx) {
    if (!ctx.module_state) {
      py::object made = py::cast(ctx.shared_from_this());
      ctx.module_state = std::shared_ptr<void>(new py::object(std::move(made)), [](void* p) {
        py::gil_scoped_acquire gil;
        delete static_cast<py::object*>(p);
      });
    }
    return *static_cast<py::object*>(ctx.module_state.get());
  }

  py::object impl_;
  int num_layers_ = 0;
  bool has_embedding_ = false;
  bool has_head_ = false;
};

py::dict stats_dict(const StepStats& s) {
  py::dict d;
  d["loss"] = s.loss;
  d["target_tokens"] = s.target_tokens;
  d["total_s"] = s.total_s;
  d["actions_s"] = s.actions_s;
  d["forward_s"] = s.forward_s;
  d["backward_s"] = s.backward_s;
  d["recompute_s"] = s.recompute_s;
  d["wait_s"] = s.wait_s;
  d["bytes_sent"] = s.bytes_sent;
  d["bytes_received"] = s.bytes_received;
  d["peak_kv_bytes"] = s.peak_kv_bytes;
  d["peak_checkpoint_bytes"] = s.peak_checkpoint_bytes;
  d["peak_held_bytes"] = s.peak_held_bytes;
  d["recomputed_layers"] = s.recomputed_layers;
  d["weight_s"] = s.weight_s;
  d["split_graphs"] = s.split_graphs;
  d["unsplit_graphs"] = s.unsplit_graphs;
  d["all_to_all_s"] = s.all_to_all_s;
  d["all_to_all_bytes"] = s.all_to_all_bytes;
  return d;
}

// Executor::run or Executor::evaluate, with the GIL released while the stage's plan runs.
template <StepStats (Executor::*Run)(const Plan&, const std::vector<at::Tensor>&, int64_t)>
py::dict run_without_gil(Executor& ex, const Plan& plan, const std::vector<at::Tensor>& sequences,
                         int64_t loss_tokens) {
  StepStats stats;
  {
    py::gil_scoped_release release;
    stats = (ex.*Run)(plan, sequences, loss_tokens);
  }
  return stats_dict(stats);
}

c10::intrusive_ptr<c10d::ProcessGroup> process_group_from(const py::object& group) {
  try {
    return group.cast<c10::intrusive_ptr<c10d::ProcessGroup>>();
  } catch (const py::cast_error&) {
    throw Error(
        "executor: expected a torch.distributed ProcessGroup (for example "
        "torch.distributed.group.WORLD after init_process_group), got " +
        std::string(py::str(py::type::of(group))));
  }
}

// The global rank of each rank of a torch.distributed group, in its rank order
// (torch.distributed.get_process_group_ranks); empty when torch cannot tell (the executor then
// gathers them over the group).
std::vector<int> global_ranks_of(const py::object& group) {
  try {
    return py::module_::import("torch.distributed")
        .attr("get_process_group_ranks")(group)
        .cast<std::vector<int>>();
  } catch (const py::error_already_set&) {
    return {};
  }
}

// A C++ stage module (a subclass of StageModule) as it is; any other object through the Python
// protocol (PythonStageModule), as the Executor takes its module.
std::shared_ptr<StageModule> stage_module_from(py::object module) {
  return py::isinstance<StageModule>(module)
             ? module.cast<std::shared_ptr<StageModule>>()
             : std::make_shared<PythonStageModule>(std::move(module));
}

py::dict profile_dict(const runtime::LayerProfile& profile) {
  py::list layer, embedding, head;
  for (const auto& r : profile.layer)
    layer.append(py::dict(py::arg("tokens") = r.point.tokens, py::arg("context") = r.point.context,
                          py::arg("forward_s") = r.forward_s, py::arg("backward_s") = r.backward_s,
                          py::arg("checkpointed_forward_s") = r.checkpointed_forward_s,
                          py::arg("recomputed_s") = r.recomputed_s));
  for (const auto& r : profile.embedding)
    embedding.append(py::dict(py::arg("tokens") = r.tokens, py::arg("seconds") = r.seconds));
  for (const auto& r : profile.head)
    head.append(py::dict(py::arg("tokens") = r.tokens, py::arg("seconds") = r.seconds));
  return py::dict(py::arg("layer") = layer, py::arg("embedding") = embedding,
                  py::arg("head") = head);
}

}  // namespace

// runtime::PeerError as _C.runtime.PeerError (an _C.Error) with the peer's `rank` (-1 for a
// collective), the backend's full text in `backend_detail` and whether the wait ran out its
// timeout (`timed_out`), for the trainer's failure report.
void bind_peer_error(py::module_& root, py::module_& m) {
  static py::exception<runtime::PeerError> type(m, "PeerError", root.attr("Error"));
  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const runtime::PeerError& e) {
      py::object error = py::handle(type.ptr())(e.what());
      error.attr("rank") = e.rank();
      error.attr("backend_detail") = e.backend_detail();
      error.attr("timed_out") = e.timed_out();
      PyErr_SetObject(type.ptr(), error.ptr());
    }
  });
}

void bind_runtime(py::module_& root) {
  py::module_ m = root.def_submodule("runtime", "The executor and its chunk contexts");
  bind_peer_error(root, m);

  // py::dynamic_attr: a Python stage module may keep per-chunk state on its context (the
  // executor keeps the Python object alive for the chunk's lifetime: PythonStageModule).
  py::class_<ChunkContext, std::shared_ptr<ChunkContext>>(
      m, "ChunkContext", py::dynamic_attr(),
      "One chunk as a stage module sees it: its slices (laid out in the rows back to back), "
      "each row's position in its sequence, and per-layer chunk attention.")
      .def(py::init([](const std::vector<Slice>& slices, std::vector<kernels::SliceBuffers> kv,
                       int chunk, at::Device device, double scale, const std::string& backend) {
             runtime::ChunkContextOptions o;
             o.chunk = chunk;
             o.device = device;
             o.attention_scale = scale;
             o.attention_backend = kernels::parse_backend(backend);
             return std::make_shared<ChunkContext>(slices, std::move(kv), o);
           }),
           py::arg("slices"), py::arg("kv") = std::vector<kernels::SliceBuffers>{},
           py::arg("chunk") = 0, py::arg("device") = at::Device(at::kCPU), py::arg("scale") = 0.0,
           py::arg("backend") = "auto",
           "A chunk's context outside the executor (a model run unpipelined, tests, C++ stage "
           "modules driven from Python): slices as Slice or (seq, start, end) tuples; "
           "kv[layer][i] the SequenceKV of slice i on that layer, None for a whole sequence "
           "(kv=[]: whole sequences only, any layer).")
      .def_static(
          "packed",
          [](const std::vector<int64_t>& lengths, at::Device device) {
            std::vector<Slice> slices;
            for (size_t i = 0; i < lengths.size(); ++i)
              slices.push_back(Slice{static_cast<int>(i), 0, lengths[i], lengths[i]});
            runtime::ChunkContextOptions options;
            options.device = device;
            return std::make_shared<ChunkContext>(std::move(slices),
                                                  std::vector<kernels::SliceBuffers>{}, options);
          },
          py::arg("lengths"), py::arg("device") = at::Device(at::kCPU),
          "Whole sequences 0, 1, ... of these lengths packed back to back.")
      .def_property_readonly("chunk", &ChunkContext::chunk)
      .def_property_readonly("num_tokens", &ChunkContext::num_tokens)
      .def_property_readonly("num_layers", &ChunkContext::num_layers)
      .def_property_readonly("positions", &ChunkContext::positions)
      .def_property_readonly("slices", &ChunkContext::slices)
      .def_property_readonly("sequence_rank", &ChunkContext::sequence_rank,
                             "This rank among the stage's sequence-parallel ranks (0 without).")
      .def_property_readonly("sequence_size", &ChunkContext::sequence_size,
                             "The stage's sequence-parallel degree d_s (1 without).")
      .def(
          "attention",
          [](const ChunkContext& c, int layer, const at::Tensor& q, const at::Tensor& k,
             const at::Tensor& v) {
            py::gil_scoped_release release;
            return c.attention(layer, q, k, v);
          },
          py::arg("layer"), py::arg("q"), py::arg("k"), py::arg("v"),
          "Chunk attention on local layer `layer`: q [T, heads, d], k, v [T, kv_heads, d].")
      .def("__repr__", [](const ChunkContext& c) {
        return "<ChunkContext chunk " + std::to_string(c.chunk()) + ", " +
               std::to_string(c.num_tokens()) + " tokens, " + std::to_string(c.slices().size()) +
               " slices>";
      });

  m.def(
      "shard_rows",
      [](const std::vector<Slice>& slices, int ranks, int rank) {
        const runtime::ShardRows r = runtime::shard_rows(slices, ranks, rank);
        return py::dict(py::arg("tokens") = r.tokens, py::arg("padded") = r.padded,
                        py::arg("local") = r.local, py::arg("first") = r.first,
                        py::arg("real") = r.real, py::arg("pieces") = r.pieces);
      },
      py::arg("slices"), py::arg("ranks"), py::arg("rank"),
      "Sequence-parallel rank `rank` of `ranks`'s rows of a chunk of these slices "
      "(runtime/sequence_rows.h): tokens T, padded T_pad, local T_pad / ranks, first (its first "
      "padded row), real (its real rows; the rest is padding), pieces (the slices' parts in its "
      "rows).");
  m.def(
      "shard_inputs",
      [](const std::vector<Slice>& slices, int ranks, int rank,
         const std::vector<at::Tensor>& sequences) {
        const runtime::ShardRows r = runtime::shard_rows(slices, ranks, rank);
        return std::make_tuple(runtime::shard_tokens(r, sequences),
                               runtime::shard_targets(r, sequences));
      },
      py::arg("slices"), py::arg("ranks"), py::arg("rank"), py::arg("sequences"),
      "(tokens, targets) of that rank's rows, as the executor embeds and scores them: padding "
      "rows hold token 0 and target IGNORE_INDEX.");

  m.def(
      "settle_group",
      [](const py::object& group, const std::string& device, double timeout_s) {
        auto pg = process_group_from(group);
        py::gil_scoped_release release;
        // Created here and never handed to Python: Gloo keeps its last finished work alive, and
        // a Python-owned tensor in it released at interpreter shutdown aborts the process
        // (docs/runtime.md, "Exits").
        std::vector<at::Tensor> probe{at::zeros({1}, at::TensorOptions().device(device))};
        runtime::wait_collective(
            [&] { return pg->allreduce(probe); },
            std::chrono::milliseconds(static_cast<int64_t>(timeout_s * 1000.0)),
            "all-reduce closing the stage group's collectives");
      },
      py::arg("group"), py::arg("device"), py::arg("timeout_s"),
      "A one-element all-reduce over `group` on a tensor Python never sees, so that the "
      "group's last work holds no Python-owned tensor; PeerError on a timeout or a lost rank.");
  m.def(
      "message_order_conflict",
      [](const Plan& plan, bool heads_apart) {
        return runtime::message_order_conflict(plan.schedule, heads_apart);
      },
      py::arg("plan"), py::arg("heads_apart") = false,
      "The first message the plan's schedule sends to a stage in another place than that stage "
      "receives it, described (empty when none); heads_apart: the head's messages on a group of "
      "their own. NCCL matches messages between two ranks in issue order, so the executor "
      "refuses such a plan on NCCL (runtime/message_order.h).");
  m.attr("IGNORE_INDEX") = runtime::kIgnoreIndex;
  m.def("next_token_targets", &runtime::next_token_targets, py::arg("slices"), py::arg("sequences"),
        "Target ids [T] of a chunk's rows: each token's next token in its sequence, "
        "IGNORE_INDEX for a sequence's last token. sequences[seq]: sequence seq's token ids.");
  m.def("next_token_loss", &runtime::next_token_loss, py::arg("logits"), py::arg("targets"),
        py::arg("target_tokens"),
        "Summed cross-entropy of logits [T, vocab] against targets (float32 at least), divided "
        "by the step's target count: the chunks' losses add up to the step's mean loss.");

  py::class_<StageModule, std::shared_ptr<StageModule>>(
      m, "StageModule",
      "A stage module implemented in C++ (for example models.LlamaStage). The executor runs it "
      "directly; its methods take the C++ ChunkContext and local layer indices.")
      .def_property_readonly("num_layers", &StageModule::num_layers)
      .def_property_readonly("has_embedding", &StageModule::has_embedding)
      .def_property_readonly("has_head", &StageModule::has_head)
      .def("embed", &StageModule::embed, py::arg("tokens"), py::arg("ctx"),
           "tokens [T] -> hidden [T, hidden] (first stage only).")
      .def("layer", &StageModule::layer, py::arg("local_index"), py::arg("hidden"), py::arg("ctx"),
           "hidden [T, hidden] -> hidden [T, hidden] through local layer i.")
      .def("head", &StageModule::head, py::arg("hidden"), py::arg("ctx"),
           "hidden [T, hidden] -> logits [T, vocab] (last stage only).")
      .def("parameters", &StageModule::parameters);

  // The executor's settings, one field each (runtime/executor.h); its process groups and its
  // stage module are the constructor's arguments.
  py::class_<ExecutorOptions>(m, "ExecutorOptions", "The executor's settings (runtime/executor.h).")
      .def(py::init([](py::kwargs fields) {
             ExecutorOptions o;
             py::object self = py::cast(o);
             for (const auto& [name, value] : fields) py::setattr(self, name, value);
             return self.cast<ExecutorOptions>();
           }),
           "ExecutorOptions(stage=..., num_stages=..., dtype=..., ...): any field by name.")
      .def_readwrite("stage", &ExecutorOptions::stage)
      .def_readwrite("num_stages", &ExecutorOptions::num_stages)
      .def_readwrite("dtype", &ExecutorOptions::dtype, "activations, gradients, K/V buffers")
      .def_readwrite("device", &ExecutorOptions::device)
      .def_readwrite("hidden", &ExecutorOptions::hidden)
      .def_readwrite("kv_heads", &ExecutorOptions::kv_heads)
      .def_readwrite("head_dim", &ExecutorOptions::head_dim)
      .def_readwrite("attention_scale", &ExecutorOptions::attention_scale,
                     "<= 0: 1 / sqrt(head_dim)")
      .def_property(
          "attention_backend",
          [](const ExecutorOptions& o) { return kernels::to_string(o.attention_backend); },
          [](ExecutorOptions& o, const std::string& name) {
            o.attention_backend = kernels::parse_backend(name);
          },
          "the chunk attention's kernels: auto, flash, varlen, math")
      .def_property(
          "timeout_s", [](const ExecutorOptions& o) { return o.timeout.count() / 1000.0; },
          [](ExecutorOptions& o, double seconds) {
            check(seconds > 0, "executor: timeout_s must be positive");
            o.timeout = std::chrono::milliseconds(static_cast<int64_t>(seconds * 1000));
          },
          "how long any wait on a peer lasts")
      .def_readwrite("stage_ranks", &ExecutorOptions::stage_ranks,
                     "the rank of every stage of this rank's pipeline; empty: stage s is rank s");

  py::class_<Executor>(m, "Executor",
                       "Runs one stage's actions of a plan over a torch.distributed group.")
      .def(py::init([](py::object module, py::object group, ExecutorOptions o,
                       py::object sequence_group, py::object head_group) {
             if (!sequence_group.is_none()) {
               o.sequence_group = process_group_from(sequence_group);
               o.sequence_ranks = global_ranks_of(sequence_group);
             }
             if (!head_group.is_none()) o.head_group = process_group_from(head_group);
             // A C++ stage module (a subclass of StageModule) runs as it is, without the GIL;
             // any other object is driven through the Python protocol.
             std::shared_ptr<StageModule> stage_module =
                 py::isinstance<StageModule>(module)
                     ? module.cast<std::shared_ptr<StageModule>>()
                     : std::make_shared<PythonStageModule>(std::move(module));
             return std::make_unique<Executor>(std::move(stage_module), process_group_from(group),
                                               std::move(o));
           }),
           py::arg("module"), py::arg("group"), py::arg("options"),
           py::arg("sequence_group") = py::none(), py::arg("head_group") = py::none(),
           "group: the world (every rank); options: ExecutorOptions. sequence_group: the "
           "torch.distributed group of this stage's sequence-parallel ranks (Ulysses; None or "
           "one rank: none), this rank among them; every action then runs on this rank's share "
           "of each chunk's rows and parameter gradients are that share's (sum them over the "
           "group). head_group: the group (the same ranks, in the same order) carrying the "
           "spread head's hidden states and gradients; None: group.")
      .def("run", run_without_gil<&Executor::run>, py::arg("plan"), py::arg("sequences"),
           py::arg("loss_tokens") = 0,
           "Runs this stage's actions of the plan; sequences[i] holds sequence i's tokens (1-D "
           "int64). loss_tokens: the target tokens the loss is averaged over (0: the plan's; "
           "a data-parallel replica passes the whole batch's). Returns a dict: loss "
           "(all-reduced), times, bytes, peak held memory.")
      .def("evaluate", run_without_gil<&Executor::evaluate>, py::arg("plan"), py::arg("sequences"),
           py::arg("loss_tokens") = 0,
           "Runs only the forwards of this stage's actions, without grad (evaluation). Returns "
           "the same dict as run(); parameter gradients are untouched.")
      .def(
          "add_peer_tensor",
          [](Executor& ex, at::Tensor tensor, int peer_stage, int index) {
            py::gil_scoped_release release;
            ex.add_peer_tensor(tensor, peer_stage, index);
          },
          py::arg("tensor"), py::arg("peer_stage"), py::arg("index") = 0,
          "Adds stage peer_stage's copy of `tensor` to this one, in place (the two gradients "
          "of a weight tied across stages); both stages call it, in the same order.")
      .def(
          "all_reduce_sum",
          [](Executor& ex, double value, const std::string& what) {
            py::gil_scoped_release release;
            return ex.all_reduce_sum(value, what);
          },
          py::arg("value"), py::arg("what") = "all-reduce",
          "Sum of `value` over every rank of the group, with the executor's timeout; `what` "
          "names it if a peer is lost.")
      .def(
          "all_gather_text",
          [](Executor& ex, const std::string& mine) {
            std::vector<std::string> texts;
            {
              py::gil_scoped_release release;
              texts = ex.all_gather_text(mine);
            }
            std::vector<py::bytes> out(texts.begin(), texts.end());
            return out;
          },
          py::arg("mine"),
          "Every rank's bytes `mine`, in rank order, over the executor's group (its timeout "
          "applies). No tensor of it is left with the backend for Python to release.")
      .def("held_tensors", &Executor::held_tensors,
           "K/V buffers, checkpointed-layer inputs and the gradients kept for W actions held "
           "right now (for memory probes).")
      .def("set_after_action", &Executor::set_after_action, py::arg("probe"),
           "probe(action_text) is called after every action (None to remove).")
      .def_property_readonly("stage", [](const Executor& ex) { return ex.options().stage; })
      .def_property_readonly("sequence_rank", &Executor::sequence_rank)
      .def_property_readonly("sequence_size", &Executor::sequence_size)
      .def_property_readonly(
          "timeout_s", [](const Executor& ex) { return ex.options().timeout.count() / 1000.0; });

  m.attr("profile_layer_in_flight") = runtime::LayerProfilerOptions{}.in_flight;
  m.attr("cpu_attention_query_cuts") = runtime::attention_query_cuts(c10::Device(c10::kCPU));
  m.def(
      "profile_layer",
      [](py::object module, const std::vector<std::pair<int64_t, int64_t>>& points, int repeats,
         int warmup, at::ScalarType dtype, at::Device device, int64_t hidden, int64_t kv_heads,
         int64_t head_dim, int64_t vocab, uint64_t seed, bool thread_cpu_time,
         const std::string& attention_backend, std::function<void(int, int)> progress,
         int in_flight, int64_t min_timed_tokens) {
        runtime::LayerProfilerOptions o;
        o.in_flight = in_flight;
        o.min_timed_tokens = min_timed_tokens;
        for (const auto& [tokens, context] : points) o.points.push_back({tokens, context});
        o.repeats = repeats;
        o.warmup = warmup;
        o.dtype = dtype;
        o.device = device;
        o.hidden = hidden;
        o.kv_heads = kv_heads;
        o.head_dim = head_dim;
        o.vocab = vocab;
        o.seed = seed;
        o.thread_cpu_time = thread_cpu_time;
        o.attention_backend = kernels::parse_backend(attention_backend);
        o.progress = std::move(progress);
        std::shared_ptr<StageModule> stage = stage_module_from(std::move(module));
        runtime::LayerProfile profile;
        {
          // As Executor.run: a Python stage module and the progress callback take the GIL back
          // for each call (PythonStageModule; pybind11's std::function wrapper).
          py::gil_scoped_release release;
          profile = runtime::profile_layer(*stage, o);
        }
        return profile_dict(profile);
      },
      py::arg("module"), py::arg("points"), py::arg("repeats"), py::arg("warmup"), py::arg("dtype"),
      py::arg("device"), py::arg("hidden"), py::arg("kv_heads"), py::arg("head_dim"),
      py::arg("vocab"), py::arg("seed") = 0, py::arg("thread_cpu_time") = false,
      py::arg("attention_backend") = "auto", py::arg("progress") = nullptr,
      py::arg("in_flight") = runtime::LayerProfilerOptions{}.in_flight,
      py::arg("min_timed_tokens") = 0,
      "Times local layer 0 of a stage module (C++ or Python protocol, as Executor takes it) on "
      "chunks of one slice (tokens, context) as the executor runs them, and its embedding and "
      "head + loss per token count when it has them (runtime/layer_profiler.h). Returns the raw "
      "runs: {'layer': [{tokens, context, forward_s: [...], backward_s: [...], "
      "checkpointed_forward_s: [...], recomputed_s: [...]}], 'embedding': "
      "[{tokens, seconds: [...]}], 'head': [...]}. progress(done, total) after every run.");
}

}  // namespace infinipipe::python
