// Chunk attention's bookkeeping, free of LibTorch: which kernel runs a chunk, and the chunk laid
// out as one variable-length (varlen) attention call (docs/runtime.md, "On GPUs").
//
// On CUDA a chunk's attention is one call of ATen's varlen flash or memory-efficient kernel.
// Batch entry i of that call is slice i of the chunk: its queries are the slice's rows of q
// (cumulative offsets cu_seq_q), its keys/values are those of its whole sequence up to the
// slice's end: for a slice of a split sequence, rows [0, end) of its K/V buffer (the context
// [0, start) written by earlier slices, then the slice's own rows), for a whole sequence its own
// rows of k/v. The gathered K/V are these back to back (cumulative offsets cu_seq_k). The
// kernels align the causal mask to the bottom right of each entry (query i of an entry with s
// queries and n keys sees keys [0, n - s + i]), which is exactly "a slice attends to its context
// and causally to itself". Backward returns the gathered dK/dV in the same layout; each entry's
// rows split into the context part (added to the buffer's accumulators) and the slice's own
// part (the gradient of the chunk's k/v rows).
//
// The same layout runs on the CPU under the "varlen" backend, each entry through ATen's CPU
// flash kernels, so the CPU tests cover everything of the CUDA path but the fused kernel itself.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace infinipipe::kernels {

enum class Backend {
  Auto,       // CPU: Flash. CUDA: the varlen kernels (flash, else efficient, else math, warned)
  Flash,      // CPU: ATen's CPU flash kernels per slice. CUDA: ATen's varlen flash kernel
  Efficient,  // CUDA only: ATen's varlen memory-efficient kernel
  Varlen,     // the varlen layout; on CUDA the kernel Auto picks, on CPU per entry CPU flash
  Math,       // explicit matmul/softmax per slice on any device (materialises probabilities)
};

// "auto", "flash", "efficient", "varlen" or "math"; Error naming the valid names otherwise.
Backend parse_backend(const std::string& name);
const char* to_string(Backend backend);

// The kernel that runs a chunk.
enum class Kernel {
  CpuFlash,       // per slice, ATen's CPU flash kernels (a context block and a causal block)
  Math,           // per slice, explicit matmul/softmax (fp32 softmax for 16-bit inputs)
  VarlenCpu,      // the varlen layout, each entry through ATen's CPU flash kernels
  CudaFlash,      // the varlen layout, at::_flash_attention_forward/_backward
  CudaEfficient,  // the varlen layout, at::_efficient_attention_forward/_backward
};
const char* to_string(Kernel kernel);

// The element types the choice depends on.
enum class ElementType { Float16, BFloat16, Float32, Float64, Other };

enum class DeviceKind { Cpu, Cuda, Other };

struct KernelChoice {
  Kernel kernel = Kernel::Math;
  // Non-empty when Auto fell back to the math path on a GPU: the reason, to be logged once.
  std::string fallback_warning;
};

// The kernel for a chunk on `device` of `dtype` with `head_dim`. device_supports_flash: whether
// the CUDA device runs ATen's flash kernel (compute capability, torch.backends.cuda's switches);
// only asked of CUDA. Rules on CUDA: flash for float16/bfloat16 with head_dim <= 256 and a
// multiple of 8; else the memory-efficient kernel for float16/bfloat16/float32; else (float64,
// ...) the math path, with a warning under Auto/Varlen. An explicit Flash or Efficient that
// cannot run, or Efficient on the CPU, is an Error saying why.
KernelChoice choose_kernel(Backend backend, DeviceKind device, ElementType dtype, int64_t head_dim,
                           bool device_supports_flash = true);

// One slice of the chunk as the layout sees it.
struct SegmentRows {
  int64_t row = 0;        // its first row in the chunk
  int64_t start = 0;      // its first token's position in its sequence (its context length)
  int64_t length = 0;     // its tokens
  bool buffered = false;  // a slice of a split sequence: its keys come from its K/V buffer

  int64_t end() const { return start + length; }
};

// The chunk as one varlen call; entry i is segment i.
struct VarlenLayout {
  struct Entry {
    int64_t row = 0, start = 0, length = 0;
    bool buffered = false;
    int64_t key_offset = 0;  // its first row in the gathered K/V
    int64_t key_length = 0;  // start + length if buffered, else length (then start is 0)
    // Rows of the gathered K/V holding its own tokens: [own_offset(), own_offset() + length);
    // its context (buffered only) is [key_offset, key_offset + start) = buffer rows [0, start).
    int64_t own_offset() const { return key_offset + key_length - length; }
  };
  // Where the gathered K/V come from without copying anything:
  // ChunkRows: no entry is buffered, so the gathered K/V are the chunk's k/v rows themselves.
  // OneBuffer: one entry, buffered: the gathered K/V are its buffer's rows [0, end).
  // Gathered: anything else; entry by entry, buffer rows [0, end) or the chunk's own rows.
  enum class Source { ChunkRows, OneBuffer, Gathered };

  std::vector<Entry> entries;
  std::vector<int32_t> cu_seq_q, cu_seq_k;  // entries + 1 offsets, from 0 to total_q / total_k
  int64_t max_q = 0, max_k = 0, total_q = 0, total_k = 0;
  Source source = Source::ChunkRows;
};

// Error if the segments do not tile rows [0, total) in order, a segment is empty, an unbuffered
// one does not start at 0, or an offset does not fit the kernels' int32.
VarlenLayout varlen_layout(const std::vector<SegmentRows>& segments);

}  // namespace infinipipe::kernels
