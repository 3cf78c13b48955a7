#pragma once
// The message of the infinipipe::Error that `fn` throws; a test failure, and "", when it throws
// none. For tests that check what an error says.
#include <functional>
#include <string>

#include <gtest/gtest.h>

#include "infinipipe/core/error.h"

namespace infinipipe::test_support {

inline std::string error_of(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const Error& e) {
    return e.what();
  }
  ADD_FAILURE() << "expected an infinipipe::Error";
  return "";
}

}  // namespace infinipipe::test_support
