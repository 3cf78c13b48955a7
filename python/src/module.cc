// infinipipe._C: the Python face of the LibTorch runtime.
//
// Built against torch's bundled pybind11 headers and linked with libtorch_python, so the tensor,
// dtype and device casters below are torch's own (see python/CMakeLists.txt).
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>
#include <torch/csrc/utils/pybind.h>

#include <sstream>
#include <string>

#include "bindings.h"
#include "kernels/chunk_attention.h"

namespace py = pybind11;
namespace kn = infinipipe::kernels;

namespace {

kn::Backend parse_backend(const std::string& name) {
  if (name == "auto") return kn::Backend::Auto;
  if (name == "flash") return kn::Backend::Flash;
  if (name == "math") return kn::Backend::Math;
  throw py::value_error("chunk_attention: backend must be 'auto', 'flash' or 'math', got '" +
                        name + "'");
}

void bind_kernels(py::module_& m) {
  py::class_<kn::SequenceKV, std::shared_ptr<kn::SequenceKV>>(
      m, "SequenceKV",
      "K/V buffer of one split sequence for one layer, with its gradient accumulators dk, dv; "
      "all [seq_length, kv_heads, head_dim].")
      .def(py::init([](int64_t seq_length, int64_t kv_heads, int64_t head_dim,
                       at::ScalarType dtype, at::Device device) {
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

  py::class_<kn::Segment>(
      m, "Segment",
      "Rows [row, row + length) of a packed chunk hold tokens [start, start + length) of one "
      "sequence; kv is its SequenceKV for a split sequence, None for a whole one.")
      .def(py::init([](int64_t row, int64_t start, int64_t length,
                       std::shared_ptr<kn::SequenceKV> kv) {
             return kn::Segment{row, start, length, std::move(kv)};
           }),
           py::arg("row"), py::arg("start"), py::arg("length"), py::arg("kv") = nullptr)
      .def_readwrite("row", &kn::Segment::row)
      .def_readwrite("start", &kn::Segment::start)
      .def_readwrite("length", &kn::Segment::length)
      .def_readwrite("kv", &kn::Segment::kv)
      .def_property_readonly("end", &kn::Segment::end)
      .def("__repr__", [](const kn::Segment& s) {
        std::ostringstream os;
        os << "Segment(row=" << s.row << ", start=" << s.start << ", length=" << s.length
           << (s.kv ? ", kv=<SequenceKV>)" : ")");
        return os.str();
      });

  m.def(
      "chunk_attention",
      [](const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
         const std::vector<kn::Segment>& segments, double scale, const std::string& backend) {
        kn::Backend b = parse_backend(backend);
        py::gil_scoped_release release;
        return kn::chunk_attention(q, k, v, segments, scale, b);
      },
      py::arg("q"), py::arg("k"), py::arg("v"), py::arg("segments"), py::arg("scale") = 0.0,
      py::arg("backend") = "auto",
      "Attention of a packed chunk: q [T, heads, head_dim], k, v [T, kv_heads, head_dim]; "
      "each segment attends causally to its own sequence (through its SequenceKV for a split "
      "one). Returns [T, heads, head_dim], differentiable. scale <= 0 means 1/sqrt(head_dim). "
      "backend: 'auto' (flash on CPU), 'flash' or 'math'.");
}

}  // namespace

PYBIND11_MODULE(_C, m) {
  py::module_::import("torch");  // torch's casters need its Python types
  m.doc() = "InfiniPipe's LibTorch runtime";
  auto kernels = m.def_submodule("kernels", "Chunk attention and other ops");
  bind_kernels(kernels);
  // flat aliases for convenience
  m.attr("SequenceKV") = kernels.attr("SequenceKV");
  m.attr("Segment") = kernels.attr("Segment");
  m.attr("chunk_attention") = kernels.attr("chunk_attention");
  infinipipe::python::bind_plan(m);
  infinipipe::python::bind_runtime(m);
  infinipipe::python::bind_models(m);
}
