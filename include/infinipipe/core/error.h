#pragma once
// One exception type for every user-facing failure of the planning core. The message must say
// what was wrong and what to do about it; callers (the plan tool, the Python trainer) print it
// as is.
#include <stdexcept>
#include <string>

namespace infinipipe {

class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& message) : std::runtime_error(message) {}
};

// Throws Error(message) when `condition` is false. Kept as a function, not a macro, so the
// message is always built by the caller in plain C++.
inline void check(bool condition, const std::string& message) {
  if (!condition) throw Error(message);
}
// A fixed message becomes a std::string only on failure (checks run in the planner's loops).
inline void check(bool condition, const char* message) {
  if (!condition) throw Error(message);
}

}  // namespace infinipipe
