#pragma once
// A length distribution given by data: the lengths of a user's corpus (length_file.h reads
// them), sampled as the built-in distributions are (length_sampler.h), so a run over one's own
// data plans and compares methods exactly as a run over "wikipedia" does.
#include <cstdint>
#include <vector>

namespace infinipipe {

class EmpiricalLengths {
 public:
  // Throws Error when `lengths` is empty or holds a length below 1.
  explicit EmpiricalLengths(std::vector<int64_t> lengths);

  // `batch` lengths drawn uniformly with replacement, each truncated to `context`. The same
  // (lengths, batch, context, seed) give the same lengths on every platform (std::mt19937_64, no
  // implementation-defined std:: distributions). Throws Error on batch < 1 or context < 1.
  std::vector<int64_t> sample(int batch, int64_t context, uint64_t seed) const;

  const std::vector<int64_t>& lengths() const { return lengths_; }

 private:
  std::vector<int64_t> lengths_;
};

}  // namespace infinipipe
