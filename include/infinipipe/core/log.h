#pragma once
// The C++ core's log, through spdlog, to stderr. The level comes from the environment variable
// INFINIPIPE_LOG_LEVEL (trace, debug, info, warn, error, off; default warn), read once; lines
// carry the rank when RANK is set (torchrun). The header is free of spdlog and fmt so that files
// including LibTorch (which bundles its own fmt) can log too: callers pass finished strings,
// built only when enabled() says the line would be written.
#include <string>

namespace infinipipe::log {

enum class Level { kTrace, kDebug, kInfo, kWarn, kError, kOff };

bool enabled(Level level);
void write(Level level, const std::string& message);

inline void debug(const std::string& message) { write(Level::kDebug, message); }
inline void info(const std::string& message) { write(Level::kInfo, message); }
inline void warn(const std::string& message) { write(Level::kWarn, message); }

// The level named by `text` (as INFINIPIPE_LOG_LEVEL spells it); Error naming the choices.
Level parse_level(const std::string& text);

}  // namespace infinipipe::log
