#include "core/script_flags.h"

#include <algorithm>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"

namespace infrarsi::script_flags {

bool In(const std::vector<std::string>& spellings, const std::string& flag) {
  return std::find(spellings.begin(), spellings.end(), flag) != spellings.end();
}

// The script's flags in `cmd` from `from` on.
std::vector<Arg> ParseArgs(const std::vector<std::string>& cmd, size_t from) {
  std::vector<Arg> out;
  for (size_t i = from; i < cmd.size(); ++i) {
    const std::string& w = cmd[i];
    if (!absl::StartsWith(w, "--") || w.size() < 3) continue;
    Arg a;
    a.flag_at = i;
    if (const size_t eq = w.find('='); eq != std::string::npos) {
      a.flag = w.substr(0, eq);
      a.value = w.substr(eq + 1);
      a.equals = true;
    } else if (i + 1 < cmd.size() && !absl::StartsWith(cmd[i + 1], "--") &&
               !absl::StrContains(cmd[i + 1], "?--")) {  // a drafted switch is a flag
      a.flag = w;
      a.value = cmd[i + 1];
      a.value_at = i + 1;
    } else {
      a.flag = w;
      a.bare = true;
    }
    out.push_back(a);
  }
  return out;
}

const Arg* FindArg(const std::vector<Arg>& args, const std::vector<std::string>& spellings) {
  for (const Arg& a : args) {
    if (In(spellings, a.flag)) return &a;
  }
  return nullptr;
}

std::optional<int64_t> IntOf(const Arg* a) {
  int64_t v = 0;
  if (a == nullptr || a->bare || !absl::SimpleAtoi(a->value, &v) || v < 0 || v > kMaxFlagInt) {
    return std::nullopt;
  }
  return v;
}

// Puts knob `name`'s placeholder where `a` is in `command`: the switch for
// a bare flag, else its value.
void PlaceKnob(const Arg& a, const std::string& name, std::vector<std::string>* command) {
  if (a.bare) {
    (*command)[a.flag_at] = absl::StrCat("{", name, "?", a.flag, "}");
  } else if (a.equals) {
    (*command)[a.flag_at] = absl::StrCat(a.flag, "={", name, "}");
  } else {
    (*command)[*a.value_at] = absl::StrCat("{", name, "}");
  }
}

// A knob name (an identifier) for a flag: "--odd.flag" (torchtitan's
// dotted overrides, found by fuzz_llm) and "--micro-batch" become
// "odd_flag" and "micro_batch"; a name that would start with a digit gets
// "k_" before it.
std::string KnobName(const std::string& flag) {
  std::string n(absl::StripPrefix(flag, "--"));
  for (char& c : n) {
    c = absl::ascii_tolower(c);
    if (!absl::ascii_isalnum(c) && c != '_') c = '_';
  }
  if (n.empty() || absl::ascii_isdigit(n[0])) n = "k_" + n;
  return n;
}

}  // namespace infrarsi::script_flags
