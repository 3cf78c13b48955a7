#pragma once
// Sequence lengths from a user's file (a corpus to sample steps from, or one step to replay), in
// either of two forms, told apart by the first line that holds anything:
//   plain text   one positive integer per line; blank lines and '#' comments (to the end of the
//                line) are ignored;
//   JSON Lines   a line starting with '{': one JSON object per line (blank lines ignored) whose
//                length field holds a positive integer, or a list (token ids) whose size is
//                the length.
#include <cstdint>
#include <string>
#include <vector>

namespace infinipipe {

// The length fields looked for in a JSON Lines record, in this order: "length", "num_tokens",
// "tokens" (a count, or the token ids), "input_ids" (the token ids a tokenizer writes).
const std::vector<std::string>& default_length_fields();

// The largest length a file may hold: 18 digits, what the text form has always accepted (a sum
// of a step's lengths then stays far inside int64).
constexpr int64_t kMaxFileLength = 999'999'999'999'999'999;

// The file's lengths in file order. The length field of a JSON Lines file is `field` when given
// (the file is then read as JSON Lines whatever its first line holds), else the first of
// default_length_fields() that the first record has; every record must have that field. Throws
// Error "PATH:LINE: ..." on a line that is not a length (a non-number, 0, a negative or too large
// number, invalid JSON, a record without the field), and "PATH: ..." when the file cannot be
// opened or holds no lengths.
std::vector<int64_t> read_lengths(const std::string& path, const std::string& field = "");

}  // namespace infinipipe
