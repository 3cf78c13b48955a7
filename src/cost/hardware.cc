#include "infinipipe/cost/hardware.h"

#include <cmath>
#include <iterator>

#include <nlohmann/json.hpp>

#include "infinipipe/core/error.h"
#include "json_fields.h"

namespace infinipipe {

void Hardware::validate() const {
  const std::string where = "hardware '" + name + "': ";
  auto positive = [&](double value, const char* field) {
    check(std::isfinite(value) && value > 0,
          where + field + " must be a positive number, got " + std::to_string(value));
  };
  auto non_negative = [&](double value, const char* field) {
    check(std::isfinite(value) && value >= 0,
          where + field + " must be zero or positive, got " + std::to_string(value));
  };
  auto fraction = [&](double value, const char* field) {
    check(std::isfinite(value) && value > 0 && value <= 1,
          where + field + " is a fraction of peak_flops and must be in (0, 1], got " +
              std::to_string(value));
  };
  positive(peak_flops, "peak_flops");
  fraction(matmul_efficiency, "matmul_efficiency");
  fraction(attention_efficiency, "attention_efficiency");
  // A curve and its flat fraction are one setting: the flat one is the curve's largest size.
  auto curve = [&](const SizeCurve& c, const char* field, double flat, const char* flat_field) {
    if (c.empty()) return;
    c.validate(where + field, 0, 1);
    check(flat == c.last(), where + flat_field + " (" + std::to_string(flat) +
                                ") must equal the last value of " + field + " (" +
                                std::to_string(c.last()) +
                                "): the flat fraction is the curve's largest size");
  };
  curve(matmul_efficiency_by_rows, "matmul_efficiency_by_rows", matmul_efficiency,
        "matmul_efficiency");
  curve(attention_efficiency_by_length, "attention_efficiency_by_length", attention_efficiency,
        "attention_efficiency");
  if (!weight_grad_efficiency_by_rows.empty()) {
    weight_grad_efficiency_by_rows.validate(where + "weight_grad_efficiency_by_rows", 0, 1);
    check(weight_grad_efficiency_by_rows.sizes == matmul_efficiency_by_rows.sizes,
          where + "weight_grad_efficiency_by_rows needs the rows of matmul_efficiency_by_rows");
  }
  non_negative(memory_bandwidth, "memory_bandwidth");
  non_negative(layer_overhead_s, "layer_overhead_s");
  positive(memory_bytes, "memory_bytes");
  positive(link_bandwidth, "link_bandwidth");
  non_negative(link_latency_s, "link_latency_s");
  positive(inter_node_bandwidth, "inter_node_bandwidth");
  non_negative(inter_node_latency_s, "inter_node_latency_s");
  non_negative(host_link_bandwidth, "host_link_bandwidth");
  check(gpus_per_host_link >= 1,
        where + "gpus_per_host_link must be at least 1 (GPUs sharing one host link), got " +
            std::to_string(gpus_per_host_link));
}

namespace {

// H100 (sm_90) bf16 GEMM throughput in TFLOP/s, from XLA's built-in matmul performance table
// (tensorflow/tensorflow, third_party/xla/xla/service/gpu/model/matmul_interpolator_data.h at
// 372d578b, entries with b = 1, key "bf16xbf16->bf16", value / 1e12; the file names the
// architecture, not the SKU). Its largest weight is 4096 x 4096, so these rows are the widest
// GEMMs it knows; the LLaMA layers from 7B up are all at least that wide (clamped, below).
constexpr double kGemmRows[] = {256, 512, 1024, 2048, 4096};
// m = M rows, n = k = 4096: a projection's forward, and its input gradient (the same shape).
constexpr double kH100GemmTflops[] = {412.03, 644.12, 738.47, 753.64, 783.33};
// m = n = 4096, k = M: its weight gradient, which sums over the M rows.
constexpr double kH100WeightGradTflops[] = {392.16, 543.12, 677.44, 738.74, 783.33};
// FlashAttention-2 forward + backward, causal, head dim 128, fp16, TFLOP/s at sequence lengths
// 512 .. 16K with batch x length = 16K tokens and 16 heads, read off the bar labels of the
// flash-attention repository's assets/flash2_a100_fwd_bwd_benchmark.png and
// assets/flash2_h100_fwd_bwd_benchmark.png, panel (d) (Dao-AILab/flash-attention at 0251105a).
// Its FLOP count (benchmarks/benchmark_flash_attention.py) is 4 * length^2 * heads * head_dim /
// 2 forward and 2.5 times that backward: CostCoefficients' a1 counts the same pairs.
constexpr double kAttentionLengths[] = {512, 1024, 2048, 4096, 8192, 16384};
constexpr double kA100AttentionTflops[] = {99, 133, 155, 173, 182, 189};
constexpr double kH100AttentionTflops[] = {163, 221, 265, 294, 308, 328};

template <size_t N>
SizeCurve efficiency(const double (&sizes)[N], const double (&tflops)[N], double scale) {
  SizeCurve c;
  for (size_t i = 0; i < N; ++i) {
    c.sizes.push_back(sizes[i]);
    c.values.push_back(tflops[i] * scale);
  }
  return c;
}

// The size curves of a GPU of `hw.peak_flops` whose largest GEMMs reach `best_gemm_flops` along
// the shape of the H100 table above, and whose flash attention runs at `attention_tflops`; the
// flat fractions are the curves' largest sizes.
void set_size_curves(Hardware& hw, double best_gemm_flops,
                     const double (&attention_tflops)[std::size(kAttentionLengths)]) {
  const double gemm_scale = 1e12 / (kH100GemmTflops[4] * 1e12) * best_gemm_flops / hw.peak_flops;
  hw.matmul_efficiency_by_rows = efficiency(kGemmRows, kH100GemmTflops, gemm_scale);
  hw.weight_grad_efficiency_by_rows = efficiency(kGemmRows, kH100WeightGradTflops, gemm_scale);
  hw.matmul_efficiency = hw.matmul_efficiency_by_rows.last();
  hw.attention_efficiency_by_length =
      efficiency(kAttentionLengths, attention_tflops, 1e12 / hw.peak_flops);
  hw.attention_efficiency = hw.attention_efficiency_by_length.last();
}

Hardware a800() {
  Hardware hw;
  hw.name = "a800";
  // Dense BF16 tensor-core peak of the A100/A800 SXM (NVIDIA A100 datasheet; the A800 differs
  // only in its NVLink bandwidth).
  hw.peak_flops = 312e12;
  // No per-size GEMM table of the A100 exists as text (NVIDIA publishes it only as a chart of
  // square GEMMs, whose small sizes shrink N and K too). So the H100 table's shape is carried
  // over: each point is the H100's throughput over its own largest-shape figure (783.33 at
  // M = 4096), times the A100's best measured GEMM, 271.2 TFLOP/s (bf16, the maximum achievable
  // matmul FLOPS found by search over shapes: stas00/ml-engineering, compute/accelerator/
  // README.md). An assumption, written down: the A100 has fewer SMs (108 against 132) and a lower
  // ratio of FLOP/s to memory bandwidth, so it likely fills at fewer rows than the H100, and this
  // curve somewhat overstates its small-chunk penalty.
  // The attention: the A100 80GB SXM4 bars of FlashAttention-2 (above); the A800 has the same
  // SMs and clocks.
  set_size_curves(hw, 271.2e12, kA100AttentionTflops);
  // HBM2e of the A100/A800 80GB SXM: 2,039 GB/s (NVIDIA A100 datasheet).
  hw.memory_bandwidth = 2039e9;
  // Kernel launches of one LLaMA layer's forward, eager Megatron-style with flash attention:
  // 2 RMSNorms + 7 GEMMs (q, k, v, o, gate, up, down) + 2 rotary (q, k) + 1 attention +
  // 2 activation (SiLU, product) + 2 residual adds = 16 kernels, times ~3 us per launch (launch
  // overhead of null kernels on recent GPUs and drivers, NVIDIA developer forum thread "Too much
  // time for kernel launch latency", forums.developer.nvidia.com/t/233645). An upper estimate:
  // launches overlap with long kernels, so this only shows on small chunks.
  hw.layer_overhead_s = 16 * 3e-6;
  hw.memory_bytes = 80.0 * (1ull << 30);  // A800 80GB SXM
  // NVLink on the A800 is 400 GB/s total (A800 datasheet, vs 600 GB/s on the A100), i.e.
  // 200 GB/s per direction.
  hw.link_bandwidth = 200e9;
  // Estimate, not a measurement: NCCL's LL/LL128 protocols add ~1-2 us per hop (Hu et al. 2025,
  // "Demystifying NCCL", arXiv 2507.04786) on top of launching the send and receive kernels
  // (~3 us each, the forum figure above); rounded up to 10 us for the Simple protocol used by
  // large activations.
  hw.link_latency_s = 1e-5;
  // Between nodes: one HDR InfiniBand NIC per GPU, 200 Gb/s per port (NVIDIA ConnectX-6 VPI
  // datasheet; the DGX A100 and its A800 variant carry 8 single-port HDR NICs for compute, one
  // per GPU, NVIDIA DGX A100 datasheet), i.e. 25 GB/s per direction.
  hw.inter_node_bandwidth = 200e9 / 8;
  // Estimate, not a measurement: an inter-node NCCL transfer goes through the network proxy
  // thread and the NIC, a few microseconds more than NVLink's per-hop ~1-2 us (Hu et al. 2025,
  // "Demystifying NCCL", arXiv 2507.04786, compare its intra- and inter-node latencies); taken
  // as twice the in-node estimate above.
  hw.inter_node_latency_s = 2e-5;
  // PCIe Gen4 x16 to the host (NVIDIA A100 datasheet: 64 GB/s both ways together; the A800 has
  // the same interface). Measured: pinned copies of 0.2 to 1 GB on an A100-PCIE-40GB with CUDA's
  // bandwidthTest reach 25.4 to 26.3 GB/s each way (Princeton Research Computing,
  // github.com/jdh4/della-gpu-A100, README), against the datasheet's 32.
  hw.host_link_bandwidth = 26e9;
  // An 8-GPU A100/A800 server has four PCIe Gen4 switches between its CPUs and its eight GPUs
  // ("Inside the High-Performance GPU Server: A Deep Dive into A100/A800 & H100 Topologies",
  // besthub.dev): two GPUs behind each switch's one link to the CPU.
  hw.gpus_per_host_link = 2;
  return hw;
}

Hardware h100() {
  Hardware hw;
  hw.name = "h100";
  // Dense BF16 tensor-core peak of the H100 SXM5: 989 TFLOP/s (NVIDIA H100 datasheet, 1,979
  // with sparsity).
  hw.peak_flops = 989e12;
  set_size_curves(hw, kH100GemmTflops[4] * 1e12, kH100AttentionTflops);
  // HBM3 of the H100 SXM5: 3.35 TB/s (NVIDIA H100 datasheet).
  hw.memory_bandwidth = 3.35e12;
  // The same kernels per layer as on the A800 (a800(), above), at the same launch cost.
  hw.layer_overhead_s = 16 * 3e-6;
  hw.memory_bytes = 80.0 * (1ull << 30);  // H100 80GB SXM5
  // Fourth-generation NVLink: 900 GB/s total per GPU (NVIDIA H100 datasheet), 450 per direction.
  hw.link_bandwidth = 450e9;
  hw.link_latency_s = 1e-5;  // the A800's estimate (a800(), above)
  // Between nodes: one 400 Gb/s ConnectX-7 port per GPU (NVIDIA DGX H100 datasheet: 8 single-port
  // OSFP ConnectX-7 for compute), i.e. 50 GB/s per direction.
  hw.inter_node_bandwidth = 400e9 / 8;
  hw.inter_node_latency_s = 2e-5;  // the A800's estimate (a800(), above)
  // PCIe Gen5 x16 to the host: 128 GB/s, both directions together (NVIDIA H100 datasheet), i.e.
  // 64 GB/s each way. A peak: no measurement of pinned copies on it is at hand. How many GPUs
  // share a switch's link in an H100 server is not either, so each has its own (the default).
  hw.host_link_bandwidth = 64e9;
  return hw;
}

Hardware cpu() {
  Hardware hw;
  hw.name = "cpu";
  // Measured by benchmarks/tools/measure_cpu.py on 2026-11-22 on this project's CI machine (2-core
  // Intel Xeon, 24 GiB, no GPU) at load average ~0.6, torch 2.13 CPU, fp32, one thread per
  // process (one pipeline stage per core), tiny-model shapes, fastest of 15 timings. Under the
  // other helpers' parallel builds the same script gives about half these rates.
  // peak_flops is the best GEMM rate on the tiny layer's seven matmuls (163 GFLOP/s at 256
  // tokens, 150-162 from 64 to 16384 tokens); it is what those GEMMs achieve, so
  // matmul_efficiency is 1 by construction.
  hw.peak_flops = 1.632e11;
  hw.matmul_efficiency = 1.0;
  // scaled_dot_product_attention(is_causal) at 4096 tokens: 90.9 GFLOP/s over the peak above
  // (44 GFLOP/s at 256 tokens: short sequences run slower, which one a1 cannot capture).
  hw.attention_efficiency = 0.557;
  // An 8-token forward of one eager tiny layer (323 us) minus its FLOP time: Python and
  // dispatch overhead of ~20 torch ops.
  hw.layer_overhead_s = 3.05e-4;
  hw.memory_bytes = 24684092.0 * 1024;  // MemTotal of /proc/meminfo
  // Gloo send/recv between two local processes over tcp://127.0.0.1: bandwidth from the slope
  // between 4 and 16 MiB messages, latency from 4 and 64 KiB messages.
  hw.link_bandwidth = 3.699e9;
  hw.link_latency_s = 4.84e-5;
  // One machine: "between nodes" is the same loopback link.
  hw.inter_node_bandwidth = hw.link_bandwidth;
  hw.inter_node_latency_s = hw.link_latency_s;
  return hw;
}

}  // namespace

Hardware Hardware::builtin(const std::string& name) {
  if (name == "a800") return a800();
  if (name == "h100") return h100();
  if (name == "cpu") return cpu();
  std::string known;
  for (const std::string& n : builtin_names()) known += (known.empty() ? "" : ", ") + n;
  throw Error("unknown hardware '" + name + "'; built-in hardware is: " + known +
              " (or give a hardware description in a JSON file)");
}

std::vector<std::string> Hardware::builtin_names() { return {"a800", "h100", "cpu"}; }

void to_json(nlohmann::json& j, const Hardware& hw) {
  j = nlohmann::json{{"name", hw.name},
                     {"peak_flops", hw.peak_flops},
                     {"matmul_efficiency", hw.matmul_efficiency},
                     {"attention_efficiency", hw.attention_efficiency},
                     {"layer_overhead_s", hw.layer_overhead_s},
                     {"memory_bytes", hw.memory_bytes},
                     {"link_bandwidth", hw.link_bandwidth},
                     {"link_latency_s", hw.link_latency_s},
                     {"inter_node_bandwidth", hw.inter_node_bandwidth},
                     {"inter_node_latency_s", hw.inter_node_latency_s}};
  // Written only when set, so a description without them writes the file it always wrote.
  if (!hw.matmul_efficiency_by_rows.empty())
    j["matmul_efficiency_by_rows"] = hw.matmul_efficiency_by_rows;
  if (!hw.weight_grad_efficiency_by_rows.empty())
    j["weight_grad_efficiency_by_rows"] = hw.weight_grad_efficiency_by_rows;
  if (!hw.attention_efficiency_by_length.empty())
    j["attention_efficiency_by_length"] = hw.attention_efficiency_by_length;
  if (hw.memory_bandwidth > 0) j["memory_bandwidth"] = hw.memory_bandwidth;
  if (hw.host_link_bandwidth > 0) j["host_link_bandwidth"] = hw.host_link_bandwidth;
  if (hw.gpus_per_host_link > 1) j["gpus_per_host_link"] = hw.gpus_per_host_link;
}

void from_json(const nlohmann::json& j, Hardware& hw) {
  detail::JsonFields f(j, "hardware");
  f.get("name", hw.name);
  f.get("peak_flops", hw.peak_flops);
  f.get("matmul_efficiency", hw.matmul_efficiency);
  f.get("attention_efficiency", hw.attention_efficiency);
  f.get("layer_overhead_s", hw.layer_overhead_s);
  f.get("memory_bytes", hw.memory_bytes);
  f.get("link_bandwidth", hw.link_bandwidth);
  f.get("link_latency_s", hw.link_latency_s);
  // Absent in files written before there were two links: one node, one link.
  hw.inter_node_bandwidth = hw.link_bandwidth;
  hw.inter_node_latency_s = hw.link_latency_s;
  f.get_optional("inter_node_bandwidth", hw.inter_node_bandwidth);
  f.get_optional("inter_node_latency_s", hw.inter_node_latency_s);
  f.get_optional("matmul_efficiency_by_rows", hw.matmul_efficiency_by_rows);  // absent: flat
  f.get_optional("weight_grad_efficiency_by_rows", hw.weight_grad_efficiency_by_rows);
  f.get_optional("attention_efficiency_by_length", hw.attention_efficiency_by_length);
  f.get_optional("memory_bandwidth", hw.memory_bandwidth);  // absent: element-wise work left out
  f.get_optional("host_link_bandwidth", hw.host_link_bandwidth);  // absent: no offload
  f.get_optional("gpus_per_host_link", hw.gpus_per_host_link);    // absent: a link per GPU
  f.finish();
  hw.validate();
}

}  // namespace infinipipe
