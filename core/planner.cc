#include "core/planner.h"

#include <memory>

#include "models/cluster_sim.h"

namespace infrarsi {

Planner PlannerFor(const SessionSpec& spec) {
  namespace ms = models::sim;
  Planner p;
  if (const ms::GpuSpec* g = ms::FindGpu(spec.gpu); g != nullptr) p.capacity_gib = g->memory_gib;
  if (spec.executor_kind != SessionSpec::ExecutorKind::kSim) return p;
  p.capacity_gib = spec.sim.cluster.gpu.memory_gib;
  auto s = std::make_shared<const SessionSpec>(spec);
  p.launch_check = [s](const Config& c) {
    return ms::LaunchCheck(s->sim.model, s->sim.cluster, SimKnobs(*s, c));
  };
  p.memory_estimate_gib = [s](const Config& c) {
    return ms::TextbookMemoryGib(s->sim.model, s->sim.cluster, SimKnobs(*s, c));
  };
  // Knobs at an index: the fixed values, then each knob's value by digit
  // (each knob sets its own field, so the order does not matter).
  auto base = std::make_shared<const ms::LaunchKnobs>(SimKnobs(*s, {}));
  auto knobs_at = [s, base](int64_t index) {
    ms::LaunchKnobs k = *base;
    std::string unused;
    for (auto it = s->knobs.rbegin(); it != s->knobs.rend(); ++it) {
      const int64_t radix = static_cast<int64_t>(it->values.size());
      ms::SetKnob(&k, it->name, it->values[static_cast<size_t>(index % radix)], &unused);
      index /= radix;
    }
    return k;
  };
  p.launches_at = [s, knobs_at](int64_t index) {
    return ms::LaunchCheck(s->sim.model, s->sim.cluster, knobs_at(index)).empty();
  };
  p.memory_estimate_gib_at = [s, knobs_at](int64_t index) {
    return ms::TextbookMemoryGib(s->sim.model, s->sim.cluster, knobs_at(index));
  };
  return p;
}

}  // namespace infrarsi
