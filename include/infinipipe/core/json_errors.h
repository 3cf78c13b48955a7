#pragma once
// What was wrong with a JSON text, from nlohmann's exception, for an Error that names the file
// and place itself. nlohmann's own text opens with its exception id and a position within the
// text it parsed ("[json.exception.parse_error.101] parse error at line 1, column 13: syntax
// error while parsing object - unexpected end of input; expected '}'"): only the part after
// them tells a user what to fix. Header-only, for the parts that read JSON; they link nlohmann
// themselves.
#include <string>

#include <nlohmann/json.hpp>

namespace infinipipe {

// "unexpected end of input; expected '}'", "number overflow parsing '1e999'".
inline std::string json_error_text(const nlohmann::json::exception& e) {
  std::string text = e.what();
  auto drop_through = [&text](const std::string& opening, const std::string& until) {
    if (text.rfind(opening, 0) != 0) return;
    const size_t at = text.find(until);
    if (at != std::string::npos) text.erase(0, at + until.size());
  };
  drop_through("[json.exception.", "] ");
  drop_through("parse error", ": ");
  drop_through("syntax error while parsing ", " - ");
  return text;
}

}  // namespace infinipipe
