// infinipipe._C.models: C++ LibTorch stage modules, usable from Python (parity tests, or a
// Trainer whose factory returns one: the executor then runs it without the GIL).
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>
#include <torch/csrc/utils/pybind.h>

#include <map>
#include <memory>
#include <optional>
#include <string>

#include "bindings.h"
#include "infinipipe/models/llama.h"

namespace py = pybind11;

namespace infinipipe::python {

void bind_models(py::module_& root) {
  py::module_ m = root.def_submodule("models", "C++ stage modules");
  using models::LlamaConfig;
  using models::LlamaStage;

  // The base class runtime.StageModule is registered by bind_runtime (called first).
  py::class_<LlamaStage, runtime::StageModule, std::shared_ptr<LlamaStage>>(
      m, "LlamaStage",
      "Layers [first_layer, last_layer) of the LLaMA decoder in C++, with the embedding and/or "
      "the final norm and LM head: the same numerics and parameter names as "
      "infinipipe.models.llama.LlamaStage. seed: that model's seeded initialisation (None: "
      "zero matrices, to be loaded with load_state_dict).")
      .def(py::init([](int64_t vocab, int64_t hidden, int64_t layers, int64_t heads,
                       int64_t kv_heads, int64_t ffn, int first_layer, int last_layer,
                       bool has_embedding, bool has_head, double rope_theta, double rms_eps,
                       at::ScalarType dtype, std::optional<uint64_t> seed, at::Device device,
                       bool lean_layer) {
             LlamaConfig c;
             c.vocab = vocab;
             c.hidden = hidden;
             c.layers = layers;
             c.heads = heads;
             c.kv_heads = kv_heads;
             c.ffn = ffn;
             c.rope_theta = rope_theta;
             c.rms_eps = rms_eps;
             c.dtype = dtype;
             c.lean_layer = lean_layer;
             return std::make_shared<LlamaStage>(c, first_layer, last_layer, has_embedding,
                                                 has_head, seed, device);
           }),
           py::arg("vocab"), py::arg("hidden"), py::arg("layers"), py::arg("heads"),
           py::arg("kv_heads"), py::arg("ffn"), py::arg("first_layer"), py::arg("last_layer"),
           py::arg("has_embedding"), py::arg("has_head"), py::arg("rope_theta") = 10000.0,
           py::arg("rms_eps") = 1e-6, py::arg("dtype") = at::kFloat,
           py::arg("seed") = std::optional<uint64_t>(0), py::arg("device") = at::Device(at::kCPU),
           py::arg("lean_layer") = false)
      .def_property_readonly("first_layer", &LlamaStage::first_layer)
      .def_property_readonly("last_layer", &LlamaStage::last_layer)
      .def("named_parameters", &LlamaStage::named_parameters,
           "(name, parameter) pairs in the Python model's order.")
      .def("state_dict", &LlamaStage::state_dict)
      .def("load_state_dict", &LlamaStage::load_state_dict, py::arg("weights"),
           py::arg("strict") = true,
           "Copies named tensors into the parameters; strict=False ignores names of other "
           "stages and keeps parameters the map lacks.")
      .def("__repr__", [](const LlamaStage& s) {
        return "<infinipipe._C.models.LlamaStage layers [" + std::to_string(s.first_layer()) +
               ", " + std::to_string(s.last_layer()) + ")" +
               (s.has_embedding() ? ", embedding" : "") + (s.has_head() ? ", head" : "") + ">";
      });
}

}  // namespace infinipipe::python
