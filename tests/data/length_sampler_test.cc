#include "infinipipe/data/length_sampler.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <random>

#include <gtest/gtest.h>

#include "infinipipe/core/error.h"
#include "support/error_of.h"

namespace infinipipe {
namespace {

using test_support::error_of;

int64_t quantile(std::vector<int64_t> values, double p) {  // inverted CDF, as numpy's
  std::sort(values.begin(), values.end());
  const size_t rank = static_cast<size_t>(std::ceil(p * values.size()));
  return values[std::max<size_t>(rank, 1) - 1];
}

TEST(SampleLengths, SameSeedSameLengthsOtherSeedOtherLengths) {
  for (const std::string& name : distribution_names()) {
    const auto a = sample_lengths(name, 1000, 32768, 42);
    EXPECT_EQ(a, sample_lengths(name, 1000, 32768, 42)) << name;
    EXPECT_NE(a, sample_lengths(name, 1000, 32768, 43)) << name;
    EXPECT_EQ(a.size(), 1000u);
  }
}

TEST(SampleLengths, EveryLengthIsWithinOneAndContext) {
  std::mt19937_64 rng(1);
  for (int trial = 0; trial < 200; ++trial) {
    const int64_t context = 1 + rng() % (trial % 2 ? 100 : 200000);
    for (const std::string& name : distribution_names()) {
      for (int64_t len : sample_lengths(name, 500, context, rng())) {
        ASSERT_GE(len, 1) << name;
        ASSERT_LE(len, context) << name;
      }
    }
  }
  // A short context really clamps the skewed distributions.
  const auto clamped = sample_lengths("wikipedia", 10000, 512, 9);
  EXPECT_GT(std::count(clamped.begin(), clamped.end(), 512), 1000);
}

// 200,000 draws of a corpus's table against the corpus's own quantiles (numpy.quantile(...,
// method="inverted_cdf"), as benchmarks/tools/fit_length_table.py prints them); returns the draws.
std::vector<int64_t> expect_corpus_quantiles(const std::string& name, double median, double p90,
                                             double p99) {
  const auto lengths = sample_lengths(name, 200000, int64_t{1} << 22, 2024);
  EXPECT_NEAR(quantile(lengths, 0.5) / median, 1.0, 0.03) << name;
  EXPECT_NEAR(quantile(lengths, 0.9) / p90, 1.0, 0.03) << name;
  EXPECT_NEAR(quantile(lengths, 0.99) / p99, 1.0, 0.05) << name;
  return lengths;
}

TEST(SampleLengths, WikipediaMatchesTheDataQuantiles) {
  // /work/shared/data/wikipedia_lengths.txt (1M lengths).
  const auto lengths = expect_corpus_quantiles("wikipedia", 347, 2112, 10919);
  // The long tail is there: the data has 1% above p99 and lengths up to 1.8M.
  EXPECT_GT(*std::max_element(lengths.begin(), lengths.end()), 50000);
}

TEST(SampleLengths, CodeMatchesTheDataQuantiles) {
  // benchmarks/tools/code_lengths.py's 31,469 lengths (docs/notes/2026-11-29-code-lengths.md).
  const auto lengths = expect_corpus_quantiles("code", 893, 8087, 35188);
  // Longer than Wikipedia's from the first percentile up: 31 files (0.1%) are over 120,648
  // tokens, the longest 843,616.
  EXPECT_GT(*std::max_element(lengths.begin(), lengths.end()), 120648);
  EXPECT_EQ(lengths, sample_lengths("code", 200000, int64_t{1} << 22, 2024));
  EXPECT_NE(lengths, sample_lengths("wikipedia", 200000, int64_t{1} << 22, 2024));
}

TEST(SampleLengths, LognormalHasTheFittedLogMoments) {
  // Log-mean and log-std of the Wikipedia lengths, printed by benchmarks/tools/fit_length_table.py.
  const auto lengths = sample_lengths("lognormal", 200000, int64_t{1} << 40, 5);
  double sum = 0, sum_sq = 0;
  for (int64_t len : lengths) {
    sum += std::log(double(len));
    sum_sq += std::pow(std::log(double(len)), 2);
  }
  const double mean = sum / lengths.size();
  const double std_dev = std::sqrt(sum_sq / lengths.size() - mean * mean);
  EXPECT_NEAR(mean, 5.9499, 0.02);
  EXPECT_NEAR(std_dev, 1.2580, 0.02);
}

TEST(SampleLengths, UniformCoversTheRangeEvenly) {
  const int64_t context = 1000;
  const auto lengths = sample_lengths("uniform", 200000, context, 8);
  std::vector<int> counts(10);
  for (int64_t len : lengths) ++counts[(len - 1) / 100];
  for (int c : counts) EXPECT_NEAR(c / 20000.0, 1.0, 0.05);
  EXPECT_EQ(*std::min_element(lengths.begin(), lengths.end()), 1);
  EXPECT_EQ(*std::max_element(lengths.begin(), lengths.end()), context);
}

TEST(SampleLengths, ExtremeHasExactlyOneFullContextSequence) {
  std::mt19937_64 rng(4);
  std::vector<int> positions;
  for (int trial = 0; trial < 100; ++trial) {
    const int batch = 1 + rng() % 64;
    const int64_t context = 4096 + rng() % 100000;
    const auto lengths = sample_lengths("extreme", batch, context, rng());
    EXPECT_EQ(std::count(lengths.begin(), lengths.end(), context), 1);
    for (int64_t len : lengths) {
      if (len != context) EXPECT_TRUE(len >= 64 && len <= 2048) << len;
    }
    positions.push_back(std::find(lengths.begin(), lengths.end(), context) - lengths.begin());
  }
  // Not always first: consumers must not rely on the order.
  EXPECT_GT(std::count_if(positions.begin(), positions.end(), [](int p) { return p > 0; }), 50);
}

TEST(SampleLengths, BadArgumentsAreErrors) {
  const std::string unknown = error_of([] { sample_lengths("zipf", 8, 1024, 0); });
  EXPECT_NE(unknown.find("zipf"), std::string::npos);
  for (const std::string& name : distribution_names()) {
    EXPECT_NE(unknown.find(name), std::string::npos);
  }
  EXPECT_NE(error_of([] { sample_lengths("uniform", 0, 1024, 0); }).find("batch"),
            std::string::npos);
  EXPECT_NE(error_of([] { sample_lengths("uniform", 8, 0, 0); }).find("context"),
            std::string::npos);
}

}  // namespace
}  // namespace infinipipe
