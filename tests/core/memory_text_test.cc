#include "infinipipe/core/memory_text.h"

#include <gtest/gtest.h>

namespace infinipipe {
namespace {

TEST(GibText, AtLeastOneGibIsTwoDecimalsOfGib) {
  EXPECT_EQ(gib_text(1024.0 * 1024 * 1024), "1.00 GiB");
  EXPECT_EQ(gib_text(80.0 * 1024 * 1024 * 1024), "80.00 GiB");
}

TEST(GibText, BelowOneGibTheBytesStandBeside) {
  EXPECT_EQ(gib_text(1234), "0.00 GiB (1,234 bytes)");
  EXPECT_EQ(gib_text(0), "0.00 GiB (0 bytes)");
  EXPECT_EQ(gib_text(999), "0.00 GiB (999 bytes)");
  EXPECT_EQ(gib_text(536870912), "0.50 GiB (536,870,912 bytes)");
  EXPECT_EQ(gib_text(1234.4), "0.00 GiB (1,234 bytes)");
  EXPECT_EQ(gib_text(-2048), "-0.00 GiB (-2,048 bytes)");
}

}  // namespace
}  // namespace infinipipe
