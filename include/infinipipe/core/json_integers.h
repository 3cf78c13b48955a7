#pragma once
// Integers read from JSON (cost files, plans) without nlohmann's silent conversions: get<int>()
// truncates 3.5 to 3 and wraps 4294967297 to 1, and converting a float beyond int's range is
// undefined behaviour (fuzz/cost_model_fuzzer found that one). Header-only, for the parts that
// read JSON; they link nlohmann themselves.
#include <cstdint>
#include <limits>
#include <string>
#include <type_traits>
#include <vector>

#include <nlohmann/json.hpp>

#include "infinipipe/core/error.h"

namespace infinipipe {

namespace json_detail {
template <typename T>
struct IsVector : std::false_type {};
template <typename T, typename A>
struct IsVector<std::vector<T, A>> : std::true_type {};
}  // namespace json_detail

// Throws Error("<where> must be an integer ..." or "... is out of range ...") unless every place
// where T holds an integer (T an integer type, or vectors of vectors of one) holds an integer
// that T's integer type can represent; `where` names the field, "[i]" is added per level. Other
// mismatches (an object where a list belongs) are left to nlohmann's type errors.
template <typename T>
void check_json_integers(const nlohmann::json& value, const std::string& where) {
  if constexpr (json_detail::IsVector<T>::value) {
    if (!value.is_array()) return;
    for (size_t i = 0; i < value.size(); ++i)
      check_json_integers<typename T::value_type>(value[i], where + "[" + std::to_string(i) + "]");
  } else if constexpr (std::is_integral_v<T> && !std::is_same_v<T, bool>) {
    check(value.is_number_integer(), where + " must be an integer, got " + value.dump());
    const auto max = static_cast<uint64_t>(std::numeric_limits<T>::max());
    const auto min = static_cast<int64_t>(std::numeric_limits<T>::min());
    bool fits;
    if (value.is_number_unsigned()) {
      fits = value.get<uint64_t>() <= max;
    } else {
      const int64_t v = value.get<int64_t>();
      fits = v < 0 ? v >= min : static_cast<uint64_t>(v) <= max;
    }
    check(fits, where + " is out of range: " + value.dump() + " (at most " +
                    std::to_string(std::numeric_limits<T>::max()) + ")");
  }
}

}  // namespace infinipipe
