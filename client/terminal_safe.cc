#include "client/terminal_safe.h"

#include <iostream>

#include "absl/strings/str_format.h"
#include "core/apply_plan.h"

namespace infrarsi::client {
namespace {

bool IsC0(unsigned char c) { return (c < 0x20 && c != '\n' && c != '\t') || c == 0x7f; }

}  // namespace

std::string TerminalSafe(absl::string_view text) { return ShowControlChars(text); }

TerminalSafeBuf::~TerminalSafeBuf() { sync(); }

void TerminalSafeBuf::Put(unsigned char c) {
  if (pending_c2_) {
    pending_c2_ = false;
    if (c >= 0x80 && c <= 0x9f) {
      const std::string e = absl::StrFormat("\\u%04x", c);
      sink_->sputn(e.data(), static_cast<std::streamsize>(e.size()));
      return;
    }
    sink_->sputc(static_cast<char>(0xc2));
  }
  if (c == 0xc2) {
    pending_c2_ = true;
  } else if (IsC0(c)) {
    const std::string e = absl::StrFormat("\\x%02x", c);
    sink_->sputn(e.data(), static_cast<std::streamsize>(e.size()));
  } else {
    sink_->sputc(static_cast<char>(c));
  }
}

TerminalSafeBuf::int_type TerminalSafeBuf::overflow(int_type c) {
  if (traits_type::eq_int_type(c, traits_type::eof())) return traits_type::not_eof(c);
  Put(static_cast<unsigned char>(traits_type::to_char_type(c)));
  return c;
}

std::streamsize TerminalSafeBuf::xsputn(const char* s, std::streamsize n) {
  for (std::streamsize i = 0; i < n; ++i) Put(static_cast<unsigned char>(s[i]));
  return n;
}

int TerminalSafeBuf::sync() {
  if (pending_c2_) {
    pending_c2_ = false;
    sink_->sputc(static_cast<char>(0xc2));
  }
  return sink_->pubsync();
}

void InstallTerminalSafeOutput() {
  // Leaked on purpose: the streams use them until the process exits.
  static TerminalSafeBuf* out = new TerminalSafeBuf(std::cout.rdbuf());
  static TerminalSafeBuf* err = new TerminalSafeBuf(std::cerr.rdbuf());
  std::cout.rdbuf(out);
  std::cerr.rdbuf(err);
}

}  // namespace infrarsi::client
