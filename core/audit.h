// What a session's report audits: which source files the promoted change
// touches (each shown inside the editable scope) and what failed trials
// cost, so a team sees what its exploration paid for. Pure functions.
#ifndef INFRARSI_CORE_AUDIT_H_
#define INFRARSI_CORE_AUDIT_H_

#include <string>
#include <vector>

#include "core/spec.h"

namespace infrarsi {

// "oom", "crash", "timeout", "launcher" (the setting or its patches could
// not be started) or "violation:<kind>"; "" for a trial that did not fail.
std::string FailureClass(const std::string& status, const std::string& violation,
                         const std::string& error);

struct FailedTrialCost {
  std::string status, violation, error;
  Config config;
  double cost_s = 0;  // wall seconds of the trial
};

struct FailureCost {
  std::string failure_class;
  std::string knob;   // empty: the whole class; "patch" for a patch switched on
  std::string value;  // the knob's value, or the patch's name
  int trials = 0;
  double gpu_s = 0;   // wall seconds x the session's GPUs
};

// Per failure class, the total; then, within it, per knob value that
// differs from the baseline and per patch switched on, most costly first.
// Trials that did not fail are ignored.
std::vector<FailureCost> FailureCosts(const SessionSpec& spec,
                                      const std::vector<FailedTrialCost>& trials);

struct SourcePathAudit {
  std::string path;
  std::string patch;
  std::string editable_glob;  // the first glob allowing it; empty: none does
};

// Every file the patches `config` switches on change, in patch order.
std::vector<SourcePathAudit> AuditSourcePaths(const SessionSpec& spec, const Config& config);

}  // namespace infrarsi

#endif  // INFRARSI_CORE_AUDIT_H_
