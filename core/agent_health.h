// Broken hosts: an agent whose trials fail where the same setting (the same
// session's config) succeeded on another agent. The failure belongs to the
// host (a missing library, a bad GPU), not to the setting, and the search
// must not learn from it. Pure: a function of a session's trials.
#ifndef INFRARSI_CORE_AGENT_HEALTH_H_
#define INFRARSI_CORE_AGENT_HEALTH_H_

#include <cstdint>
#include <string>
#include <vector>

#include "storage/storage.h"

namespace infrarsi {

// An agent with this many failures that the same setting survived on
// another agent is quarantined.
inline constexpr int kQuarantineAfterFailures = 2;

struct BrokenHost {
  std::string agent_id;
  std::vector<int64_t> trial_ids;  // its failures ("failed" or "timeout"), in id order
  std::string first_error;         // the first of them
};

// Agents with at least `min_failures` failed or timed-out trials among
// `trials` whose config finished ok on some other agent, by agent id.
std::vector<BrokenHost> FindBrokenHosts(const std::vector<storage::TrialRecord>& trials,
                                        int min_failures = 1);

// A Slurm node that failed this session's trials: it was among the nodes
// Slurm marked down in a job's failure (failed_nodes), or it ran a trial
// that failed or timed out where the same setting finished ok on nodes it
// was not among.
struct FailingNode {
  std::string node;
  std::vector<int64_t> trial_ids;  // in id order
  std::string first_error;
};

// The failing nodes among `trials` (their TrialRecord::slurm), by name.
std::vector<FailingNode> FindFailingNodes(const std::vector<storage::TrialRecord>& trials);

}  // namespace infrarsi

#endif  // INFRARSI_CORE_AGENT_HEALTH_H_
