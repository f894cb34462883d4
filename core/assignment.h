// Assignment: what an agent is told when it leases a trial — the setting,
// the workload, and the executor's whole instructions (a replay's landscape,
// a simulated cluster, or a process's argv, source and protected hashes).
// Everything comes from the session's frozen spec: nothing an agent sends
// shapes it.
//
// Thread safety: a free function over its arguments.
#ifndef INFRARSI_CORE_ASSIGNMENT_H_
#define INFRARSI_CORE_ASSIGNMENT_H_

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "core/spec.h"
#include "infrarsi/v1/infrarsi.pb.h"
#include "storage/storage.h"

namespace infrarsi {

// Trial `t` (already given its lease: token, attempt) of `session`; a
// Slurm session's job leaves out `exclude_nodes` (the nodes noted as
// failing its trials, when its spec asks).
// An error when the trial's stored setting does not decode (nothing is leased then).
absl::StatusOr<v1::TrialAssignment> AssignmentFor(const storage::SessionRecord& session,
                                                  const SessionSpec& spec,
                                                  const storage::TrialRecord& t,
                                                  absl::Duration lease_timeout,
                                                  const std::vector<std::string>& exclude_nodes = {});

}  // namespace infrarsi

#endif  // INFRARSI_CORE_ASSIGNMENT_H_
