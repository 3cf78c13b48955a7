#pragma once
// Memory amounts in messages: every budget error prints them through gib_text, so that a small
// budget (a test's, or a typo's) never reads "0.00 GiB against 0.00 GiB".
#include <string>

namespace infinipipe {

// "12.50 GiB"; below 1 GiB, where two decimals of GiB hide what was meant, the bytes too:
// "0.00 GiB (1,234 bytes)".
std::string gib_text(double bytes);

}  // namespace infinipipe
