// What the CLI prints from a server: control characters are shown as
// escapes, never passed to the terminal (issue: ESC and OSC sequences in a
// patch rationale or a plan message were printed raw).
#include "client/terminal_safe.h"

#include <gtest/gtest.h>

#include <sstream>

namespace infrarsi::client {
namespace {

TEST(TerminalSafeTest, ControlCharactersAreShownNotObeyed) {
  EXPECT_EQ(TerminalSafe("plain text\n\tindented"), "plain text\n\tindented");
  EXPECT_EQ(TerminalSafe("\x1b[1A\x1b[2Kreviewed"), "\\x1b[1A\\x1b[2Kreviewed");
  EXPECT_EQ(TerminalSafe("\x1b]0;title\x07"), "\\x1b]0;title\\x07");
  EXPECT_EQ(TerminalSafe(std::string("a\0b\r\x7f", 5)), "a\\x00b\\x0d\\x7f");
  // C1 controls in UTF-8 (CSI is U+009B), and UTF-8 that is no control.
  EXPECT_EQ(TerminalSafe("\xc2\x9b" "2J"), "\\u009b2J");
  EXPECT_EQ(TerminalSafe("caf\xc3\xa9 \xc2\xb5s \xe2\x9c\x93"), "caf\xc3\xa9 \xc2\xb5s \xe2\x9c\x93");
}

TEST(TerminalSafeTest, TheStreamBufferEscapesWhatPassesThroughIt) {
  std::ostringstream sink;
  TerminalSafeBuf buf(sink.rdbuf());
  std::ostream out(&buf);
  // A C1 control split across two writes is still caught.
  out << "ok \x1b[31mred" << '\xc2';
  out << '\x9b' << "J \xc2\xb5 end\n" << std::flush;
  EXPECT_EQ(sink.str(), "ok \\x1b[31mred\\u009bJ \xc2\xb5 end\n");
}

}  // namespace
}  // namespace infrarsi::client
