// The metrics-line format a training process writes to $INFRARSI_METRICS:
// one JSON object per optimizer step,
//   {"step": 3, "loss": 7.91, "tokens": 32768, "step_time_s": 0.61,
//    "peak_mem_gib": 27.4, "phases": {"fwd_bwd_s": 0.6}, "warmup": false,
//    "data_seed": 1234, "dtype": "bf16", "optimizer_steps": 1}
// (the last three optional, written by the harness)
// or an event line {"event": "oom"} when the process ran out of memory.
#ifndef INFRARSI_CLIENT_AGENT_EXECUTORS_METRICS_LINE_H_
#define INFRARSI_CLIENT_AGENT_EXECUTORS_METRICS_LINE_H_

#include <string>

#include "absl/status/statusor.h"
#include "infrarsi/v1/infrarsi.pb.h"

namespace infrarsi::client {

inline constexpr size_t kMaxMetricsLineBytes = 64 * 1024;

struct MetricsLine {
  bool oom = false;  // an {"event": "oom"} line
  v1::StepMetrics step;  // set when !oom
};

// Parses one line. INVALID_ARGUMENT names the missing or bad field.
absl::StatusOr<MetricsLine> ParseMetricsLine(const std::string& line);

}  // namespace infrarsi::client

#endif  // INFRARSI_CLIENT_AGENT_EXECUTORS_METRICS_LINE_H_
