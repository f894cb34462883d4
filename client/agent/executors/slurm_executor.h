// Runs a process trial as one Slurm job, from an agent on a submit (login)
// host. The job is sized from the session's hardware (nodes = GPUs /
// GPUs per node, --gres=gpu:N per node), placed by the spec's
// executor.slurm (partition, account, QoS, time limit, extra sbatch
// options) within the operator's policy (Options), and runs the trial's
// command through srun on every node, one task per node, with the
// rendezvous a multi-node launcher reads: MASTER_ADDR (the first node),
// MASTER_PORT, NNODES, NODE_RANK, GPUS_PER_NODE, WORLD_SIZE, and the same
// as torchrun's PET_ variables (a bare `torchrun train.py` joins); and the
// INFRARSI_ variables and knobs the process executor gives. Rank 0 appends
// the metrics lines to $INFRARSI_METRICS in the trial's scratch folder,
// which must be on a filesystem the nodes share with the agent.
//
// The agent's clock works as for the process executor: it starts when the
// job's batch script announces itself (the agent reads that line at the
// metrics-file resolution and starts its clock at the read before it, so
// the clock never starts late), every metrics line is timed on arrival,
// and the run ends when Slurm says the job ended. Time pending in Slurm's
// queue is not run time: it renews the lease and is reported as the job's
// queued_s.
//
// Outcomes: COMPLETED -> ok; OUT_OF_MEMORY, or a CUDA out-of-memory in the
// output -> oom; TIMEOUT or DEADLINE, or the trial's own timeout or
// watchdog (the job is cancelled) -> timeout; NODE_FAIL, PREEMPTED,
// BOOT_FAIL, a requeue, a job cancelled by someone else or vanished, a
// controller that cannot be reached -> infra (it runs again, not held
// against the setting; the nodes Slurm has down are named); FAILED with
// another exit code -> failed with the tail of the job's output. A lost
// lease, a cancelled session or the agent shutting down (Abort) cancels
// the job (scancel).
//
// A simulated trial (executor.sim with executor.slurm) runs the same way:
// the job runs `sim_command simulate` on every node (rank 0 simulates) and
// its outcome, on the simulator's clock, is the trial's.
//
// Jobs run as the agent's own user (Slurm runs a job as whoever submitted
// it): an agent running as root refuses to submit unless allow_root.
#ifndef INFRARSI_CLIENT_AGENT_EXECUTORS_SLURM_EXECUTOR_H_
#define INFRARSI_CLIENT_AGENT_EXECUTORS_SLURM_EXECUTOR_H_

#include <atomic>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "client/agent/executors/executor.h"
#include "client/agent/executors/slurm_client.h"
#include "client/agent/executors/work_tree.h"
#include "core/agent_policy.h"

namespace infrarsi::client {

class SlurmExecutor : public Executor {
 public:
  struct Options {
    // Per-trial folders (scripts, metrics, output, work trees), on a
    // filesystem every node mounts at the same path. Required.
    std::string scratch_root;
    // The cluster's nodes.
    int gpus_per_node = 8;
    int max_nodes = 1;  // the most nodes one trial's job may ask for
    // Placement policy. A spec's partition/account/QoS must be listed
    // (empty list: only the default, or none); its time limit at most
    // max_time_limit_min; its extra options' names in allowed_options.
    std::string default_partition;  // "": Slurm's default
    std::vector<std::string> partitions;
    std::string default_account;
    std::vector<std::string> accounts;
    std::vector<std::string> qos;
    int max_time_limit_min = 24 * 60;
    std::vector<std::string> allowed_options;  // "--constraint", "--exclusive", ...
    // Options every job gets, from the operator ("--constraint=h200").
    std::vector<std::string> operator_options;
    // The code policy, as for the process executor.
    std::vector<CommandPrefix> allowed_commands;
    bool allow_any_command = false;
    std::string workdir_root;
    bool allow_root = false;
    // Names passed from the agent's environment to sbatch (and so to the
    // job); SLURM_CONF is always passed. Never INFRARSI_ names.
    std::vector<std::string> env_allow = {"PATH", "LANG", "LC_ALL", "TZ", "SLURM_CONF"};
    // How often the metrics file is read (the clock's resolution) and how
    // often Slurm is asked about the job.
    absl::Duration poll_interval = absl::Milliseconds(5);
    absl::Duration query_interval = absl::Seconds(1);
    // The longest a job may wait in Slurm's queue before it is cancelled
    // and the trial handed back as the infrastructure's (a partition that
    // is down, a queue that never drains).
    absl::Duration max_pending = absl::Hours(24);
    // How long a job the controller no longer knows may stay unknown
    // before it counts as lost (a controller restarting forgets for a while).
    absl::Duration unknown_grace = absl::Seconds(10);
    // How long the controller may not answer before the trial counts as
    // the infrastructure's failure (the job is cancelled, best effort).
    absl::Duration unreachable_grace = absl::Minutes(5);
    // Ports for MASTER_PORT: base + job id % span.
    int master_port_base = 29500;
    // The command a simulated trial's job runs on its nodes: the
    // infrarsi-agent binary (its `simulate` subcommand) at a path the
    // nodes share. Empty: simulated trials are refused.
    std::string sim_command;
    // Slurm's commands. Default: CommandSlurmClient over PATH, given the
    // agent's SLURM_CONF.
    std::shared_ptr<SlurmClient> slurm;
    std::string git_cache_root;  // default: scratch_root/git-cache
  };
  // INVALID_ARGUMENT naming the option when the policy is unsafe or
  // incomplete.
  static absl::StatusOr<std::unique_ptr<SlurmExecutor>> Create(Options options);

  // Thread-compatible per call; several calls may run concurrently.
  absl::StatusOr<v1::TrialOutcome> Run(const v1::TrialAssignment& trial,
                                       ProgressSink* sink) override;
  void Abort() override { aborting_ = true; }

  // The batch script for a trial (exposed for tests): it announces the
  // start to `events`, sets the rendezvous and trial variables, and runs
  // `argv` in `workdir` through srun on every node. Arguments are quoted
  // for bash: nothing in them is interpreted.
  static std::string BatchScript(const std::vector<std::string>& argv, const std::string& workdir,
                                 const std::string& events,
                                 const std::vector<std::pair<std::string, std::string>>& vars,
                                 int gpus_per_node, int master_port_base);

 private:
  explicit SlurmExecutor(Options options);
  // "" when the trial's placement is within the policy, else why not; fills
  // the sbatch options for it and the GPUs each node gets.
  std::string Placement(const v1::TrialAssignment& trial, std::vector<std::string>* args,
                        int* gpus_on_node) const;

  // What a job runs under on this cluster, read once from the controller
  // (TrialOutcome.isolation); a warning is logged for what it lacks.
  std::string Isolation();

  Options options_;
  std::unique_ptr<WorkTrees> work_trees_;
  std::atomic<bool> aborting_{false};
  std::once_flag isolation_once_;
  std::string isolation_;  // set once under isolation_once_
};

}  // namespace infrarsi::client

#endif  // INFRARSI_CLIENT_AGENT_EXECUTORS_SLURM_EXECUTOR_H_
