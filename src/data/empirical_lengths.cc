#include "infinipipe/data/empirical_lengths.h"

#include <algorithm>
#include <random>
#include <string>

#include "infinipipe/core/error.h"
#include "portable_random.h"

namespace infinipipe {

EmpiricalLengths::EmpiricalLengths(std::vector<int64_t> lengths) : lengths_(std::move(lengths)) {
  check(!lengths_.empty(), "no lengths to sample from");
  for (size_t i = 0; i < lengths_.size(); ++i)
    check(lengths_[i] >= 1, "length " + std::to_string(i) + " is " + std::to_string(lengths_[i]) +
                                "; sequence lengths must be positive");
}

std::vector<int64_t> EmpiricalLengths::sample(int batch, int64_t context, uint64_t seed) const {
  check(batch >= 1, "batch size must be at least 1, got " + std::to_string(batch));
  check(context >= 1, "context length must be at least 1, got " + std::to_string(context));
  std::mt19937_64 rng(seed);
  std::vector<int64_t> out(batch);
  const int64_t last = static_cast<int64_t>(lengths_.size()) - 1;
  for (int64_t& len : out)
    len = std::min(lengths_[data_detail::uniform_int(rng, 0, last)], context);
  return out;
}

}  // namespace infinipipe
