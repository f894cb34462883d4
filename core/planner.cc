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
  p.memory_estimate_parts = [s](const Config& c) {
    const ms::TextbookMemoryParts parts = ms::TextbookMemory(s->sim.model, s->sim.cluster, SimKnobs(*s, c));
    return Planner::MemoryEstimate{parts.total_gib, parts.activation_share()};
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
    return ms::Launches(s->sim.model, s->sim.cluster, knobs_at(index));
  };
  p.memory_estimate_gib_at = [s, knobs_at](int64_t index) {
    return ms::TextbookMemoryGib(s->sim.model, s->sim.cluster, knobs_at(index));
  };
  p.memory_estimate_parts_at = [s, knobs_at](int64_t index) {
    const ms::TextbookMemoryParts parts = ms::TextbookMemory(s->sim.model, s->sim.cluster, knobs_at(index));
    return Planner::MemoryEstimate{parts.total_gib, parts.activation_share()};
  };
  p.time_estimate_s_at = [s, knobs_at](int64_t index) {
    return ms::TextbookStepTimeS(s->sim.model, s->sim.cluster, knobs_at(index));
  };
  // Knobs that act only across data-parallel ranks, by position; their
  // representative values are the baseline's.
  std::vector<size_t> across_ranks;
  for (size_t i = 0; i < s->knobs.size(); ++i) {
    const std::string& n = s->knobs[i].name;
    if (n == "dist_opt" || n == "overlap_param_gather" || n == "overlap_grad_reduce" || n == "bucket_mb" ||
        n == "grad_reduce_bf16") {
      across_ranks.push_back(i);
    }
  }
  // Sequence parallelism splits activations across the tensor-parallel
  // group: without one (tp 1) it changes nothing (Megatron turns it off).
  const Knob* seq_par_knob = s->FindKnob("seq_par");
  const int seq_par = seq_par_knob ? static_cast<int>(seq_par_knob - s->knobs.data()) : -1;
  const int64_t base_index = IndexOf(*s, s->baseline);
  if ((!across_ranks.empty() || seq_par >= 0) && base_index >= 0) {
    const Space space(*s);
    const int world = s->sim.cluster.world();
    p.step_time_representative_at = [space, base = base_index, world, across_ranks, seq_par,
                                     knobs_at](int64_t index) {
      const ms::LaunchKnobs k = knobs_at(index);
      int64_t rep = index;
      if (seq_par >= 0 && k.tp == 1) {
        rep = space.With(rep, static_cast<size_t>(seq_par), space.Digit(base, static_cast<size_t>(seq_par)));
      }
      if (world / std::max(1, k.tp * k.pp) != 1) return rep;  // DP x CP ranks
      // ZeRO-2/3 reduce-scatter and gather per bucket even over one rank.
      if (k.sharding >= ms::Sharding::kZero2) return rep;
      for (size_t knob : across_ranks) rep = space.With(rep, knob, space.Digit(base, knob));
      return rep;
    };
  }
  return p;
}

}  // namespace infrarsi
