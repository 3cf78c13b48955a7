// No LibTorch here: include/infinipipe/kernels/attention_layout.h.
#include "infinipipe/kernels/attention_layout.h"

#include <algorithm>
#include <limits>

#include "infinipipe/core/error.h"

namespace infinipipe::kernels {

Backend parse_backend(const std::string& name) {
  if (name == "auto") return Backend::Auto;
  if (name == "flash") return Backend::Flash;
  if (name == "efficient") return Backend::Efficient;
  if (name == "varlen") return Backend::Varlen;
  if (name == "math") return Backend::Math;
  throw Error("attention backend must be 'auto', 'flash', 'efficient', 'varlen' or 'math', got '" +
              name + "'");
}

const char* to_string(Backend backend) {
  switch (backend) {
    case Backend::Auto:
      return "auto";
    case Backend::Flash:
      return "flash";
    case Backend::Efficient:
      return "efficient";
    case Backend::Varlen:
      return "varlen";
    case Backend::Math:
      return "math";
  }
  return "?";
}

const char* to_string(Kernel kernel) {
  switch (kernel) {
    case Kernel::CpuFlash:
      return "cpu_flash";
    case Kernel::Math:
      return "math";
    case Kernel::VarlenCpu:
      return "varlen_cpu";
    case Kernel::CudaFlash:
      return "cuda_flash";
    case Kernel::CudaEfficient:
      return "cuda_efficient";
  }
  return "?";
}

namespace {

const char* name_of(ElementType t) {
  switch (t) {
    case ElementType::Float16:
      return "float16";
    case ElementType::BFloat16:
      return "bfloat16";
    case ElementType::Float32:
      return "float32";
    case ElementType::Float64:
      return "float64";
    case ElementType::Other:
      return "this dtype";
  }
  return "?";
}

// Why ATen's varlen flash kernel cannot run these inputs; empty if it can.
std::string flash_refusal(ElementType dtype, int64_t head_dim, bool device_supports_flash) {
  if (dtype != ElementType::Float16 && dtype != ElementType::BFloat16)
    return std::string("the flash kernel takes float16 or bfloat16, not ") + name_of(dtype);
  if (head_dim > 256 || head_dim % 8 != 0)
    return "the flash kernel takes head_dim <= 256 and a multiple of 8, not " +
           std::to_string(head_dim);
  if (!device_supports_flash)
    return "ATen does not run its flash kernel on this device (compute capability below 8.0, or "
           "torch.backends.cuda.enable_flash_sdp(False))";
  return "";
}

std::string efficient_refusal(ElementType dtype) {
  if (dtype != ElementType::Float16 && dtype != ElementType::BFloat16 &&
      dtype != ElementType::Float32)
    return std::string("the memory-efficient kernel takes float16, bfloat16 or float32, not ") +
           name_of(dtype);
  return "";
}

}  // namespace

KernelChoice choose_kernel(Backend backend, DeviceKind device, ElementType dtype, int64_t head_dim,
                           bool device_supports_flash) {
  if (backend == Backend::Math) return {Kernel::Math, ""};
  if (device == DeviceKind::Cpu) {
    if (backend == Backend::Efficient)
      throw Error(
          "attention backend 'efficient' runs on CUDA only; on the CPU use 'flash', "
          "'varlen' or 'math'");
    return {backend == Backend::Varlen ? Kernel::VarlenCpu : Kernel::CpuFlash, ""};
  }
  if (device == DeviceKind::Other) {
    if (backend != Backend::Auto)
      throw Error(std::string("attention backend '") + to_string(backend) +
                  "' runs on the CPU or CUDA only; use 'math' on this device");
    return {Kernel::Math,
            "chunk attention falls back to the math path on this device (no fused kernel): it "
            "materialises each slice's score matrix, slices x context"};
  }
  const std::string no_flash = flash_refusal(dtype, head_dim, device_supports_flash);
  const std::string no_efficient = efficient_refusal(dtype);
  switch (backend) {
    case Backend::Flash:
      check(no_flash.empty(), "attention backend 'flash' on CUDA: " + no_flash);
      return {Kernel::CudaFlash, ""};
    case Backend::Efficient:
      check(no_efficient.empty(), "attention backend 'efficient': " + no_efficient);
      return {Kernel::CudaEfficient, ""};
    default:  // Auto, Varlen
      if (no_flash.empty()) return {Kernel::CudaFlash, ""};
      if (no_efficient.empty()) return {Kernel::CudaEfficient, ""};
      return {Kernel::Math,
              "chunk attention on CUDA falls back to the math path (" + no_efficient +
                  "): it materialises each slice's score matrix, slices x context, which long "
                  "contexts cannot afford; train in bfloat16, float16 or float32"};
  }
}

VarlenLayout varlen_layout(const std::vector<SegmentRows>& segments) {
  VarlenLayout out;
  out.cu_seq_q.push_back(0);
  out.cu_seq_k.push_back(0);
  int64_t row = 0, key = 0;
  int buffered = 0;
  for (size_t i = 0; i < segments.size(); ++i) {
    const SegmentRows& s = segments[i];
    const std::string where = "varlen layout: segment " + std::to_string(i);
    check(s.length > 0 && s.start >= 0, where + " is empty or starts before its sequence");
    check(s.row == row, where + " starts at row " + std::to_string(s.row) + ", expected " +
                            std::to_string(row) + ": segments tile the rows in order");
    check(s.buffered || s.start == 0,
          where + " starts at " + std::to_string(s.start) + " without a K/V buffer");
    VarlenLayout::Entry e;
    e.row = s.row;
    e.start = s.start;
    e.length = s.length;
    e.buffered = s.buffered;
    e.key_offset = key;
    e.key_length = s.buffered ? s.end() : s.length;
    buffered += s.buffered ? 1 : 0;
    row += s.length;
    key += e.key_length;
    check(key <= std::numeric_limits<int32_t>::max(),
          where + ": the gathered keys pass 2^31 rows, beyond the kernels' int32 offsets");
    out.cu_seq_q.push_back(static_cast<int32_t>(row));
    out.cu_seq_k.push_back(static_cast<int32_t>(key));
    out.max_q = std::max(out.max_q, e.length);
    out.max_k = std::max(out.max_k, e.key_length);
    out.entries.push_back(e);
  }
  out.total_q = row;
  out.total_k = key;
  if (buffered == 0)
    out.source = VarlenLayout::Source::ChunkRows;
  else if (segments.size() == 1)
    out.source = VarlenLayout::Source::OneBuffer;
  else
    out.source = VarlenLayout::Source::Gathered;
  return out;
}

}  // namespace infinipipe::kernels
