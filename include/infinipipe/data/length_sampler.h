#pragma once
// Sequence lengths of a training step sampled from a built-in distribution (for benchmarks and
// examples). A user's own lengths: length_file.h reads them, empirical_lengths.h samples them.
#include <cstdint>
#include <string>
#include <vector>

namespace infinipipe {

// `batch` lengths from `distribution`, each clamped to [1, context]. The same (distribution,
// batch, context, seed) gives the same lengths on every platform (std::mt19937_64, no
// implementation-defined std:: distributions). Distributions:
//   "wikipedia"  inverse-CDF sampling from quantiles of a Wikipedia length sample (skewed: median
//                347 tokens, p99 ~11k, a few over 1M)
//   "code"       the same from the source files shipped on one machine (Python standard library,
//                site-packages, /usr/include; benchmarks/tools/code_lengths.py): longer and more
//                spread (median 893, p99 ~35k, max 844k)
//   "uniform"    uniform in [1, context]
//   "lognormal"  log-normal with the log-mean and log-std of the Wikipedia sample
//   "extreme"    uniform in [64, 2048] except one sequence (at a random position) of length
//                context (with context <= 2048 the clamp can make others equal context too)
// Throws Error on an unknown name (listing the known ones), batch < 1 or context < 1.
std::vector<int64_t> sample_lengths(const std::string& distribution, int batch, int64_t context,
                                    uint64_t seed);

std::vector<std::string> distribution_names();

}  // namespace infinipipe
