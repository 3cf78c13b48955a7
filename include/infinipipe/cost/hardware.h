#pragma once
// One device, its links inside a node and between nodes. Every number of a built-in description
// carries its source beside it in hardware.cc.
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

namespace infinipipe {

struct Hardware {
  std::string name;
  double peak_flops = 0;            // FLOP/s at the training precision
  double matmul_efficiency = 0;     // achieved fraction of peak on a layer's large GEMMs
  double attention_efficiency = 0;  // achieved fraction of peak in causal attention
  double layer_overhead_s = 0;      // fixed time per layer per chunk (kernel launches, sync)
  double memory_bytes = 0;          // device memory
  double link_bandwidth = 0;        // bytes/s, one direction, between GPUs of a node
  double link_latency_s = 0;        // per point-to-point transfer (or collective) in a node
  // Between nodes, per GPU (its own NIC), one direction. JSON files without them describe one
  // node: they read as the in-node link.
  double inter_node_bandwidth = 0;
  double inter_node_latency_s = 0;

  void validate() const;

  // "a800" (A800-80GB SXM node, NVLink between stages) and "cpu" (this project's CI machine).
  static Hardware builtin(const std::string& name);
  static std::vector<std::string> builtin_names();
};

void to_json(nlohmann::json& j, const Hardware& hw);
void from_json(const nlohmann::json& j, Hardware& hw);

}  // namespace infinipipe
