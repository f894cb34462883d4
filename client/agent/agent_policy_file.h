// The agent operator's policy file (infrarsi-agent --policy FILE), YAML:
//
//   executors: [replay, sim, process]   # process runs tenants' code
//   teams: [vision]                     # whose trials it runs (default: any)
//   commands: ["python3 train.py"]      # command prefixes trials may run
//   allow_any_command: false
//   workdir_root: /srv/jobs             # trials' workdirs must be inside
//   run_as: infrarsi-trials             # the user trials run as
//   env_allow: [HF_HOME]                # more environment names passed on
//
// Every key is optional; unknown keys are refused, naming the field.
#ifndef INFRARSI_CLIENT_AGENT_AGENT_POLICY_FILE_H_
#define INFRARSI_CLIENT_AGENT_AGENT_POLICY_FILE_H_

#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace infrarsi::client {

struct AgentPolicy {
  std::optional<std::string> executors;  // comma-separated
  std::vector<std::string> teams;
  std::vector<std::string> commands;
  bool allow_any_command = false;
  std::string workdir_root;
  std::string run_as;
  std::vector<std::string> env_allow;
};

absl::StatusOr<AgentPolicy> ParseAgentPolicy(const std::string& yaml);
absl::StatusOr<AgentPolicy> LoadAgentPolicy(const std::string& path);

}  // namespace infrarsi::client

#endif  // INFRARSI_CLIENT_AGENT_AGENT_POLICY_FILE_H_
