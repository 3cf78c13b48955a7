// read_lengths (data/length_sampler.cc) over arbitrary bytes: it returns positive lengths or
// throws infinipipe::Error, nothing else.
#include <cstdint>
#include <string>
#include <vector>

#include "fuzz_support.h"
#include "infinipipe/core/error.h"
#include "infinipipe/data/length_sampler.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  namespace fz = infinipipe::fuzz;
  static const std::string path = fz::scratch_path("lengths");
  fz::write_file(path, data, size);
  try {
    const std::vector<int64_t> lengths = infinipipe::read_lengths(path);
    fz::expect(!lengths.empty(), "read_lengths accepted a file without lengths");
    // At most one length per line, so never more lengths than bytes.
    fz::expect(lengths.size() <= size, "more lengths than bytes");
    for (int64_t n : lengths) fz::expect(n > 0, "read_lengths accepted a length below 1");
  } catch (const infinipipe::Error&) {
  }
  return 0;
}
