// Prior beliefs about launch knobs (deploy/priors.yaml): per knob value, the
// expected effect on log step time and on the log-odds that a setting runs,
// relative to the baseline, with uncertainties.
#ifndef INFRARSI_CORE_PRIORS_H_
#define INFRARSI_CORE_PRIORS_H_

#include <map>
#include <string>

#include "absl/status/statusor.h"
#include "core/spec.h"

namespace infrarsi {

struct Effect {
  double time = 0, time_sd = 0.5;  // log step time
  double fit = 0, fit_sd = 2.0;    // log-odds of running
};

struct Priors {
  std::map<std::string, std::map<std::string, Effect>> values;  // knob -> value -> effect
  std::map<std::string, Effect> per_doubling;                   // numeric knobs
  // The effect of `knob` = `value` relative to the baseline's value.
  Effect EffectOf(const SessionSpec& spec, const std::string& knob, const std::string& value) const;
};

// Parses the priors file. INVALID_ARGUMENT names the bad field.
absl::StatusOr<Priors> ParsePriors(const std::string& yaml);

}  // namespace infrarsi

#endif  // INFRARSI_CORE_PRIORS_H_
