// What the search can know about a setting before running it: whether the
// launcher accepts it, a textbook memory estimate, and the device's memory.
// The simulator executor's specs carry a model shape and cluster, and a
// real job's spec may declare one (workload.shape): both get the textbook
// estimates; the launch rules refuse settings of the simulator's and of a
// real job that says its launcher has them (ShapeSpec::launch_rules), and
// are a hint for other real jobs with a shape (rules_refuse_at). Every spec
// naming a catalog GPU gets a capacity.
#ifndef INFRARSI_CORE_PLANNER_H_
#define INFRARSI_CORE_PLANNER_H_

#include <functional>
#include <string>

#include "core/spec.h"

namespace infrarsi {

struct Planner {
  // Usable device memory per GPU in GiB; 0: unknown (OOMs are then learned
  // as plain failures, not as censored memory observations).
  double capacity_gib = 0;
  // "" when the setting can launch, else the launcher's error. Null: no
  // rules known.
  std::function<std::string(const Config&)> launch_check;
  // Analytic peak memory per GPU in GiB. Null: none.
  std::function<double(const Config&)> memory_estimate_gib;
  // Analytic step time in seconds. Null: none.
  std::function<double(const Config&)> time_estimate_s;
  // The same two for the setting at `index` of the spec's space (ConfigAt),
  // without building a Config: a proposal checks thousands of settings.
  // Null exactly when the Config versions are.
  std::function<bool(int64_t index)> launches_at;
  std::function<double(int64_t index)> memory_estimate_gib_at;
  std::function<double(int64_t index)> time_estimate_s_at;
  // The memory estimate with the share of it that is activations (0 to 1),
  // by Config and by index, in one computation (a proposal predicts
  // thousands); null where unknown (then both). The memory model learns how
  // far off that part is on its own.
  struct MemoryEstimate {
    double gib = 0;
    double activation_share = 0;
  };
  std::function<MemoryEstimate(const Config&)> memory_estimate_parts;
  std::function<MemoryEstimate(int64_t index)> memory_estimate_parts_at;
  // The setting at `index` or, where some of its knobs cannot change the
  // step time, one fixed setting of the same step time (its
  // representative): at one data-parallel rank (DP x CP = 1) nothing is
  // sharded, gathered or reduced across ranks, so dist_opt,
  // overlap_param_gather, overlap_grad_reduce, bucket_mb and
  // grad_reduce_bf16 (the reduction's dtype) take the baseline's values
  // (not under ZeRO-2/3 sharding, which the simulator charges per bucket
  // even there); and without tensor parallelism (tp 1) seq_par does too:
  // sequence parallelism splits activations across the TP group, and
  // Megatron turns it off at tp 1. Peak memory may still differ (gradient buckets and their
  // dtype), so a representative whose only trials ran out of memory stays
  // open.
  // Null: no such rules.
  std::function<int64_t(int64_t index)> step_time_representative_at;
  // Where a real job declares its model shape but not its launcher's rules
  // (ShapeSpec::launch_rules false): whether the simulator's rules would
  // refuse the setting at `index`. A hint, not a verdict: the launch model
  // starts such a setting's chance to launch low and learns from the runs
  // how far the job's launcher follows them. Null: none (the rules are
  // verdicts, through launch_check, or unknown).
  std::function<bool(int64_t index)> rules_refuse_at;
};

// Precondition: `spec` passed ParseSpec. The functions hold a copy of what
// they need, so the result may outlive `spec`.
Planner PlannerFor(const SessionSpec& spec);

}  // namespace infrarsi

#endif  // INFRARSI_CORE_PLANNER_H_
