#include "infinipipe/cost/size_curve.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "infinipipe/core/error.h"

namespace infinipipe {
namespace {

TEST(SizeCurve, ExactAtItsPointsMonotoneBetweenAndClampedOutside) {
  const SizeCurve c{{256, 512, 4096}, {0.2, 0.5, 0.8}};
  EXPECT_EQ(c.at(256), 0.2);
  EXPECT_EQ(c.at(512), 0.5);
  EXPECT_EQ(c.at(4096), 0.8);
  EXPECT_EQ(c.at(1), 0.2);
  EXPECT_EQ(c.at(1e9), 0.8);
  // Linear in log size: 1024 is a third of the way from 512 to 4096 in doublings.
  EXPECT_NEAR(c.at(1024), 0.5 + 0.3 / 3, 1e-15);
  double before = 0;
  for (double size = 100; size < 10000; size *= 1.01) {
    EXPECT_GE(c.at(size), before) << size;
    before = c.at(size);
  }
  EXPECT_THROW((SizeCurve{{512, 256}, {0.1, 0.2}}.validate("c", 0, 1)), Error);
  EXPECT_THROW((SizeCurve{{256}, {0.1, 0.2}}.validate("c", 0, 1)), Error);
  EXPECT_THROW((SizeCurve{{256}, {1.5}}.validate("c", 0, 1)), Error);
  EXPECT_THROW((SizeCurve{}.validate("c", 0, 1)), Error);
}

TEST(SizeCurve, RoundTripsThroughJsonAndNamesUnknownFields) {
  const SizeCurve c{{256, 512}, {0.25, 0.5}};
  const SizeCurve back = nlohmann::json(c).get<SizeCurve>();
  EXPECT_EQ(back.sizes, c.sizes);
  EXPECT_EQ(back.values, c.values);
  nlohmann::json j = c;
  j["value"] = {1};
  try {
    j.get<SizeCurve>();
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("unknown field 'value'"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace infinipipe
