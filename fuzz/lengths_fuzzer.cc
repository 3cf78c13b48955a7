// read_lengths (data/length_file.cc) over arbitrary bytes, in both forms (plain text, JSON
// Lines) and with the length field found or named: it returns positive lengths or throws
// infinipipe::Error, nothing else.
#include <cstdint>
#include <string>
#include <vector>

#include "fuzz_support.h"
#include "infinipipe/core/error.h"
#include "infinipipe/data/length_file.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  namespace fz = infinipipe::fuzz;
  static const std::string path = fz::scratch_path("lengths");
  fz::write_file(path, data, size);
  // "": the form and the field found from the file; "num_tokens": a field named, JSON Lines.
  for (const char* field : {"", "num_tokens"}) {
    try {
      const std::vector<int64_t> lengths = infinipipe::read_lengths(path, field);
      fz::expect(!lengths.empty(), "read_lengths accepted a file without lengths");
      // At most one length per line, so never more lengths than bytes.
      fz::expect(lengths.size() <= size, "more lengths than bytes");
      for (int64_t n : lengths) {
        fz::expect(n > 0, "read_lengths accepted a length below 1");
        fz::expect(n <= infinipipe::kMaxFileLength, "read_lengths accepted a length too large");
      }
    } catch (const infinipipe::Error&) {
    }
  }
  return 0;
}
