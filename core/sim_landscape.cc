#include "core/sim_landscape.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "core/optimizer.h"

namespace infrarsi {

absl::StatusOr<SimLandscape> EnumerateSimLandscape(const SessionSpec& spec, int top,
                                                   int64_t max_settings) {
  namespace ms = models::sim;
  if (!spec.Executor().simulated) {
    return absl::FailedPreconditionError("executor: the spec does not use the sim executor");
  }
  const int64_t n = spec.SpaceSize();
  if (n > max_settings) {
    return absl::InvalidArgumentError(
        absl::StrCat("knobs: the space has ", n, " settings, more than the ", max_settings,
                     " this enumeration allows"));
  }
  SimLandscape out;
  out.settings = n;
  auto faster = [](const SimPoint& a, const SimPoint& b) {
    return a.result.step_time_s < b.result.step_time_s;
  };
  for (int64_t i = 0; i < n; ++i) {
    SimPoint p;
    p.config = ConfigAt(spec, i);
    p.result = ms::Simulate(spec.sim.model, spec.sim.cluster, SimKnobs(spec, p.config));
    switch (p.result.status) {
      case ms::Status::kOk: ++out.ok; break;
      case ms::Status::kOom: ++out.oom; break;
      case ms::Status::kLauncherError: ++out.failed; break;
    }
    if (p.result.status != ms::Status::kOk || top <= 0) continue;
    // Keep the `top` fastest in a small sorted vector.
    if (static_cast<int>(out.best.size()) < top || faster(p, out.best.back())) {
      out.best.insert(std::upper_bound(out.best.begin(), out.best.end(), p, faster), p);
      if (static_cast<int>(out.best.size()) > top) out.best.pop_back();
    }
  }
  out.baseline.config = spec.baseline;
  out.baseline.result =
      ms::Simulate(spec.sim.model, spec.sim.cluster, SimKnobs(spec, spec.baseline));
  return out;
}

Observation SimulatedObservation(const SessionSpec& spec, const Config& config) {
  const models::sim::SimResult r =
      models::sim::Simulate(spec.sim.model, spec.sim.cluster, SimKnobs(spec, config));
  Observation o;
  o.config = config;
  o.status = models::sim::StatusName(r.status);
  o.step_time_s = r.step_time_s;
  o.peak_mem_gib = r.peak_mem_gib;
  return o;
}

}  // namespace infrarsi
