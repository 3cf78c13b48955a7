#include "infinipipe/core/log.h"

#include <spdlog/sinks/stdout_sinks.h>
#include <spdlog/spdlog.h>

#include <cstdlib>
#include <memory>

#include "infinipipe/core/error.h"

namespace infinipipe::log {

namespace {

spdlog::level::level_enum to_spdlog(Level level) {
  switch (level) {
    case Level::kTrace:
      return spdlog::level::trace;
    case Level::kDebug:
      return spdlog::level::debug;
    case Level::kInfo:
      return spdlog::level::info;
    case Level::kWarn:
      return spdlog::level::warn;
    case Level::kError:
      return spdlog::level::err;
    case Level::kOff:
      break;
  }
  return spdlog::level::off;
}

// Made on first use: a bad INFINIPIPE_LOG_LEVEL is reported once, on stderr, and leaves the
// default rather than failing whatever call happened to log first.
spdlog::logger& logger() {
  static const std::shared_ptr<spdlog::logger> instance = [] {
    auto made = std::make_shared<spdlog::logger>("infinipipe",
                                                 std::make_shared<spdlog::sinks::stderr_sink_mt>());
    const char* rank = std::getenv("RANK");
    made->set_pattern(std::string("[%H:%M:%S.%e] [infinipipe") +
                      (rank != nullptr ? std::string(" rank ") + rank : std::string()) +
                      "] [%l] %v");
    Level level = Level::kWarn;
    if (const char* text = std::getenv("INFINIPIPE_LOG_LEVEL")) {
      try {
        level = parse_level(text);
      } catch (const Error& e) {
        made->warn("{}", e.what());
      }
    }
    made->set_level(to_spdlog(level));
    return made;
  }();
  return *instance;
}

}  // namespace

Level parse_level(const std::string& text) {
  static const std::pair<const char*, Level> kNames[] = {
      {"trace", Level::kTrace}, {"debug", Level::kDebug}, {"info", Level::kInfo},
      {"warn", Level::kWarn},   {"error", Level::kError}, {"off", Level::kOff}};
  for (const auto& [name, level] : kNames)
    if (text == name) return level;
  throw Error("INFINIPIPE_LOG_LEVEL=\"" + text +
              "\" is not a log level: use trace, debug, info, warn, error or off");
}

bool enabled(Level level) { return level != Level::kOff && logger().should_log(to_spdlog(level)); }

void write(Level level, const std::string& message) {
  if (enabled(level)) logger().log(to_spdlog(level), "{}", message);
}

}  // namespace infinipipe::log
