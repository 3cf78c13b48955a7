// Reading a user's lengths file (length_file.h): the plain text form and the JSON Lines form.
#include "infinipipe/data/length_file.h"

#include <algorithm>
#include <fstream>

#include <nlohmann/json.hpp>

#include "infinipipe/core/error.h"
#include "infinipipe/core/json_errors.h"

namespace infinipipe {
namespace {

// The text without surrounding blanks ("\r" too: files written on Windows).
std::string trimmed(const std::string& line) {
  const size_t first = line.find_first_not_of(" \t\r");
  if (first == std::string::npos) return "";
  return line.substr(first, line.find_last_not_of(" \t\r") - first + 1);
}

std::string quoted_list(const std::vector<std::string>& names) {
  std::string out;
  for (const std::string& n : names) out += (out.empty() ? "\"" : ", \"") + n + "\"";
  return out;
}

// The record's own field names, for an error that must say which field to name instead; the
// first few are enough to recognise the data set.
std::string fields_of(const nlohmann::json& record) {
  constexpr size_t kShown = 8;
  std::vector<std::string> names;
  for (auto it = record.begin(); it != record.end() && names.size() < kShown; ++it)
    names.push_back(it.key());
  if (names.empty()) return "it has no fields";
  return "its fields: " + quoted_list(names) + (record.size() > kShown ? ", ..." : "");
}

int64_t text_length(const std::string& text, const std::string& where) {
  const bool digits =
      std::all_of(text.begin(), text.end(), [](char c) { return c >= '0' && c <= '9'; });
  check(digits, where + "expected one positive integer (a sequence length), got '" + text + "'");
  check(text.size() <= 18, where + "length " + text + " is too large");  // kMaxFileLength
  const int64_t length = std::stoll(text);
  check(length > 0, where + "sequence length must be positive, got " + text);
  return length;
}

int64_t json_length(const nlohmann::json& value, const std::string& field,
                    const std::string& where) {
  const std::string what = where + "field \"" + field + "\" ";
  if (value.is_array()) {
    check(!value.empty(), what + "is an empty list: a sequence has at least one token");
    return static_cast<int64_t>(value.size());
  }
  check(value.is_number_integer(),
        what + "must be a positive integer or a list of token ids, got " + value.dump());
  // nlohmann holds a non-negative integer as unsigned (up to 2^64 - 1): compare it before
  // converting, so that a value beyond int64 cannot wrap to a small one.
  check(!value.is_number_unsigned() || value.get<uint64_t>() <= uint64_t(kMaxFileLength),
        what + "is too large: " + value.dump());
  const int64_t length = value.get<int64_t>();
  check(length > 0, what + "must be a positive sequence length, got " + value.dump());
  return length;
}

// A JSON Lines record's length; `field` is chosen on the first record when still empty.
int64_t record_length(const std::string& text, const std::string& where, bool field_given,
                      std::string& field, int& field_line, int line) {
  nlohmann::json record;
  try {
    record = nlohmann::json::parse(text);
  } catch (const nlohmann::json::parse_error& e) {
    // nlohmann counts lines within the text it parsed, always line 1 here: its byte is the
    // column in the file.
    throw Error(where + "not valid JSON at column " + std::to_string(e.byte) + ": " +
                json_error_text(e));
  } catch (const nlohmann::json::exception& e) {  // out_of_range for "1e999"
    throw Error(where + "not valid JSON: " + json_error_text(e));
  }
  const std::string wanted =
      quoted_list(field.empty() ? default_length_fields() : std::vector{field});
  check(record.is_object(), where + "expected a JSON object holding the sequence length (field " +
                                wanted + "), got a JSON " + record.type_name());
  if (field.empty()) {
    for (const std::string& name : default_length_fields())
      if (record.contains(name)) {
        field = name;
        field_line = line;
        break;
      }
    check(!field.empty(), where + "no length field in this record: looked for " + wanted + " (" +
                              fields_of(record) +
                              "); name the field that holds the length "
                              "(infinipipe-plan --lengths-field NAME)");
  }
  const auto it = record.find(field);
  if (it == record.end())
    throw Error(where + "no field \"" + field + "\" in this record (" + fields_of(record) + ")" +
                (field_given ? std::string()
                             : "; the first record (line " + std::to_string(field_line) +
                                   ") has it, and every record must hold the same length field"));
  return json_length(*it, field, where);
}

}  // namespace

const std::vector<std::string>& default_length_fields() {
  static const std::vector<std::string> names = {"length", "num_tokens", "tokens", "input_ids"};
  return names;
}

std::vector<int64_t> read_lengths(const std::string& path, const std::string& field) {
  std::ifstream in(path);
  check(in.good(), "cannot open lengths file '" + path + "'");
  std::vector<int64_t> lengths;
  std::string line, json_field = field;
  bool json_lines = !field.empty(), form_known = !field.empty();
  int field_line = 0;
  for (int number = 1; std::getline(in, line); ++number) {
    const std::string where = path + ":" + std::to_string(number) + ": ";
    if (!form_known) {
      const std::string text = trimmed(line);
      if (text.empty() || text[0] == '#') continue;
      json_lines = text[0] == '{';
      form_known = true;
    }
    // '#' may stand inside a JSON string, so JSON Lines have no comments.
    const std::string text = trimmed(json_lines ? line : line.substr(0, line.find('#')));
    if (text.empty()) continue;
    // A JSON line is parsed as it stands in the file, so that the columns of errors are the
    // file's.
    lengths.push_back(
        json_lines ? record_length(line, where, !field.empty(), json_field, field_line, number)
                   : text_length(text, where));
  }
  check(!lengths.empty(), path +
                              ": no lengths found (one positive integer per line expected, or "
                              "JSON Lines with a length field)");
  return lengths;
}

}  // namespace infinipipe
