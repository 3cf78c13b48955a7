#include "infinipipe/cost/hardware.h"

#include <cmath>

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
  non_negative(layer_overhead_s, "layer_overhead_s");
  positive(memory_bytes, "memory_bytes");
  positive(link_bandwidth, "link_bandwidth");
  non_negative(link_latency_s, "link_latency_s");
  positive(inter_node_bandwidth, "inter_node_bandwidth");
  non_negative(inter_node_latency_s, "inter_node_latency_s");
}

namespace {

Hardware a800() {
  Hardware hw;
  hw.name = "a800";
  // Dense BF16 tensor-core peak of the A100/A800 SXM (NVIDIA A100 datasheet; the A800 differs
  // only in its NVLink bandwidth).
  hw.peak_flops = 312e12;
  // Narayanan et al., SC'21 ("Efficient Large-Scale Language Model Training on GPU Clusters
  // Using Megatron-LM"): 163 TFLOP/s per A100 end to end, i.e. 52% of peak.
  hw.matmul_efficiency = 0.52;
  // Dao 2023 (FlashAttention-2): 50-73% of peak in the forward pass; causal forward+backward is
  // at the low end, so take 50%.
  hw.attention_efficiency = 0.5;
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
  if (name == "cpu") return cpu();
  std::string known;
  for (const std::string& n : builtin_names()) known += (known.empty() ? "" : ", ") + n;
  throw Error("unknown hardware '" + name + "'; built-in hardware is: " + known +
              " (or give a hardware description in a JSON file)");
}

std::vector<std::string> Hardware::builtin_names() { return {"a800", "cpu"}; }

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
  f.finish();
  hw.validate();
}

}  // namespace infinipipe
