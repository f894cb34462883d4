// A training script's command-line flags as the draft reads them
// ("--f v", "--f=v", a bare "--f"), and how a knob takes a flag's place in
// the command. Pure functions over the command's words.
#ifndef INFRARSI_CORE_SCRIPT_FLAGS_H_
#define INFRARSI_CORE_SCRIPT_FLAGS_H_

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace infrarsi::script_flags {

// Whether `flag` is one of `spellings`.
bool In(const std::vector<std::string>& spellings, const std::string& flag);

// One flag of the script's arguments: where it is and what it says.
struct Arg {
  std::string flag;
  size_t flag_at = 0;              // index in the command
  std::optional<size_t> value_at;  // the value's index ("--f v"); none for "--f=v" or bare
  std::string value;
  bool equals = false;  // "--f=v"
  bool bare = false;
};

// The script's flags in `cmd` from `from` on (a drafted switch
// "{knob?--f}" counts as a flag, not as the previous flag's value).
std::vector<Arg> ParseArgs(const std::vector<std::string>& cmd, size_t from);
// The first of `args` spelled one of `spellings`, or null.
const Arg* FindArg(const std::vector<Arg>& args, const std::vector<std::string>& spellings);

// Sizes and counts the draft computes with; anything larger is no size
// (and no product of a few of them overflows).
inline constexpr int64_t kMaxFlagInt = int64_t{1} << 40;
// The flag's value as a size in [0, kMaxFlagInt]; none for a bare flag,
// a non-number or one out of range (and for a null `a`).
std::optional<int64_t> IntOf(const Arg* a);

// Puts knob `name`'s placeholder where `a` is in `command`: the switch for
// a bare flag ("{name?--f}"), else its value ("--f={name}", "{name}").
void PlaceKnob(const Arg& a, const std::string& name, std::vector<std::string>* command);

// A knob name (an identifier) for a flag: "--odd.flag" (torchtitan's
// dotted overrides) and "--micro-batch" become "odd_flag" and
// "micro_batch"; a name that would start with a digit gets "k_" before it.
std::string KnobName(const std::string& flag);

}  // namespace infrarsi::script_flags

#endif  // INFRARSI_CORE_SCRIPT_FLAGS_H_
