#include "infinipipe/data/length_file.h"

#include <gtest/gtest.h>

#include "infinipipe/core/error.h"
#include "support/error_of.h"
#include "support/temp_file.h"

namespace infinipipe {
namespace {

using test_support::error_of;

class LengthsFile : public test_support::TempFileTest {
 protected:
  LengthsFile() : TempFileTest("length_file_test.txt") {}
  std::string read_error(const std::string& text, const std::string& field = "") {
    write(text);
    return error_of([&] { read_lengths(path_, field); });
  }
  bool says(const std::string& error, const std::string& part) {
    return error.find(part) != std::string::npos;
  }
};

TEST_F(LengthsFile, ReadsIntegersSkippingBlanksAndComments) {
  write("# lengths of step 3\n128\n\n  4096  \r\n7 # a short one\n   \n1\n");
  EXPECT_EQ(read_lengths(path_), (std::vector<int64_t>{128, 4096, 7, 1}));
}

TEST_F(LengthsFile, ErrorsNameFileAndLine) {
  EXPECT_TRUE(says(read_error("12\n# ok\nabc\n"), path_ + ":3:"));
  EXPECT_TRUE(says(read_error("12\n0\n"), path_ + ":2: sequence length must be positive"));
  EXPECT_TRUE(says(read_error("-5\n"), path_ + ":1:"));
  EXPECT_TRUE(says(read_error("12 13\n"), path_ + ":1:"));
  EXPECT_TRUE(says(read_error("1.5\n"), path_ + ":1:"));
  EXPECT_TRUE(says(read_error("99999999999999999999999\n"), path_ + ":1:"));
  EXPECT_TRUE(says(read_error("# nothing\n\n"), path_ + ": no lengths"));
  EXPECT_TRUE(says(read_error(""), path_));
  EXPECT_TRUE(says(error_of([&] { read_lengths(path_ + ".missing"); }), path_ + ".missing"));
  // A JSON record after plain lines is not a length: the first line decides the form.
  EXPECT_TRUE(says(read_error("12\n{\"length\": 5}\n"), path_ + ":2: expected one positive"));
}

TEST_F(LengthsFile, JsonLinesTakeTheFirstDefaultFieldTheFirstRecordHas) {
  write(
      "{\"id\": 1, \"length\": 300, \"num_tokens\": 9}\n"
      "\n"
      "  {\"length\": 4096, \"text\": \"# not a comment\"}\r\n"
      "{\"length\": 1}\n");
  EXPECT_EQ(read_lengths(path_), (std::vector<int64_t>{300, 4096, 1}));
  // The order of default_length_fields(), not the record's: num_tokens before tokens.
  write("{\"tokens\": 5, \"num_tokens\": 7}\n{\"num_tokens\": 8}\n");
  EXPECT_EQ(read_lengths(path_), (std::vector<int64_t>{7, 8}));
  EXPECT_EQ(default_length_fields(),
            (std::vector<std::string>{"length", "num_tokens", "tokens", "input_ids"}));
}

TEST_F(LengthsFile, JsonLinesListsOfTokenIdsCountTheirTokens) {
  write("{\"input_ids\": [5, 17, 2]}\n{\"input_ids\": [9]}\n");
  EXPECT_EQ(read_lengths(path_), (std::vector<int64_t>{3, 1}));
}

TEST_F(LengthsFile, ANamedFieldIsReadAndForcesJsonLines) {
  write("{\"n\": 12, \"length\": 3}\n{\"n\": 40}\n");
  EXPECT_EQ(read_lengths(path_, "n"), (std::vector<int64_t>{12, 40}));
  // A plain text file with a field named is an error on its first line, not read as text.
  EXPECT_TRUE(
      says(read_error("12\n", "n"), path_ + ":1: expected a JSON object holding the "
                                            "sequence length (field \"n\"), got a JSON number"));
}

TEST_F(LengthsFile, JsonLinesErrorsNameFileLineAndField) {
  const std::string no_field = read_error("{\"length\": 5}\n{\"text\": \"a\", \"id\": 2}\n");
  EXPECT_TRUE(says(no_field, path_ + ":2: no field \"length\" in this record"));
  EXPECT_TRUE(says(no_field, "its fields: \"id\", \"text\"")) << no_field;
  EXPECT_TRUE(says(no_field, "first record (line 1)"));
  const std::string none = read_error("{\"text\": \"a\"}\n");
  EXPECT_TRUE(says(none, path_ + ":1: no length field"));
  EXPECT_TRUE(says(none, "\"length\", \"num_tokens\", \"tokens\", \"input_ids\""));
  EXPECT_TRUE(says(none, "--lengths-field"));
  EXPECT_TRUE(says(read_error("{\"a\": 1}\n", "b"), path_ + ":1: no field \"b\""));
  EXPECT_TRUE(says(read_error("{\"length\": 5}\n{\"length\": 5\n"), path_ + ":2: not valid JSON"));
  EXPECT_TRUE(says(read_error("{\"length\": 5}\n[5]\n"), path_ + ":2: expected a JSON object"));
  for (const std::string& bad : {"0", "-3", "1.5", "\"12\"", "null", "[]", "1e3",
                                 "99999999999999999999", "1000000000000000000"}) {
    const std::string error = read_error("{\"length\": 7}\n{\"length\": " + bad + "}\n");
    EXPECT_TRUE(says(error, path_ + ":2: field \"length\"")) << bad << ": " << error;
  }
  EXPECT_EQ((write("{\"length\": 999999999999999999}\n"), read_lengths(path_)),
            (std::vector<int64_t>{kMaxFileLength}));
  EXPECT_TRUE(says(read_error("{\"length\": 1e999}\n"), path_ + ":1: not valid JSON"));
  EXPECT_TRUE(says(read_error("\n\n", "length"), path_ + ": no lengths"));
}

TEST_F(LengthsFile, AnInvalidJsonLineSaysWhereAndWhatWithoutNlohmannsPreamble) {
  // It read "[json.exception.parse_error.101] parse error at column 13: syntax error while
  // parsing object - unexpected end of input; expected '}'".
  EXPECT_EQ(read_error("{\"length\": 5}\n{\"length\": 5\n"),
            path_ + ":2: not valid JSON at column 13: unexpected end of input; expected '}'");
  // Columns are the file's, leading blanks included.
  EXPECT_EQ(read_error("{\"length\": 5}\n  {length: 5}\n"),
            path_ +
                ":2: not valid JSON at column 4: invalid literal; last read: '  {l'; expected "
                "string literal");
  EXPECT_EQ(read_error("{\"length\": 1e999}\n"),
            path_ + ":1: not valid JSON: number overflow parsing '1e999'");
}

}  // namespace
}  // namespace infinipipe
