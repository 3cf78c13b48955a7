#include "infinipipe/cost/size_curve.h"

#include <nlohmann/json.hpp>

#include "infinipipe/core/error.h"
#include "json_fields.h"

namespace infinipipe {

void SizeCurve::validate(const std::string& what, double low, double high) const {
  check(!sizes.empty(), what + ": a curve needs at least one point");
  check(sizes.size() == values.size(), what + ": " + std::to_string(sizes.size()) + " sizes but " +
                                           std::to_string(values.size()) +
                                           " values; give one value per size");
  for (size_t i = 0; i < sizes.size(); ++i) {
    check(std::isfinite(sizes[i]) && sizes[i] > 0 && (i == 0 || sizes[i] > sizes[i - 1]),
          what + ": sizes must be positive and increasing, got " + std::to_string(sizes[i]) +
              " at position " + std::to_string(i));
    check(std::isfinite(values[i]) && values[i] > low && values[i] <= high,
          what + ": value " + std::to_string(values[i]) + " at position " + std::to_string(i) +
              " is outside (" + std::to_string(low) + ", " + std::to_string(high) + "]");
  }
}

void to_json(nlohmann::json& j, const SizeCurve& curve) {
  j = nlohmann::json{{"sizes", curve.sizes}, {"values", curve.values}};
}

void from_json(const nlohmann::json& j, SizeCurve& curve) {
  detail::JsonFields f(j, "size curve");
  f.get("sizes", curve.sizes);
  f.get("values", curve.values);
  f.finish();
}

}  // namespace infinipipe
