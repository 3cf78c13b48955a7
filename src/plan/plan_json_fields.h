#pragma once
// Reading a plan's JSON field by field (internal to the plan part): a plan file is user input,
// so a missing or mistyped field is an Error naming it, not a bare nlohmann exception.
#include <string>

#include <nlohmann/json.hpp>

#include "infinipipe/core/error.h"
#include "infinipipe/core/json_integers.h"

namespace infinipipe::planning {

// Reads j[field] into `out`, turning nlohmann's type errors into an Error that names the field.
template <typename T>
void read_field(const nlohmann::json& j, const char* field, T& out) {
  check(j.is_object(), "plan JSON: expected an object with field \"" + std::string(field) + "\"");
  auto it = j.find(field);
  check(it != j.end(), "plan JSON: missing field \"" + std::string(field) + "\"");
  check_json_integers<T>(*it, "plan JSON: field \"" + std::string(field) + "\"");
  try {
    out = it->template get<T>();
  } catch (const nlohmann::json::exception& e) {
    throw Error("plan JSON: field \"" + std::string(field) + "\" has the wrong type: " + e.what());
  }
}

template <typename T>
void read_optional(const nlohmann::json& j, const char* field, T& out) {
  if (j.is_object() && j.contains(field)) read_field(j, field, out);
}

}  // namespace infinipipe::planning
