// Session specs arrive over the network: ParseSpec must refuse bad input
// with an error, never crash, hang or run away with memory. Files are
// "readable" and hashed in memory so no input touches the filesystem.
#include <cstddef>
#include <cstdint>
#include <string>

#include "core/spec.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  infrarsi::SpecParseOptions o;
  o.spec_dir = "/specs";
  o.file_readable = [](const std::string&) { return true; };
  o.hash_file = [](const std::string&) -> absl::StatusOr<std::string> {
    return std::string(40, 'a');
  };
  auto spec = infrarsi::ParseSpec(std::string(reinterpret_cast<const char*>(data), size), o);
  if (spec.ok()) {
    // What parsed is consistent: the baseline sets every knob to one of its values.
    for (const auto& k : spec->knobs) {
      auto it = spec->baseline.find(k.name);
      if (it == spec->baseline.end()) __builtin_trap();
    }
    (void)infrarsi::ContractText(*spec);
    (void)spec->SpaceSize();
  }
  return 0;
}
