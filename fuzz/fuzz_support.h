#pragma once
// What the fuzz targets share: a scratch file for the parsers that take a path, the JSON an input
// holds, and the check that turns a broken promise into a crash libFuzzer keeps.
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "infinipipe/core/error.h"

namespace infinipipe::fuzz {

// A path of this process's own: libFuzzer's -jobs and -fork run several processes at once. In
// memory (/dev/shm) where there is one: on this machine's disk, rewriting the file per input
// made the file-reading targets several times slower.
inline std::string scratch_path(const std::string& name) {
  const char* dir = access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp";
  return std::string(dir) + "/infinipipe_fuzz_" + name + "_" + std::to_string(getpid());
}

inline void write_file(const std::string& path, const uint8_t* data, size_t size) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(data), static_cast<std::streamsize>(size));
}

// The input's JSON, or nothing: JSON syntax is nlohmann's to get right, the fields are ours.
inline std::optional<nlohmann::json> parse_json(const uint8_t* data, size_t size) {
  nlohmann::json j = nlohmann::json::parse(data, data + size, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return std::nullopt;
  return j;
}

// A property of accepted input that must hold; abort() makes libFuzzer save the input.
inline void expect(bool ok, const char* what) {
  if (ok) return;
  std::fprintf(stderr, "fuzz property broken: %s\n", what);
  std::abort();
}

// The input as a T through its from_json, or nothing when it is not JSON or from_json rejects it
// with infinipipe::Error (any other exception escapes: a finding). What is accepted must read
// back from its own JSON unchanged.
template <typename T>
std::optional<T> read_json_as(const uint8_t* data, size_t size, const char* round_trip_broken) {
  const auto j = parse_json(data, size);
  if (!j) return std::nullopt;
  T value;
  try {
    value = j->template get<T>();
  } catch (const Error&) {
    return std::nullopt;
  }
  expect(nlohmann::json(nlohmann::json(value).template get<T>()) == nlohmann::json(value),
         round_trip_broken);
  return value;
}

}  // namespace infinipipe::fuzz
