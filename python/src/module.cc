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
      "differentiable. scale <= 0 means 1/sqrt(head_dim). backend: 'auto' (CPU: ATen's CPU "
      "flash kernels per slice; CUDA: ATen's varlen flash or memory-efficient kernel, else the "
      "math path with a warning), 'flash', 'efficient' (CUDA), 'varlen' (the CUDA path's layout; "
      "on the CPU through the CPU flash kernels) or 'math'.");

  m.def(
      "attention_kernel",
      [](const std::string& device, at::ScalarType dtype, int64_t head_dim,
         const std::string& backend, bool device_supports_flash) {
        at::Device d(device);
        kn::DeviceKind kind = d.is_cpu()    ? kn::DeviceKind::Cpu
                              : d.is_cuda() ? kn::DeviceKind::Cuda
                                            : kn::DeviceKind::Other;
        kn::ElementType t = dtype == at::kHalf       ? kn::ElementType::Float16
                            : dtype == at::kBFloat16 ? kn::ElementType::BFloat16
                            : dtype == at::kFloat    ? kn::ElementType::Float32
                            : dtype == at::kDouble   ? kn::ElementType::Float64
                                                     : kn::ElementType::Other;
        auto choice =
            kn::choose_kernel(kn::parse_backend(backend), kind, t, head_dim, device_supports_flash);
        return py::make_tuple(kn::to_string(choice.kernel), choice.fallback_warning);
      },
      py::arg("device"), py::arg("dtype"), py::arg("head_dim"), py::arg("backend") = "auto",
      py::arg("device_supports_flash") = true,
      "The kernel chunk_attention picks on a device ('cpu', 'cuda', ...) for inputs of dtype and "
      "head_dim, needing no such device: (kernel, warning), kernel one of 'cpu_flash', "
      "'varlen_cpu', 'cuda_flash', 'cuda_efficient', 'math'; warning non-empty when the math "
      "path is a fallback. device_supports_flash: what ATen says of the CUDA device.");

  m.def(
      "attention_kernel_for",
      [](const at::Tensor& q, const std::string& backend) {
        return kn::to_string(kn::attention_kernel(q, kn::parse_backend(backend)));
      },
      py::arg("q"), py::arg("backend") = "auto",
      "The kernel chunk_attention runs for q [T, heads, head_dim] on its own device.");

  m.def(
      "varlen_layout",
      [](const std::vector<infinipipe::Slice>& slices, const std::vector<bool>& buffered) {
        if (buffered.size() != slices.size())
          throw py::value_error("varlen_layout: one `buffered` flag per slice");
        std::vector<kn::SegmentRows> rows;
        int64_t row = 0;
        for (size_t i = 0; i < slices.size(); ++i) {
          rows.push_back({row, slices[i].start, slices[i].length(), buffered[i]});
          row += slices[i].length();
        }
        kn::VarlenLayout l = kn::varlen_layout(rows);
        py::list entries;
        for (const auto& e : l.entries) {
          py::dict d;
          d["row"] = e.row;
          d["start"] = e.start;
          d["length"] = e.length;
          d["buffered"] = e.buffered;
          d["key_offset"] = e.key_offset;
          d["key_length"] = e.key_length;
          d["own_offset"] = e.own_offset();
          entries.append(d);
        }
        const char* source = l.source == kn::VarlenLayout::Source::ChunkRows   ? "chunk_rows"
                             : l.source == kn::VarlenLayout::Source::OneBuffer ? "one_buffer"
                                                                               : "gathered";
        py::dict out;
        out["entries"] = entries;
        out["cu_seq_q"] = l.cu_seq_q;
        out["cu_seq_k"] = l.cu_seq_k;
        out["max_q"] = l.max_q;
        out["max_k"] = l.max_k;
        out["total_q"] = l.total_q;
        out["total_k"] = l.total_k;
        out["source"] = source;
        return out;
      },
      py::arg("slices"), py::arg("buffered"),
      "The chunk of these slices (rows back to back) as one varlen attention call: cumulative "
      "query/key offsets, each entry's rows of the gathered K/V, and where those come from "
      "(docs/runtime.md, 'On GPUs'). buffered[i]: slice i's keys come from its K/V buffer.");
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
