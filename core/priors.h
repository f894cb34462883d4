// Prior beliefs about launch knobs (deploy/priors.yaml, optionally blended
// with an LLM's answer): per knob value, the expected effect on log step time
// and on log peak memory, relative to the baseline, with uncertainties.
#ifndef INFRARSI_CORE_PRIORS_H_
#define INFRARSI_CORE_PRIORS_H_

#include <map>
#include <string>

#include "absl/status/statusor.h"
#include "core/spec.h"

namespace infrarsi {

struct Effect {
  double time = 0, time_sd = 0.5;  // log step time
  double mem = 0, mem_sd = 0.5;    // log peak memory
};

struct Priors {
  std::map<std::string, std::map<std::string, Effect>> values;  // knob -> value -> effect
  std::map<std::string, Effect> per_doubling;                   // numeric knobs
  // The effect of `knob` = `value` relative to the baseline's value.
  Effect EffectOf(const SessionSpec& spec, const std::string& knob, const std::string& value) const;
};

// Parses the priors file (YAML, or the same structure as JSON).
// INVALID_ARGUMENT names the bad field.
absl::StatusOr<Priors> ParsePriors(const std::string& yaml);

// The priors as JSON that ParsePriors reads back exactly.
std::string EncodePriorsJson(const Priors& priors);

// Checks priors proposed for one session (an LLM's answer) strictly: every
// knob and value must be in the spec's space (per_doubling only for numeric
// knobs), effects within +-2 (a factor of 7.4) and uncertainties in
// (0, 3]. INVALID_ARGUMENT names the first offending field.
absl::Status ValidatePriorsFor(const Priors& priors, const SessionSpec& spec);

// The effect of every non-baseline value of the spec's knobs under `base`,
// combined with `other` by precision weighting (the two sources treated as
// independent measurements). The result holds explicit values only.
Priors BlendPriors(const Priors& base, const Priors& other, const SessionSpec& spec);

}  // namespace infrarsi

#endif  // INFRARSI_CORE_PRIORS_H_
