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
  return p;
}

}  // namespace infrarsi
