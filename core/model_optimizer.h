// A model-based search strategy: a Bayesian linear model of log step time
// over one-hot knob values and their pairwise interactions, and a Bayesian
// logistic model of whether a setting runs at all (OOM, launcher errors,
// contract violations count as not running). Proposals maximise expected
// improvement times P(runs) over the untried settings (all of them in small
// spaces; a sample plus the neighbourhood of the best in large ones), and a
// batch keeps its picks apart.
//
// With priors, each knob value's main effect starts at its prior (time and
// fit) instead of zero. Not yet: priors from the bank or an LLM, revision
// reports, a censored memory model, memory-saver pairing, a stop rule.
#ifndef INFRARSI_CORE_MODEL_OPTIMIZER_H_
#define INFRARSI_CORE_MODEL_OPTIMIZER_H_

#include <optional>

#include "core/optimizer.h"
#include "core/priors.h"

namespace infrarsi {

class ModelOptimizer : public Optimizer {
 public:
  struct Options {
    // Settings proposed space-filling before the models take over.
    int initial_designs = 2;
    // Candidates scored per proposal in spaces larger than max_enumerate.
    int pool_size = 3000;
    int64_t max_enumerate = 20000;
    // Prior knob effects (deploy/priors.yaml); none: a cold start, every
    // effect centred on zero.
    std::optional<Priors> priors;
  };
  ModelOptimizer() : ModelOptimizer(Options()) {}
  explicit ModelOptimizer(Options options) : options_(options) {}

  std::vector<Config> Propose(const SessionSpec& spec, const std::vector<Observation>& history,
                              int n, uint64_t seed) override;
  std::string Name() const override { return options_.priors ? "model+priors" : "model"; }

 private:
  Options options_;
};

}  // namespace infrarsi

#endif  // INFRARSI_CORE_MODEL_OPTIMIZER_H_
