// The training process writes metrics lines, and it may be hostile:
// ParseMetricsLine must never crash on any line.
#include <cstddef>
#include <cstdint>
#include <string>

#include "client/agent/executors/metrics_line.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto line = infrarsi::client::ParseMetricsLine(std::string(reinterpret_cast<const char*>(data), size));
  if (line.ok() && !line->oom && line->step.step_time_s() < 0) __builtin_trap();  // negative times are refused
  return 0;
}
