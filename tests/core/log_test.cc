#include "infinipipe/core/log.h"

#include <gtest/gtest.h>

#include "infinipipe/core/error.h"

namespace infinipipe::log {
namespace {

TEST(LogLevel, ParsesEveryNameTheEnvironmentVariableAccepts) {
  EXPECT_EQ(parse_level("trace"), Level::kTrace);
  EXPECT_EQ(parse_level("debug"), Level::kDebug);
  EXPECT_EQ(parse_level("info"), Level::kInfo);
  EXPECT_EQ(parse_level("warn"), Level::kWarn);
  EXPECT_EQ(parse_level("error"), Level::kError);
  EXPECT_EQ(parse_level("off"), Level::kOff);
}

TEST(LogLevel, AnUnknownNameIsAnErrorListingTheChoices) {
  try {
    parse_level("verbose");
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("\"verbose\" is not a log level"), std::string::npos);
    EXPECT_NE(std::string(e.what()).find("trace, debug, info, warn, error or off"),
              std::string::npos);
  }
}

TEST(LogLevel, OffIsNeverEnabled) { EXPECT_FALSE(enabled(Level::kOff)); }

}  // namespace
}  // namespace infinipipe::log
