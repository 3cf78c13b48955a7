#pragma once
// A quantity that depends on a problem size: a GPU kernel's efficiency by the rows of a GEMM or
// the length of an attention, or what a chunk's GEMMs cost per token at those rows. Points come
// from published benchmarks (hardware.cc) or measurements; between two points the value is
// linear in log(size), the way such figures are plotted and the way they behave (efficiency
// grows with each doubling until the device is full); outside the points it is clamped to the
// nearest one. Exact at every point, and monotone wherever the points are.
#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

namespace infinipipe {

struct SizeCurve {
  std::vector<double> sizes;   // positive, increasing
  std::vector<double> values;  // one per size

  bool empty() const { return sizes.empty(); }
  double last() const { return values.back(); }

  double at(double size) const {
    if (size <= sizes.front()) return values.front();
    if (size >= sizes.back()) return values.back();
    const size_t hi = std::upper_bound(sizes.begin(), sizes.end(), size) - sizes.begin();
    const size_t lo = hi - 1;
    const double t = std::log(size / sizes[lo]) / std::log(sizes[hi] / sizes[lo]);
    return values[lo] + t * (values[hi] - values[lo]);
  }

  // Throws Error naming `what` unless there is at least one point, sizes are positive, finite
  // and increasing, there are as many values, and each value is finite and in (low, high].
  void validate(const std::string& what, double low, double high) const;
};

// {"sizes": [...], "values": [...]}
void to_json(nlohmann::json& j, const SizeCurve& curve);
void from_json(const nlohmann::json& j, SizeCurve& curve);

}  // namespace infinipipe
