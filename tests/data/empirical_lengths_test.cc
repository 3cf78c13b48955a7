#include "infinipipe/data/empirical_lengths.h"

#include <algorithm>
#include <map>

#include <gtest/gtest.h>

#include "infinipipe/core/error.h"
#include "support/error_of.h"

namespace infinipipe {
namespace {

using test_support::error_of;

TEST(EmpiricalLengths, SameSeedSameLengthsOtherSeedOtherLengths) {
  const EmpiricalLengths corpus({5, 100, 2000, 7, 64, 31, 900});
  const auto a = corpus.sample(500, 4096, 42);
  EXPECT_EQ(a.size(), 500u);
  EXPECT_EQ(a, corpus.sample(500, 4096, 42));
  EXPECT_NE(a, corpus.sample(500, 4096, 43));
}

TEST(EmpiricalLengths, DrawsEveryLengthAboutEquallyOftenWithReplacement) {
  const std::vector<int64_t> values = {3, 10, 10, 400};  // 10 twice: twice as likely
  const EmpiricalLengths corpus(values);
  std::map<int64_t, int> counts;
  for (int64_t len : corpus.sample(40000, 1 << 20, 7)) ++counts[len];
  ASSERT_EQ(counts.size(), 3u);  // only the file's lengths
  EXPECT_NEAR(counts[3] / 10000.0, 1.0, 0.05);
  EXPECT_NEAR(counts[10] / 20000.0, 1.0, 0.05);
  EXPECT_NEAR(counts[400] / 10000.0, 1.0, 0.05);
  // More draws than lengths: with replacement.
  EXPECT_EQ(corpus.sample(10, 1 << 20, 1).size(), 10u);
}

TEST(EmpiricalLengths, TruncatesToTheContext) {
  const EmpiricalLengths corpus({50, 5000, 200000});
  const auto lengths = corpus.sample(3000, 4096, 3);
  EXPECT_EQ(*std::max_element(lengths.begin(), lengths.end()), 4096);
  EXPECT_GT(std::count(lengths.begin(), lengths.end(), 4096), 1500);  // two of three lengths
  EXPECT_EQ(std::count(lengths.begin(), lengths.end(), 50) +
                std::count(lengths.begin(), lengths.end(), 4096),
            3000);
}

TEST(EmpiricalLengths, BadArgumentsAreErrors) {
  EXPECT_NE(error_of([] { EmpiricalLengths({}); }).find("no lengths"), std::string::npos);
  EXPECT_NE(error_of([] { EmpiricalLengths({4, 0}); }).find("length 1 is 0"), std::string::npos);
  const EmpiricalLengths corpus({4});
  EXPECT_NE(error_of([&] { corpus.sample(0, 16, 0); }).find("batch"), std::string::npos);
  EXPECT_NE(error_of([&] { corpus.sample(4, 0, 0); }).find("context"), std::string::npos);
}

}  // namespace
}  // namespace infinipipe
