#include "infinipipe/core/memory_text.h"

#include <cmath>
#include <cstdio>

namespace infinipipe {

std::string gib_text(double bytes) {
  constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;
  char text[48];
  std::snprintf(text, sizeof text, "%.2f GiB", bytes / kGiB);
  std::string out = text;
  if (!(std::fabs(bytes) < kGiB)) return out;  // NaN too: nothing more to say
  std::snprintf(text, sizeof text, "%.0f", std::fabs(bytes));
  std::string digits = text;
  for (int at = static_cast<int>(digits.size()) - 3; at > 0; at -= 3) digits.insert(at, ",");
  return out + " (" + (bytes < 0 ? "-" : "") + digits + " bytes)";
}

}  // namespace infinipipe
