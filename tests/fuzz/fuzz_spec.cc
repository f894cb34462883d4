// Session specs arrive over the network: ParseSpec must refuse bad input
// with an error, never crash, hang or run away with memory. No input
// touches the filesystem: the parser reads none, and files are "stored".
#include <cstddef>
#include <cstdint>
#include <string>

#include "core/spec.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  infrarsi::SpecParseOptions o;
  o.spec_dir = "/specs";
  o.stored = true;  // file fields need no content: every branch is reachable
  o.may_name_urls = true;
  o.team_known = true;
  o.blob_hash = [](const std::string&) { return std::string(40, 'a'); };
  o.repository_url = [](const std::string& name) -> absl::StatusOr<std::string> {
    return "/repos/" + name;
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
