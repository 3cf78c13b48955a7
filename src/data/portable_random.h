#pragma once
// Uniform variates that are the same on every platform (internal to the data part): the
// std::uniform_*_distribution of one standard library differs from another's, and the samplers
// promise the same lengths for the same seed everywhere.
#include <cstdint>
#include <random>

namespace infinipipe::data_detail {

inline double uniform01(std::mt19937_64& rng) { return double(rng() >> 11) * 0x1p-53; }  // [0, 1)

inline int64_t uniform_int(std::mt19937_64& rng, int64_t lo, int64_t hi) {  // [lo, hi]
  // Bias below 2^-53 * range: negligible for lengths and for indices into a million lengths.
  return lo + static_cast<int64_t>(uniform01(rng) * double(hi - lo + 1));
}

}  // namespace infinipipe::data_detail
