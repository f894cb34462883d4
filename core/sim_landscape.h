// The simulator's ground truth for a session spec: every setting of the knob
// space simulated without noise. What tuning benchmarks score against.
#ifndef INFRARSI_CORE_SIM_LANDSCAPE_H_
#define INFRARSI_CORE_SIM_LANDSCAPE_H_

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "core/optimizer.h"
#include "core/spec.h"
#include "models/cluster_sim.h"

namespace infrarsi {

struct SimPoint {
  Config config;
  models::sim::SimResult result;
};

struct SimLandscape {
  int64_t settings = 0;
  int64_t ok = 0, oom = 0, failed = 0;  // failed: launcher errors
  SimPoint baseline;
  // The `top` fastest settings that run, fastest first.
  std::vector<SimPoint> best;
};

// Enumerates the spec's whole space. FAILED_PRECONDITION unless the spec
// uses the sim executor; INVALID_ARGUMENT above `max_settings`.
absl::StatusOr<SimLandscape> EnumerateSimLandscape(const SessionSpec& spec, int top,
                                                   int64_t max_settings = 20'000'000);

// One setting of a sim spec as the search sees a finished trial of it,
// without noise: its status (ok, oom or failed), step time and peak memory.
// Precondition: the spec uses the sim executor. Thread-safe.
Observation SimulatedObservation(const SessionSpec& spec, const Config& config);

}  // namespace infrarsi

#endif  // INFRARSI_CORE_SIM_LANDSCAPE_H_
