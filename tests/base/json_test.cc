// JSON string literals: what a log shipper or a JSON parser reads back.
#include "base/json.h"

#include <gtest/gtest.h>

#include <map>
#include <random>
#include <string>
#include <vector>

#include "google/protobuf/struct.pb.h"
#include "google/protobuf/util/json_util.h"

namespace infrarsi {
namespace {

TEST(JsonQuoteTest, EscapesQuotesBackslashesAndControlCharacters) {
  EXPECT_EQ(JsonQuote(""), "\"\"");
  EXPECT_EQ(JsonQuote("a\"b\\c"), "\"a\\\"b\\\\c\"");
  EXPECT_EQ(JsonQuote("l1\nl2\r\t"), "\"l1\\nl2\\r\\t\"");
  // Other control characters as \u escapes: a log line cannot be split
  // or its terminal state changed by what a message carries.
  EXPECT_EQ(JsonQuote(std::string("\x1b[2J\x01", 5)), "\"\\u001b[2J\\u0001\"");
  EXPECT_EQ(JsonQuote(std::string("a\0b", 3)), "\"a\\u0000b\"");
  // UTF-8 passes through byte for byte.
  EXPECT_EQ(JsonQuote("H\xc3\xa9"), "\"H\xc3\xa9\"");
}

// What protobuf's JSON parser (the general one DecodeConfigJson falls
// back to) reads of `json` as an object of strings; nullopt where it
// refuses the text or a value is not a string.
std::optional<std::map<std::string, std::string>> GeneralParse(const std::string& json) {
  google::protobuf::Struct st;
  if (!google::protobuf::util::JsonStringToMessage(json, &st).ok()) return std::nullopt;
  std::map<std::string, std::string> out;
  for (const auto& [k, v] : st.fields()) {
    if (v.kind_case() != google::protobuf::Value::kStringValue) return std::nullopt;
    out[k] = v.string_value();
  }
  return out;
}

// Where the fast reader gives a map, it is the general parser's, on stored
// settings and on hand-made variants of them (whitespace, escapes it reads
// and ones it leaves to the general parser, bytes outside ASCII); and it
// reads every setting of printable ASCII EncodeConfigJson's way writes.
TEST(ParseFlatStringObjectTest, GivesWhatTheGeneralParserReadsWhereItReadsAtAll) {
  std::mt19937_64 rng(11);
  const std::string alphabet = "abcXYZ019_-.=/ \"\\";
  const std::vector<std::string> rare = {"\n", "\t", "\r", "\b", "\f", std::string("\x01", 1), "\x7f",
                                         "\xc3\xa9", "\xff"};
  auto text = [&](bool printable) {
    std::string s;
    const size_t n = rng() % 12;
    for (size_t i = 0; i < n; ++i) {
      if (!printable && rng() % 6 == 0) {
        s += rare[rng() % rare.size()];
      } else {
        s += alphabet[rng() % alphabet.size()];
      }
    }
    return s;
  };
  auto encode = [](const std::map<std::string, std::string>& c, const std::string& space) {
    std::string out = space + "{";
    bool first = true;
    for (const auto& [k, v] : c) {
      out += (first ? space : "," + space) + JsonQuote(k) + space + ":" + space + JsonQuote(v) + space;
      first = false;
    }
    return out + "}" + space;
  };
  int fast = 0, printable_read = 0, printable_total = 0;
  for (int i = 0; i < 3000; ++i) {
    const bool printable = i % 2 == 0;
    std::map<std::string, std::string> c;
    const size_t keys = rng() % 6;
    for (size_t k = 0; k < keys; ++k) c[text(printable)] = text(printable);
    std::string json = encode(c, i % 3 == 0 ? std::string(" \n\t\r").substr(0, 1 + rng() % 4) : "");
    // Some solidus and unicode escapes, which JsonQuote does not write.
    if (i % 5 == 0) {
      for (size_t at = json.find('/'); at != std::string::npos; at = json.find('/', at + 2)) {
        json.replace(at, 1, "\\/");
      }
    }
    if (i % 7 == 0 && json.find('a') != std::string::npos) json.replace(json.find('a'), 1, "\\u0061");
    const auto mine = ParseFlatStringObject(json);
    const auto general = GeneralParse(json);
    if (mine.has_value()) {
      ++fast;
      ASSERT_TRUE(general.has_value()) << json;
      EXPECT_EQ(*mine, *general) << json;
      EXPECT_EQ(*mine, c) << json;
    }
    if (printable && i % 5 != 0 && i % 7 != 0) {
      ++printable_total;
      printable_read += mine.has_value();
    }
  }
  EXPECT_EQ(printable_read, printable_total);
  EXPECT_GT(fast, 1500);
}

TEST(ParseFlatStringObjectTest, LeavesEverythingOutsideItsSubsetToTheGeneralParser) {
  for (const std::string json : {"", " ", "{", "}", "[]", "{\"a\"}", "{\"a\":}", "{\"a\":1}", "{\"a\":null}",
                                 "{\"a\":true}", "{\"a\":{\"b\":\"c\"}}", "{\"a\":[\"b\"]}", "{\"a\":\"1\",}",
                                 "{,}", "{\"a\":\"1\"} x", "{\"a\":\"1\"}}", "{\"a\":\"1\" \"b\":\"2\"}",
                                 "{\"a\" \"1\"}", "{'a':'1'}", "{a:\"1\"}", "{\"a\":\"1\"", "{\"a\":\"1",
                                 "{\"a\":\"1\\", "{\"a\":\"\\x\"}", "{\"a\":\"\\u0041\"}",
                                 "{\"a\":\"1\",\"a\":\"2\"}", "{\"a\":\"tab\there\"}", "{\"a\":\"\xc3\xa9\"}",
                                 "\xef\xbb\xbf{\"a\":\"1\"}", "{\"a\":\"1\"}\v"}) {
    EXPECT_FALSE(ParseFlatStringObject(json).has_value()) << json;
  }
  // And what it does read, exactly.
  EXPECT_EQ(ParseFlatStringObject("{}"), (std::map<std::string, std::string>{}));
  EXPECT_EQ(ParseFlatStringObject(" \t{ \"\" : \"\" }\r\n"), (std::map<std::string, std::string>{{"", ""}}));
  EXPECT_EQ(ParseFlatStringObject("{\"k\\\"\\\\\\/\":\"\\b\\f\\n\\r\\t\"}"),
            (std::map<std::string, std::string>{{"k\"\\/", "\b\f\n\r\t"}}));
}

}  // namespace
}  // namespace infrarsi
