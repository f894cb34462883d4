// Runs a real training process for a trial. The command is an argv template
// whose "{knob}" placeholders are filled from the trial's setting; it is
// exec'd directly, never through a shell, in its own process group so that a
// timeout or a cancel kills everything it started.
//
// It runs tenants' code only under its operator's policy (Options): the
// commands it may run, where, as which user, with which environment. The
// child's environment is built from an allowlist, never inherited whole,
// so a trial never sees the agent's token.
//
// When the trial carries a source (the session has a repository), it runs
// at the root of a fresh work tree of the repository at the base commit
// with the trial's patches applied (client/work_tree.h), made inside the
// trial's scratch folder and removed with it; a patch that does not apply
// fails the trial as a launcher error.
//
// The process appends metrics lines (see metrics_line.h) to the file named by
// $INFRARSI_METRICS, one per step, flushed as each step ends. It also gets
// $INFRARSI_TRIAL_ID, $INFRARSI_SESSION_ID and $INFRARSI_KNOB_<NAME> for
// every knob. The executor is the agent's clock: on a monotonic clock
// started as the process is, it records when each line arrives (arrival_s,
// a timer the training code cannot touch) and when the process exits
// (wall_s), and states its resolution (poll_interval_s); it also checks the
// protected files' hashes before and after the run.
#ifndef INFRARSI_CLIENT_AGENT_EXECUTORS_PROCESS_EXECUTOR_H_
#define INFRARSI_CLIENT_AGENT_EXECUTORS_PROCESS_EXECUTOR_H_

#include <memory>
#include <string>

#include "absl/time/time.h"
#include "client/agent/executors/executor.h"
#include "client/agent/executors/sandbox.h"
#include "client/agent/executors/work_tree.h"
#include "core/agent_policy.h"

#include <sys/types.h>

namespace infrarsi::client {

// The part of an operator's policy that decides whether a trial's command
// may run where it asks (the process and slurm executors share it).
struct CodePolicy {
  const std::vector<CommandPrefix>& allowed_commands;
  bool allow_any_command;
  const std::string& workdir_root;
};

// "" when `policy` lets `argv` run in `workdir` (or in a fresh work tree of
// a repository), else why not, starting "agent policy: ".
std::string CodePolicyRefusal(const CodePolicy& policy, const std::vector<std::string>& argv,
                              const std::string& workdir, bool repository);

// What the process and slurm executors do alike before a trial runs.
//
// The trial's command with its knobs filled in (into *argv); "" when
// `policy` lets it run, else why not (the trial's outcome is then
// RefusedOutcome(why)).
std::string TrialCommand(const CodePolicy& policy, const v1::TrialAssignment& trial,
                         std::vector<std::string>* argv);
v1::TrialOutcome RefusedOutcome(std::string why);
// "" when the agent may set every environment variable the trial's spec
// names (each in `env_allow`, none the agent's own), else why not.
std::string TrialEnvRefusal(const v1::ProcessSpec& spec, const std::vector<std::string>& env_allow);
// A fresh, empty folder (0700) for this attempt of the trial under `root`
// (what was there is removed without following links); `executor` names
// the error's source.
absl::StatusOr<std::string> FreshTrialFolder(const std::string& root,
                                             const v1::TrialAssignment& trial,
                                             const char* executor);
// The variables a trial gets: INFRARSI_METRICS, INFRARSI_TRIAL_ID,
// INFRARSI_SESSION_ID and INFRARSI_KNOB_<NAME> for every knob.
std::vector<std::pair<std::string, std::string>> TrialVariables(
    const v1::TrialAssignment& trial, const std::string& metrics_path);

class ProcessExecutor : public Executor {
 public:
  // The environment names a trial gets from the agent's by default. Never
  // the agent's token or other INFRARSI_ variables.
  static std::vector<std::string> DefaultEnvAllow();

  struct Options {
    // Folder for per-trial scratch files (metrics, stdout, stderr); a fresh
    // subfolder per trial, removed afterwards. Required.
    std::string scratch_root;
    // The operator's policy for tenants' code. A trial outside it is
    // refused (its outcome says why), never run:
    // - the command prefixes a trial's command must open with; none and not
    //   allow_any_command: Create fails (it would run anybody's command);
    std::vector<CommandPrefix> allowed_commands;
    bool allow_any_command = false;
    // - the folder a trial's workdir must be inside (symbolic links
    //   resolved); empty: only trials of a repository (fresh work trees)
    //   run;
    std::string workdir_root;
    // - the sandbox (sandbox.h): on by default, each trial in its own PID,
    //   mount and IPC namespaces as its own id of the pool below; Create
    //   fails naming what the host lacks. Off only deliberately; then
    //   trials run as `run_as`, in a process group, on the host's /tmp;
    bool sandbox = true;
    // - with the sandbox: the ids trials run as (uid = gid), first ..
    //   first + count - 1, at least `slots` of them, used by no account;
    uid_t trial_first_id = 0;
    int trial_id_count = 0;
    // - without it: the user trials run as (its uid, gid and groups), e.g.
    //   "nobody"; empty: the agent's own, which Create refuses for root
    //   unless `allow_root` says so deliberately. With the sandbox it must
    //   be empty (each trial has an id of its own);
    std::string run_as;
    bool allow_root = false;
    // The agent's GPU devices (CUDA ordinals or UUIDs) and the trials it
    // runs at once: each trial gets devices.size() / slots of them in
    // CUDA_VISIBLE_DEVICES, never another running trial's. Empty: trials
    // see the agent's CUDA_VISIBLE_DEVICES, if env_allow passes it.
    std::vector<std::string> devices;
    int slots = 1;
    // - the environment names passed from the agent's environment (HOME and
    //   TMPDIR are the trial's scratch folder); INFRARSI_ names are refused.
    std::vector<std::string> env_allow = DefaultEnvAllow();
    // The agent reads the trial's lines as they are written (inotify) and
    // sees it end at once (a pidfd); between those it checks every
    // poll_interval. Each line's arrival_s is late by at most the gap
    // since the previous read, which the outcome reports: this bounds it.
    absl::Duration poll_interval = absl::Milliseconds(5);
    // The agent's bare clones of session repositories. Default:
    // scratch_root/git-cache.
    std::string git_cache_root;
  };
  // INVALID_ARGUMENT naming the option when the policy is unsafe or the
  // user unknown.
  static absl::StatusOr<std::unique_ptr<ProcessExecutor>> Create(Options options);

  // Thread-compatible per call; several calls may run concurrently. An
  // outcome "refused" says which part of the policy the trial is outside.
  absl::StatusOr<v1::TrialOutcome> Run(const v1::TrialAssignment& trial,
                                       ProgressSink* sink) override;

 private:
  explicit ProcessExecutor(Options options);

  Options options_;
  std::unique_ptr<WorkTrees> work_trees_;
  std::unique_ptr<Sandbox> sandbox_;
  // The run_as user, resolved at Create.
  bool switch_user_ = false;
  uid_t uid_ = 0;
  gid_t gid_ = 0;
};

}  // namespace infrarsi::client

#endif  // INFRARSI_CLIENT_AGENT_EXECUTORS_PROCESS_EXECUTOR_H_
