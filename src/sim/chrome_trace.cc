#include <cerrno>
#include <cstring>
#include <fstream>

#include <nlohmann/json.hpp>

#include "infinipipe/core/error.h"
#include "infinipipe/sim/simulator.h"

namespace infinipipe {

namespace {

constexpr double kMicrosecondsPerSecond = 1e6;  // the trace format counts microseconds
constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;

nlohmann::json thread_name(int tid, const std::string& name) {
  return {
      {"name", "thread_name"}, {"ph", "M"}, {"pid", 0}, {"tid", tid}, {"args", {{"name", name}}}};
}

}  // namespace

nlohmann::json chrome_trace(const SimResult& result) {
  const int stages = static_cast<int>(result.busy_s.size());
  nlohmann::json events = nlohmann::json::array();
  // Transfers overlap the compute of the sending stage, and overlapping complete events on one
  // thread draw badly, so each stage's sends get a thread of their own below the compute rows.
  bool any_send = false;
  for (const SimEvent& e : result.events) any_send = any_send || e.category == "send";
  for (int p = 0; p < stages; ++p) {
    events.push_back(thread_name(p, "stage " + std::to_string(p)));
    if (any_send) events.push_back(thread_name(stages + p, "stage " + std::to_string(p) + " send"));
  }
  for (const SimEvent& e : result.events) {
    int tid = e.category == "send" ? stages + e.stage : e.stage;
    events.push_back({{"name", e.name},
                      {"cat", e.category},
                      {"ph", "X"},
                      {"pid", 0},
                      {"tid", tid},
                      {"ts", e.start_s * kMicrosecondsPerSecond},
                      {"dur", (e.end_s - e.start_s) * kMicrosecondsPerSecond}});
  }
  for (int p = 0; p < static_cast<int>(result.memory.size()); ++p)
    for (const auto& [time, bytes] : result.memory[p])
      events.push_back({{"name", "memory stage " + std::to_string(p)},
                        {"ph", "C"},
                        {"pid", 0},
                        {"tid", p},
                        {"ts", time * kMicrosecondsPerSecond},
                        {"args", {{"GiB", bytes / kGiB}}}});
  return {{"traceEvents", events}, {"displayTimeUnit", "ms"}};
}

void write_chrome_trace(const SimResult& result, const std::string& path) {
  std::ofstream out(path);
  if (!out)
    throw Error("cannot write the Chrome trace to '" + path + "': " + std::strerror(errno) +
                "; check that the directory exists and is writable");
  out << chrome_trace(result).dump() << '\n';
  if (!out)
    throw Error("writing the Chrome trace to '" + path + "' failed: " + std::strerror(errno));
}

}  // namespace infinipipe
