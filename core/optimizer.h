// Search strategies behind one interface, so the search issue can replace
// the plain strategy without touching scheduling.
#ifndef INFRARSI_CORE_OPTIMIZER_H_
#define INFRARSI_CORE_OPTIMIZER_H_

#include <cstdint>
#include <string>
#include <vector>

#include "core/spec.h"

namespace infrarsi {

// One trial the optimizer may learn from. `status` is a trial status
// ("ok", "oom", ...; "queued"/"leased"/"running" for trials in flight).
struct Observation {
  Config config;
  std::string status;
  double step_time_s = 0;
  double peak_mem_gib = 0;
};

class Optimizer {
 public:
  virtual ~Optimizer() = default;
  // Proposes up to `n` settings of `spec`'s space that are in no observation
  // of `history` (finished or in flight): no setting is run twice. Returns
  // fewer, possibly none, when the space is exhausted. `seed` makes the
  // proposal repeatable. Thread-compatible: callers serialise calls.
  virtual std::vector<Config> Propose(const SessionSpec& spec,
                                      const std::vector<Observation>& history, int n,
                                      uint64_t seed) = 0;
  virtual std::string Name() const = 0;
};

// Uniform random sampling without repeats.
class RandomOptimizer : public Optimizer {
 public:
  std::vector<Config> Propose(const SessionSpec& spec, const std::vector<Observation>& history,
                              int n, uint64_t seed) override;
  std::string Name() const override { return "random"; }
};

// The setting with mixed-radix index `index` (knobs in spec order).
// Precondition: 0 <= index < spec.SpaceSize().
Config ConfigAt(const SessionSpec& spec, int64_t index);

}  // namespace infrarsi

#endif  // INFRARSI_CORE_OPTIMIZER_H_
