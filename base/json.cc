#include "base/json.h"

#include "absl/strings/str_format.h"

namespace infrarsi {

std::string JsonQuote(const std::string& s) {
  std::string out = "\"";
  for (unsigned char c : s) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      default:
        if (c < 0x20) {
          out += absl::StrFormat("\\u%04x", c);
        } else {
          out += static_cast<char>(c);
        }
    }
  }
  out += "\"";
  return out;
}

namespace {

bool IsJsonSpace(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

// Reads a string literal at json[*at] (the opening quote) into *out and
// moves *at past its closing quote; false outside the subset.
bool ReadString(std::string_view json, size_t* at, std::string* out) {
  size_t i = *at;
  if (i >= json.size() || json[i] != '"') return false;
  ++i;
  out->clear();
  while (i < json.size()) {
    const unsigned char c = static_cast<unsigned char>(json[i]);
    if (c == '"') {
      *at = i + 1;
      return true;
    }
    if (c < 0x20 || c >= 0x7f) return false;  // control, DEL or non-ASCII: the general parser's
    if (c != '\\') {
      out->push_back(static_cast<char>(c));
      ++i;
      continue;
    }
    if (i + 1 >= json.size()) return false;
    switch (json[i + 1]) {
      case '"': out->push_back('"'); break;
      case '\\': out->push_back('\\'); break;
      case '/': out->push_back('/'); break;
      case 'b': out->push_back('\b'); break;
      case 'f': out->push_back('\f'); break;
      case 'n': out->push_back('\n'); break;
      case 'r': out->push_back('\r'); break;
      case 't': out->push_back('\t'); break;
      default: return false;  // \u and anything invalid
    }
    i += 2;
  }
  return false;  // unterminated
}

}  // namespace

std::optional<std::map<std::string, std::string>> ParseFlatStringObject(std::string_view json) {
  std::map<std::string, std::string> out;
  size_t i = 0;
  auto skip_space = [&] {
    while (i < json.size() && IsJsonSpace(json[i])) ++i;
  };
  skip_space();
  if (i >= json.size() || json[i] != '{') return std::nullopt;
  ++i;
  skip_space();
  if (i < json.size() && json[i] == '}') {
    ++i;
  } else {
    std::string key, value;
    while (true) {
      skip_space();
      if (!ReadString(json, &i, &key)) return std::nullopt;
      skip_space();
      if (i >= json.size() || json[i] != ':') return std::nullopt;
      ++i;
      skip_space();
      if (!ReadString(json, &i, &value)) return std::nullopt;
      if (!out.emplace(key, value).second) return std::nullopt;  // a repeated key
      skip_space();
      if (i >= json.size()) return std::nullopt;
      if (json[i] == '}') {
        ++i;
        break;
      }
      if (json[i] != ',') return std::nullopt;
      ++i;
    }
  }
  skip_space();
  if (i != json.size()) return std::nullopt;  // trailing text
  return out;
}

}  // namespace infrarsi
