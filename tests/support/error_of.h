#pragma once
// For tests that check what an infinipipe::Error says: its message, or that it mentions given
// parts.
#include <functional>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "infinipipe/core/error.h"

namespace infinipipe::test_support {

// The message of the infinipipe::Error that `fn` throws; a test failure, and "", when it throws
// none.
inline std::string error_of(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const Error& e) {
    return e.what();
  }
  ADD_FAILURE() << "expected an infinipipe::Error";
  return "";
}

// Runs `fn`, expecting infinipipe::Error whose message contains every one of `parts`.
inline void expect_error(const std::function<void()>& fn, const std::vector<std::string>& parts) {
  const std::string message = error_of(fn);
  for (const std::string& part : parts)
    EXPECT_NE(message.find(part), std::string::npos)
        << "message '" << message << "' does not mention '" << part << "'";
}

}  // namespace infinipipe::test_support
