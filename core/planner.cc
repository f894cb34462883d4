#include "core/planner.h"

#include <memory>

#include "core/optimizer.h"
#include "models/cluster_sim.h"

namespace infrarsi {

Planner PlannerFor(const SessionSpec& spec) {
  namespace ms = models::sim;
  Planner p;
  if (const ms::GpuSpec* g = ms::FindGpu(spec.gpu); g != nullptr) p.capacity_gib = g->memory_gib;
  if (!spec.Executor().simulated) {
    if (spec.patch_conflicts.empty()) return p;
    // Conflicting patches are never combined.
    auto s = std::make_shared<const SessionSpec>(spec);
    p.launch_check = [s](const Config& c) { return s->PatchConflict(c); };
    p.launches_at = [s](int64_t index) { return s->PatchConflict(ConfigAt(*s, index)).empty(); };
    return p;
  }
  p.capacity_gib = spec.sim.cluster.gpu.memory_gib;
  auto s = std::make_shared<const SessionSpec>(spec);
  p.launch_check = [s](const Config& c) {
    return ms::LaunchCheck(s->sim.model, s->sim.cluster, SimKnobs(*s, c));
  };
  p.memory_estimate_gib = [s](const Config& c) {
    return ms::TextbookMemoryGib(s->sim.model, s->sim.cluster, SimKnobs(*s, c));
  };
  p.time_estimate_s = [s](const Config& c) {
    return ms::TextbookStepTimeS(s->sim.model, s->sim.cluster, SimKnobs(*s, c));
  };
  // Knobs at an index: the fixed values, then each knob's value by digit
  // (each knob sets its own field, so the order does not matter). Values
  // are parsed once here; ParseSpec has validated them.
  auto base = std::make_shared<const ms::LaunchKnobs>(SimKnobs(*s, {}));
  auto setters = std::make_shared<std::vector<std::vector<ms::KnobSetter>>>();
  for (const Knob& k : s->knobs) {
    std::vector<ms::KnobSetter> row;
    for (const std::string& v : k.values) {
      std::string unused;
      ms::KnobSetter set = ms::CompileKnob(k.name, v, &unused);
      row.push_back(set ? std::move(set) : [](ms::LaunchKnobs*) {});
    }
    setters->push_back(std::move(row));
  }
  auto knobs_at = [base, setters](int64_t index) {
    ms::LaunchKnobs k = *base;
    for (size_t i = setters->size(); i-- > 0;) {
      const auto& row = (*setters)[i];
      const int64_t radix = static_cast<int64_t>(row.size());
      row[static_cast<size_t>(index % radix)](&k);
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
  p.time_estimate_s_at = [s, knobs_at](int64_t index) {
    return ms::TextbookStepTimeS(s->sim.model, s->sim.cluster, knobs_at(index));
  };
  return p;
}

}  // namespace infrarsi
