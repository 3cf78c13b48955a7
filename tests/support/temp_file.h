#pragma once
// A fixture for tests that write and read a file: a path of its own per test in gtest's temporary
// directory (named after the test), the file removed after the test.
#include <cstdio>
#include <fstream>
#include <string>

#include <gtest/gtest.h>

namespace infinipipe::test_support {

class TempFileTest : public ::testing::Test {
 protected:
  // `suffix` ends the file's name: "<test name>_<suffix>".
  explicit TempFileTest(const std::string& suffix)
      : path_(::testing::TempDir() +
              ::testing::UnitTest::GetInstance()->current_test_info()->name() + "_" + suffix) {}
  void TearDown() override { std::remove(path_.c_str()); }
  void write(const std::string& text) { std::ofstream(path_) << text; }

  const std::string path_;
};

}  // namespace infinipipe::test_support
