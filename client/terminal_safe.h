// What the CLI prints from a server is text a server (or a tenant through
// it: a patch rationale, an agent's error) chose: ESC and OSC sequences in
// it would move the cursor, rewrite lines already printed ("reviewed by
// security"), retitle the window or write the clipboard. Everything the CLI
// writes passes through here first.
#ifndef INFRARSI_CLIENT_TERMINAL_SAFE_H_
#define INFRARSI_CLIENT_TERMINAL_SAFE_H_

#include <streambuf>
#include <string>

#include "absl/strings/string_view.h"

namespace infrarsi::client {

// `text` with every control character but newline and tab written out as
// a visible escape: C0 bytes and DEL as "\x1b", the C1 controls (U+0080 to
// U+009F, bytes C2 80 to C2 9F in UTF-8) as "\u009b". Everything else,
// UTF-8 included, passes unchanged. Pure.
std::string TerminalSafe(absl::string_view text);

// A stream buffer that writes TerminalSafe(what it is given) to `sink`,
// holding back a lone C2 byte until the next one says what it starts. Not
// thread-safe (as the stream it serves).
class TerminalSafeBuf : public std::streambuf {
 public:
  explicit TerminalSafeBuf(std::streambuf* sink) : sink_(sink) {}
  ~TerminalSafeBuf() override;

 protected:
  int_type overflow(int_type c) override;
  std::streamsize xsputn(const char* s, std::streamsize n) override;
  int sync() override;

 private:
  void Put(unsigned char c);
  std::streambuf* sink_;
  bool pending_c2_ = false;
};

// Routes std::cout and std::cerr through TerminalSafeBuf for the rest of
// the process. Call once, from main, before anything is printed.
void InstallTerminalSafeOutput();

}  // namespace infrarsi::client

#endif  // INFRARSI_CLIENT_TERMINAL_SAFE_H_
