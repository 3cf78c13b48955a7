#pragma once
// One device, its links inside a node and between nodes. Every number of a built-in description
// carries its source beside it in hardware.cc.
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "infinipipe/cost/size_curve.h"

namespace infinipipe {

struct Hardware {
  std::string name;
  double peak_flops = 0;            // FLOP/s at the training precision
  double matmul_efficiency = 0;     // achieved fraction of peak on a layer's large GEMMs
  double attention_efficiency = 0;  // achieved fraction of peak in causal attention
  // Efficiency by size, where published figures give it (empty: the flat fractions above for
  // every size). A GEMM of M rows by a layer's weight (N, K both at least 4096: every
  // projection of the LLaMA shapes from 7B up), by M, the rows one rank multiplies (a chunk's
  // tokens over d_s); the same GEMM's weight gradient, which sums over those M rows; causal
  // attention forward and backward by sequence length, at a fixed 16K tokens per launch (the
  // published benchmarks' setting). Each curve's last value is its flat fraction above.
  SizeCurve matmul_efficiency_by_rows;
  SizeCurve weight_grad_efficiency_by_rows;
  SizeCurve attention_efficiency_by_length;
  // Bytes/s of device memory, for the layer's element-wise work (norms, rotary, SwiGLU's
  // product, residual adds), which is memory-bound; 0: left out (files written before it).
  double memory_bandwidth = 0;
  double layer_overhead_s = 0;  // fixed time per layer per chunk (kernel launches, sync)
  double memory_bytes = 0;      // device memory
  double link_bandwidth = 0;    // bytes/s, one direction, between GPUs of a node
  double link_latency_s = 0;    // per point-to-point transfer (or collective) in a node
  // Between nodes, per GPU (its own NIC), one direction. JSON files without them describe one
  // node: they read as the in-node link.
  double inter_node_bandwidth = 0;
  double inter_node_latency_s = 0;
  // Between the device and host memory (PCIe), one direction: what activation offload copies
  // over (sim/offload.h). 0: unknown, nothing can be offloaded.
  double host_link_bandwidth = 0;
  // GPUs whose copies share one host link (their PCIe switch's one link to the CPU): copies of
  // neighbouring GPUs queue on it when they overlap. 1: each GPU has a link of its own.
  int gpus_per_host_link = 1;

  void validate() const;

  // "a800" (A800-80GB SXM node, NVLink between stages), "h100" (H100-80GB SXM node) and "cpu"
  // (this project's CI machine).
  static Hardware builtin(const std::string& name);
  static std::vector<std::string> builtin_names();
};

void to_json(nlohmann::json& j, const Hardware& hw);
void from_json(const nlohmann::json& j, Hardware& hw);

}  // namespace infinipipe
