// JSON string literals, written once for every folder (the spec's JSON,
// the reports, the daemons' JSON logs).
#ifndef INFRARSI_BASE_JSON_H_
#define INFRARSI_BASE_JSON_H_

#include <map>
#include <optional>
#include <string>
#include <string_view>

namespace infrarsi {

// A JSON string literal, quotes included: `"`, `\` and control characters
// escaped; other bytes (UTF-8 included) pass through. Thread-safe.
std::string JsonQuote(const std::string& s);

// A JSON object whose values are all strings ({"a":"1","b":"x"}: a stored
// trial's setting), parsed without a general JSON parser: a proposal at
// thousands of trials reads every one of them back. Only a subset is
// read: printable ASCII in keys and values, the escapes \" \\ \/ \b \f \n
// \r \t, JSON whitespace between tokens, distinct keys. Anything else
// (another value type, a \u escape, a byte outside printable ASCII, a
// repeated key, a malformed or truncated text) gives nullopt, for the
// caller's general parser to accept or refuse: so where this returns a
// map, it is the one a conforming JSON parser reads. Thread-safe.
std::optional<std::map<std::string, std::string>> ParseFlatStringObject(std::string_view json);

}  // namespace infrarsi

#endif  // INFRARSI_BASE_JSON_H_
