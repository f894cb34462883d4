#include "core/planner.h"

#include <map>
#include <memory>

#include "core/optimizer.h"
#include "models/cluster_sim.h"

namespace infrarsi {

Planner PlannerFor(const SessionSpec& spec) {
  namespace ms = models::sim;
  Planner p;
  if (const ms::GpuSpec* g = ms::FindGpu(spec.gpu); g != nullptr) p.capacity_gib = g->memory_gib;
  const bool simulated = spec.Executor().simulated;
  if (!simulated && !spec.shape) {
    if (spec.patch_conflicts.empty()) return p;
    // Conflicting patches are never combined.
    auto s = std::make_shared<const SessionSpec>(spec);
    p.launch_check = [s](const Config& c) { return s->PatchConflict(c); };
    p.launches_at = [s](int64_t index) { return s->PatchConflict(ConfigAt(*s, index)).empty(); };
    return p;
  }
  // The model, cluster and held knobs the estimates read: the simulator's,
  // or those a real job declares (workload.shape).
  struct Shape {
    ms::ModelShape model;
    ms::ClusterShape cluster;
    Config fixed;
  };
  auto sh = std::make_shared<const Shape>(simulated ? Shape{spec.sim.model, spec.sim.cluster, spec.sim.fixed}
                                                    : Shape{spec.shape->model, spec.shape->cluster, spec.shape->fixed});
  p.capacity_gib = sh->cluster.gpu.memory_gib;
  auto s = std::make_shared<const SessionSpec>(spec);
  // The simulator knob each searched knob is read as ("" for none): its own
  // name in the simulator's spec, a real job's declared mapping else.
  auto sim_name = std::make_shared<std::map<std::string, std::string>>();
  for (const Knob& k : spec.knobs) (*sim_name)[k.name] = simulated ? k.name : spec.shape->SimKnobOf(k.name);
  // A setting's simulator knobs: the held ones, then the setting's (a knob
  // that is no simulator knob changes nothing; ParseSpec validated those
  // that are).
  // (A simulator spec's setting from elsewhere, a related session's with
  // other knobs, sets what it names, as the simulator would run it.)
  auto sim_value = [s, simulated](const std::string& name, const std::string& value) {
    return simulated ? NormalizedKnobValue(value) : s->shape->SimValueOf(name, value);
  };
  auto knobs_of = [sh, sim_name, simulated, sim_value](const Config& c) {
    ms::LaunchKnobs k;
    std::string unused;
    for (const auto& [name, value] : sh->fixed) ms::SetKnob(&k, name, value, &unused);
    for (const auto& [name, value] : c) {
      const auto it = sim_name->find(name);
      const std::string as = it != sim_name->end() ? it->second : simulated ? name : std::string();
      if (!as.empty()) ms::SetKnob(&k, as, sim_value(name, value), &unused);
    }
    return k;
  };
  // A real job's launcher is the simulator's only where its spec says so
  // (ShapeSpec::launch_rules: its held parallel sizes are then in
  // `fixed`); else only the patch conflicts refuse a setting and the
  // launch model learns the rest from the runs.
  const bool rules = simulated || spec.shape->launch_rules;
  if (rules) {
    p.launch_check = [s, sh, knobs_of](const Config& c) {
      std::string why = ms::LaunchCheck(sh->model, sh->cluster, knobs_of(c));
      return why.empty() ? s->PatchConflict(c) : why;
    };
  } else if (!spec.patch_conflicts.empty()) {
    p.launch_check = [s](const Config& c) { return s->PatchConflict(c); };
    p.launches_at = [s](int64_t index) { return s->PatchConflict(ConfigAt(*s, index)).empty(); };
  }
  p.memory_estimate_gib = [sh, knobs_of](const Config& c) {
    return ms::TextbookMemoryGib(sh->model, sh->cluster, knobs_of(c));
  };
  p.memory_estimate_parts = [sh, knobs_of](const Config& c) {
    const ms::TextbookMemoryParts parts = ms::TextbookMemory(sh->model, sh->cluster, knobs_of(c));
    return Planner::MemoryEstimate{parts.total_gib, parts.activation_share()};
  };
  p.time_estimate_s = [sh, knobs_of](const Config& c) {
    return ms::TextbookStepTimeS(sh->model, sh->cluster, knobs_of(c));
  };
  // Knobs at an index: the fixed values, then each knob's value by digit
  // (each knob sets its own field, so the order does not matter). Values
  // are parsed once here; ParseSpec has validated them.
  auto base = std::make_shared<const ms::LaunchKnobs>(knobs_of({}));
  auto setters = std::make_shared<std::vector<std::vector<ms::KnobSetter>>>();
  for (const Knob& k : s->knobs) {
    std::vector<ms::KnobSetter> row;
    for (const std::string& v : k.values) {
      std::string unused;
      const std::string& as = sim_name->at(k.name);
      ms::KnobSetter set = as.empty() ? nullptr : ms::CompileKnob(as, sim_value(k.name, v), &unused);
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
  if (rules) {
    const bool patches = !s->patch_conflicts.empty();
    p.launches_at = [s, sh, knobs_at, patches](int64_t index) {
      return ms::Launches(sh->model, sh->cluster, knobs_at(index)) &&
             (!patches || s->PatchConflict(ConfigAt(*s, index)).empty());
    };
  } else {
    p.rules_refuse_at = [sh, knobs_at](int64_t index) {
      return !ms::Launches(sh->model, sh->cluster, knobs_at(index));
    };
  }
  p.memory_estimate_gib_at = [sh, knobs_at](int64_t index) {
    return ms::TextbookMemoryGib(sh->model, sh->cluster, knobs_at(index));
  };
  p.memory_estimate_parts_at = [sh, knobs_at](int64_t index) {
    const ms::TextbookMemoryParts parts = ms::TextbookMemory(sh->model, sh->cluster, knobs_at(index));
    return Planner::MemoryEstimate{parts.total_gib, parts.activation_share()};
  };
  p.time_estimate_s_at = [sh, knobs_at](int64_t index) {
    return ms::TextbookStepTimeS(sh->model, sh->cluster, knobs_at(index));
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
  // Only for the simulator, whose rules these are.
  if (simulated && (!across_ranks.empty() || seq_par >= 0) && base_index >= 0) {
    const Space space(*s);
    const int world = sh->cluster.world();
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
