// infinipipe._C: the Python face of the LibTorch runtime.
//
// Built against torch's bundled pybind11 headers and linked with libtorch_python, so the tensor,
// dtype and device casters below are torch's own (see python/CMakeLists.txt).
#include <pybind11/operators.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>
#include <torch/csrc/utils/pybind.h>

#include <optional>
#include <sstream>
#include <string>

#include "bindings.h"
#include "infinipipe/kernels/chunk_attention.h"

namespace py = pybind11;
namespace kn = infinipipe::kernels;

namespace {

// The shared vocabulary (core/chunk.h): one Slice type for the planner, the executor, the
// kernels and the Python model. A (seq, start, end[, seq_length]) tuple converts implicitly.
void bind_core(py::module_& m) {
  using infinipipe::Slice;
  auto make = [](int seq, int64_t start, int64_t end, std::optional<int64_t> seq_length) {
    return Slice{seq, start, end, seq_length.value_or(end)};
  };
  py::class_<Slice>(m, "Slice",
                    "Tokens [start, end) of sequence `seq` (of seq_length tokens; default: end, a "
                    "slice that ends its sequence). Its context is `start`.")
      .def(py::init(make), py::arg("seq"), py::arg("start"), py::arg("end"),
           py::arg("seq_length") = py::none())
      .def(py::init([make](const py::tuple& t) {
        if (t.size() != 3 && t.size() != 4)
          throw py::value_error("Slice: a tuple must be (seq, start, end[, seq_length]), got " +
                                std::string(py::repr(t)));
        return make(t[0].cast<int>(), t[1].cast<int64_t>(), t[2].cast<int64_t>(),
                    t.size() == 4 ? std::optional<int64_t>(t[3].cast<int64_t>()) : std::nullopt);
      }))
      .def_readonly("seq", &Slice::seq)
      .def_readonly("start", &Slice::start)
      .def_readonly("end", &Slice::end)
      .def_readonly("seq_length", &Slice::seq_length)
      .def_property_readonly("length", &Slice::length)
      .def_property_readonly("context", &Slice::context)
      .def_property_readonly("whole", &Slice::whole)
      .def(
          "__iter__",
          [](const Slice& s) { return py::iter(py::make_tuple(s.seq, s.start, s.end)); },
          "(seq, start, end), so that `seq, start, end = slice` works")
      .def(py::self == py::self)
      .def("__repr__", [](const Slice& s) {
        std::ostringstream os;
        os << "Slice(seq=" << s.seq << ", start=" << s.start << ", end=" << s.end
           << ", seq_length=" << s.seq_length << ")";
        return os.str();
      });
  py::implicitly_convertible<py::tuple, Slice>();
}

void bind_kernels(py::module_& m) {
  py::class_<kn::SequenceKV, std::shared_ptr<kn::SequenceKV>>(
      m, "SequenceKV",
      "K/V buffer of one split sequence for one layer, with its gradient accumulators dk, dv; "
      "all [seq_length, kv_heads, head_dim].")
      .def(py::init([](int64_t seq_length, int64_t kv_heads, int64_t head_dim, at::ScalarType dtype,
                       at::Device device) {
             return kn::SequenceKV::create(seq_length, kv_heads, head_dim, dtype, device);
           }),
           py::arg("seq_length"), py::arg("kv_heads"), py::arg("head_dim"),
           py::arg("dtype") = at::kFloat, py::arg("device") = at::Device(at::kCPU))
      .def_readonly("k", &kn::SequenceKV::k)
      .def_readonly("v", &kn::SequenceKV::v)
      .def_readonly("dk", &kn::SequenceKV::dk)
      .def_readonly("dv", &kn::SequenceKV::dv)
      .def_property_readonly("seq_length", &kn::SequenceKV::seq_length)
      .def_property_readonly("kv_heads", &kn::SequenceKV::kv_heads)
      .def_property_readonly("head_dim", &kn::SequenceKV::head_dim)
      .def_property_readonly("nbytes", &kn::SequenceKV::nbytes)
      .def("zero_grad", &kn::SequenceKV::zero_grad)
      .def("__repr__", [](const kn::SequenceKV& kv) {
        std::ostringstream os;
        os << "SequenceKV(seq_length=" << kv.seq_length() << ", kv_heads=" << kv.kv_heads()
           << ", head_dim=" << kv.head_dim() << ", dtype=" << kv.k.scalar_type() << ")";
        return os.str();
      });

  m.def(
      "chunk_attention",
      [](const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
         const std::vector<infinipipe::Slice>& slices, const kn::SliceBuffers& kv, double scale,
         const std::string& backend) {
        kn::Backend b = kn::parse_backend(backend);
        py::gil_scoped_release release;
        return kn::chunk_attention(q, k, v, slices, kv, scale, b);
      },
      py::arg("q"), py::arg("k"), py::arg("v"), py::arg("slices"),
      py::arg("kv") = kn::SliceBuffers{}, py::arg("scale") = 0.0, py::arg("backend") = "auto",
      "Attention of a packed chunk: q [T, heads, head_dim], k, v [T, kv_heads, head_dim]; the "
      "slices (Slice or (seq, start, end) tuples) lie in the rows back to back and each "
      "attends causally to its own sequence, through kv[i], its SequenceKV, for a slice of a "
      "split one (None for a whole sequence; kv=[]: all whole). Returns [T, heads, head_dim], "
      "differentiable. scale <= 0 means 1/sqrt(head_dim). backend: 'auto' (flash on CPU), "
      "'flash' or 'math'.");
}

}  // namespace

PYBIND11_MODULE(_C, m) {
  py::module_::import("torch");  // torch's casters need its Python types
  m.doc() = "InfiniPipe's LibTorch runtime";
  bind_core(m);
  auto kernels = m.def_submodule("kernels", "Chunk attention and other ops");
  bind_kernels(kernels);
  // flat aliases for convenience
  m.attr("SequenceKV") = kernels.attr("SequenceKV");
  m.attr("chunk_attention") = kernels.attr("chunk_attention");
  infinipipe::python::bind_plan(m);
  infinipipe::python::bind_runtime(m);
  infinipipe::python::bind_models(m);
}
