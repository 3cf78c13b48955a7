#include "infinipipe/cost/parallel_layout.h"

#include <nlohmann/json.hpp>

#include "infinipipe/core/error.h"
#include "json_fields.h"

namespace infinipipe {

void ParallelLayout::validate() const {
  auto at_least_one = [](int value, const char* field, const char* what) {
    check(value >= 1, std::string("parallel layout: ") + field + " (" + what +
                          ") must be at least 1, got " + std::to_string(value));
  };
  at_least_one(sequence, "sequence", "d_s, sequence-parallel ranks per stage");
  at_least_one(data, "data", "d_r, data-parallel replicas");
  at_least_one(gpus_per_node, "gpus_per_node", "GPUs per node");
  check(zero >= 0 && zero <= 3,
        "parallel layout: zero is the ZeRO level, 0 (none), 1 (optimizer state), 2 (and "
        "gradients) or 3 (and parameters), got " +
            std::to_string(zero));
}

void ParallelLayout::check_fits(const ModelShape& shape) const {
  validate();
  if (sequence == 1) return;
  const std::string ds = std::to_string(sequence);
  check(shape.heads % sequence == 0, "parallel layout: sequence parallelism over d_s = " + ds +
                                         " ranks needs d_s to divide "
                                         "the attention heads, but model '" +
                                         shape.name + "' has " + std::to_string(shape.heads) +
                                         " heads; choose a d_s that divides " +
                                         std::to_string(shape.heads));
  check(
      shape.kv_heads % sequence == 0,
      "parallel layout: sequence parallelism over d_s = " + ds +
          " ranks needs d_s to divide "
          "the KV heads (every SP rank keeps the K/V of whole heads; they are not replicated), but "
          "model '" +
          shape.name + "' has " + std::to_string(shape.kv_heads) +
          " KV heads; choose a d_s that divides " + std::to_string(shape.kv_heads));
}

namespace {
// First global rank of `stage`'s SP group in `replica` (SP innermost; see the header).
long long group_start(const ParallelLayout& l, int replica, int stage, int stages) {
  return (static_cast<long long>(replica) * stages + stage) * l.sequence;
}
}  // namespace

ParallelLayout::Place ParallelLayout::place(int rank, int stages) const {
  check(stages >= 1 && rank >= 0 && rank < world(stages),
        "parallel layout: rank " + std::to_string(rank) + " is outside the world of " +
            std::to_string(data) + " x " + std::to_string(stages) + " x " +
            std::to_string(sequence) + " ranks (data x pipeline x sequence)");
  Place p;
  p.sequence_rank = rank % sequence;
  p.stage = (rank / sequence) % stages;
  p.replica = rank / (sequence * stages);
  return p;
}

int ParallelLayout::rank_of(const Place& place, int stages) const {
  return static_cast<int>(group_start(*this, place.replica, place.stage, stages)) +
         place.sequence_rank;
}

std::vector<int> ParallelLayout::pipeline_ranks(int rank, int stages) const {
  Place p = place(rank, stages);
  std::vector<int> ranks;
  for (p.stage = 0; p.stage < stages; ++p.stage) ranks.push_back(rank_of(p, stages));
  return ranks;
}

std::vector<int> ParallelLayout::sequence_ranks(int rank, int stages) const {
  Place p = place(rank, stages);
  std::vector<int> ranks;
  for (p.sequence_rank = 0; p.sequence_rank < sequence; ++p.sequence_rank)
    ranks.push_back(rank_of(p, stages));
  return ranks;
}

std::vector<int> ParallelLayout::gradient_ranks(int stage, int stages) const {
  std::vector<int> ranks;
  for (int r = 0; r < data; ++r)
    for (int j = 0; j < sequence; ++j) ranks.push_back(rank_of(Place{r, stage, j}, stages));
  return ranks;
}

bool ParallelLayout::sequence_group_crosses_nodes(int stage, int stages) const {
  if (sequence == 1) return false;
  const long long g = gpus_per_node;
  for (int r = 0; r < data; ++r) {
    const long long start = group_start(*this, r, stage, stages);
    if (start / g != (start + sequence - 1) / g) return true;
  }
  return false;
}

bool ParallelLayout::gradient_group_crosses_nodes(int stage, int stages) const {
  if (data == 1) return sequence_group_crosses_nodes(stage, stages);
  const long long g = gpus_per_node;
  const long long first = group_start(*this, 0, stage, stages);
  for (int r = 0; r < data; ++r) {
    const long long start = group_start(*this, r, stage, stages);
    if (start / g != first / g || (start + sequence - 1) / g != first / g) return true;
  }
  return false;
}

bool ParallelLayout::boundary_crosses_nodes(int stage, int stages) const {
  const long long g = gpus_per_node;
  // SP rank s of the next stage is d_s ranks further on; with d_s >= g every send leaves the
  // node, otherwise look at each (replica, SP rank): at most d_r * d_s cheap checks, once per
  // cost model.
  if (sequence >= g) return true;
  for (int r = 0; r < data; ++r) {
    const long long start = group_start(*this, r, stage, stages);
    for (int s = 0; s < sequence; ++s)
      if ((start + s) / g != (start + s + sequence) / g) return true;
  }
  return false;
}

std::string ParallelLayout::describe(int stages) const {
  return "d_s=" + std::to_string(sequence) + " x d_p=" + std::to_string(stages) +
         " x d_r=" + std::to_string(data) + ", ZeRO-" + std::to_string(zero) + ", " +
         std::to_string(gpus_per_node) + " GPUs per node";
}

double model_state_bytes_per_rank(double params, double bytes_per_param, int bytes_per_element,
                                  const ParallelLayout& layout) {
  const int n = layout.gradient_group();
  // Without sharding, exactly the count a layout-free cost model makes.
  if (layout.zero == 0 || n == 1) return params * bytes_per_param;
  const double w = bytes_per_element, g = bytes_per_element;
  const double k = bytes_per_param - w - g;
  check(k >= 0, "model state: " + std::to_string(bytes_per_param) +
                    " bytes per parameter is less than weights plus gradients (2 x " +
                    std::to_string(bytes_per_element) + " bytes), so ZeRO-" +
                    std::to_string(layout.zero) +
                    " has no optimizer state to shard; fix model_state_bytes_per_param or use "
                    "zero = 0");
  switch (layout.zero) {
    case 1:
      return params * (w + g) + params * k / n;
    case 2:
      return params * w + params * (g + k) / n;
    default:
      return params * (w + g + k) / n;
  }
}

void to_json(nlohmann::json& j, const ParallelLayout& l) {
  j = nlohmann::json{{"sequence", l.sequence},
                     {"data", l.data},
                     {"zero", l.zero},
                     {"gpus_per_node", l.gpus_per_node}};
}

void from_json(const nlohmann::json& j, ParallelLayout& l) {
  detail::JsonFields f(j, "parallel layout");
  ParallelLayout read;
  f.get("sequence", read.sequence);
  f.get("data", read.data);
  f.get("zero", read.zero);
  f.get("gpus_per_node", read.gpus_per_node);
  f.finish();
  read.validate();
  l = read;
}

}  // namespace infinipipe
