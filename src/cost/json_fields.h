#pragma once
// Reading a JSON object field by field, so that a hand-written cost file fails with a message
// naming the object and the field (missing, wrong type, or misspelt) instead of a bare
// nlohmann exception. Private to the cost part.
#include <set>
#include <string>
#include <type_traits>

#include <nlohmann/json.hpp>

#include "infinipipe/core/error.h"
#include "infinipipe/core/json_integers.h"

namespace infinipipe::detail {

class JsonFields {
 public:
  JsonFields(const nlohmann::json& j, std::string what) : j_(j), what_(std::move(what)) {
    check(j.is_object(), what_ + ": expected a JSON object, got " + j.type_name());
  }

  template <typename T>
  void get(const std::string& key, T& value) {
    known_.insert(key);
    auto it = j_.find(key);
    check(it != j_.end(), what_ + ": missing field '" + key + "'");
    if constexpr (std::is_floating_point_v<T>)
      check(it->is_number(), what_ + ": field '" + key + "' must be a number, got " + it->dump());
    else
      check_json_integers<T>(*it, what_ + ": field '" + key + "'");
    try {
      it->get_to(value);
    } catch (const nlohmann::json::exception& e) {
      throw Error(what_ + ": field '" + key + "': " + e.what());
    }
  }

  // A field that older files may lack: left as it is when absent.
  template <typename T>
  void get_optional(const std::string& key, T& value) {
    if (j_.contains(key))
      get(key, value);
    else
      known_.insert(key);
  }

  // Rejects fields nobody asked for: a misspelt optional field would otherwise be ignored.
  void finish() const {
    for (auto it = j_.begin(); it != j_.end(); ++it) {
      if (known_.count(it.key())) continue;
      std::string known;
      for (const std::string& k : known_) known += (known.empty() ? "" : ", ") + k;
      throw Error(what_ + ": unknown field '" + it.key() + "' (expected: " + known + ")");
    }
  }

 private:
  const nlohmann::json& j_;
  std::string what_;
  std::set<std::string> known_;
};

}  // namespace infinipipe::detail
