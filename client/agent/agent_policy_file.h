// The agent operator's policy file (infrarsi-agent --policy FILE), YAML:
//
//   executors: [replay, sim, process]   # process runs tenants' code
//   teams: [vision]                     # whose trials it runs (default: any)
//   commands: ["python3 train.py"]      # command prefixes trials may run
//   allow_any_command: false
//   workdir_root: /srv/jobs             # trials' workdirs must be inside
//   run_as: infrarsi-trials             # the user trials run as
//   env_allow: [HF_HOME]                # more environment names passed on
//   slurm:                              # the slurm executor's cluster and placement
//     gpus_per_node: 8
//     max_nodes: 4
//     shared_dir: /shared/infrarsi      # on every node at the same path
//     partition: gpu                    # default for specs that name none
//     partitions: [gpu, debug]          # others specs may name
//     account: llm
//     accounts: [llm, eval]
//     qos: [high]
//     max_time_min: 240
//     allow_options: [--constraint]     # extra sbatch option names specs may pass
//     options: [--constraint=h200]      # options every job gets
//     max_pending_h: 24
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
  // The trial sandbox: "on" or "off" (unset: the flag's, on), and the
  // pool of trial ids ("FIRST-LAST"; checked where it is used).
  std::optional<std::string> sandbox;
  std::string trial_uids;
  std::vector<std::string> env_allow;
  // The slurm section; unset fields keep the flags' defaults.
  struct Slurm {
    std::optional<int> gpus_per_node, max_nodes, max_time_min;
    std::optional<double> max_pending_h;
    std::optional<std::string> shared_dir, partition, account;
    std::optional<std::vector<std::string>> partitions, accounts, qos, allow_options, options;
  } slurm;
};

absl::StatusOr<AgentPolicy> ParseAgentPolicy(const std::string& yaml);
absl::StatusOr<AgentPolicy> LoadAgentPolicy(const std::string& path);

}  // namespace infrarsi::client

#endif  // INFRARSI_CLIENT_AGENT_AGENT_POLICY_FILE_H_
