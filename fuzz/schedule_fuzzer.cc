// Schedules from outside (schedule/action.cc): JSON through from_json, anything else as the text
// form's actions, one per whitespace-separated word. Accepted input prints (text, grid) and reads
// back as itself.
#include <cstdint>
#include <sstream>
#include <string>

#include "fuzz_support.h"
#include "infinipipe/core/error.h"
#include "infinipipe/schedule/action.h"

namespace {

namespace ip = infinipipe;
namespace fz = infinipipe::fuzz;

void schedule_json(const nlohmann::json& j, size_t size) {
  ip::Schedule schedule;
  try {
    schedule = j.get<ip::Schedule>();
  } catch (const ip::Error&) {
    return;
  }
  const ip::Schedule back = nlohmann::json(schedule).get<ip::Schedule>();
  fz::expect(back.stages == schedule.stages, "a schedule changed on a JSON round trip");
  (void)schedule.text();
  // A mark anywhere, on a cell or not: grid() must cope.
  const int stage = static_cast<int>(size % 5) - 1;
  const int index = static_cast<int>(size % 97) - 1;
  (void)schedule.grid(stage, index);
}

void action_words(const std::string& text) {
  std::istringstream words(text);
  std::string word;
  while (words >> word) {
    try {
      const ip::Action a = ip::Action::parse(word);
      fz::expect(a.chunk >= 0, "an action with a negative chunk id");
      fz::expect(ip::Action::parse(a.text()) == a, "an action changed on a text round trip");
      if (a.is_send() || a.is_recv()) (void)a.peer(0);
    } catch (const ip::Error&) {
    }
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (const auto j = fz::parse_json(data, size))
    schedule_json(*j, size);
  else
    action_words(std::string(reinterpret_cast<const char*>(data), size));
  return 0;
}
