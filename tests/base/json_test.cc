// JSON string literals: what a log shipper or a JSON parser reads back.
#include "base/json.h"

#include <gtest/gtest.h>

#include <string>

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

}  // namespace
}  // namespace infrarsi
