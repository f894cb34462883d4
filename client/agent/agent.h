// The node agent: registers its hardware, leases trials, runs them with an
// executor and reports progress and outcomes. It holds no state the server
// cannot rebuild: if the server restarts, the agent retries and carries on;
// if the agent dies, its lease expires and the trial runs elsewhere.
#ifndef INFRARSI_CLIENT_AGENT_AGENT_H_
#define INFRARSI_CLIENT_AGENT_AGENT_H_

#include <atomic>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "client/agent/executors/executor.h"
#include "client/agent/executors/process_executor.h"
#include "client/agent/executors/slurm_executor.h"
#include "client/rpc_client.h"
#include "infrarsi/v1/infrarsi.grpc.pb.h"

namespace infrarsi::client {

class Agent {
 public:
  struct Options {
    // HOST:PORT of infrarsi-server. Required.
    std::string server;
    TlsOptions tls;  // default: plaintext (a loopback server)
    std::string token;  // bearer token of role agent (empty: an open server)
    // What the agent registers; a CPU host can stand in for a GPU model.
    std::string host;  // default: gethostname()
    std::string gpu_model = "cpu";
    int gpu_count = 1;
    double memory_per_gpu_gib = 0;
    // The process executor runs tenants' code: off unless listed, and then
    // only under `process` (its policy: commands, workdir root, user,
    // environment).
    std::vector<std::string> executors = {"replay", "sim"};
    // Folder for the process executor's scratch files. Default: $TMPDIR.
    std::string scratch_root;
    // Teams whose trials this agent runs (empty: any the server offers it).
    std::vector<std::string> serve_teams;
    // Command prefixes as the operator wrote them ("python3 train.py");
    // parsed into process.allowed_commands, and sent to the server so that
    // it offers only trials the agent runs.
    std::vector<std::string> allow_commands;
    ProcessExecutor::Options process;
    // The slurm executor (listed in `executors`): its cluster and placement
    // policy; its code policy (commands, workdir root) is the process
    // executor's above, its scratch_root defaults to scratch_root.
    SlurmExecutor::Options slurm;
    // Long-poll wait per LeaseTrial call.
    absl::Duration lease_wait = absl::Seconds(5);
    // How long to keep retrying an unreachable server before giving up on a
    // call (RunLoop keeps going; this bounds one completion's retries).
    absl::Duration retry_window = absl::Seconds(120);
    // Trials run at once, each leased on its own (a slurm agent keeps this
    // many jobs in Slurm's queue). Default 1.
    int slots = 1;
    // Stop after this many trials (0: never; with several slots, up to
    // slots - 1 more may be running then). Useful in tests and batch jobs.
    int max_trials = 0;
    // Called once registration succeeded, with the agent id (optional).
    std::function<void(const std::string&)> on_registered;
  };

  static absl::StatusOr<std::unique_ptr<Agent>> Create(const Options& options);
  ~Agent();

  // Runs until Stop() (or max_trials), `slots` trials at a time. Thread:
  // call from one thread.
  absl::Status RunLoop();
  // Asks RunLoop to return after the current trial; a Slurm job in flight
  // is cancelled (its trial reported as infra: it runs again elsewhere).
  // Thread-safe.
  void Stop();

  std::string agent_id() const;

 private:
  explicit Agent(const Options& options);
  absl::Status Register();
  // Leases and runs trials until Stop() or max_trials (one per slot).
  absl::Status WorkLoop();
  absl::Status RunTrial(const v1::TrialAssignment& trial);
  Executor* ExecutorFor(const v1::TrialAssignment& trial);

  Options options_;
  std::unique_ptr<v1::AgentService::Stub> stub_;
  // By name (the names the operator listed): built once, at Create.
  std::map<std::string, std::unique_ptr<Executor>> executors_;
  std::mutex register_mu_;
  mutable std::mutex id_mu_;
  std::string agent_id_;
  // How often to heartbeat: what the server said at registration (it
  // counts an agent dead after a few missed beats), 5 s until then.
  std::atomic<int64_t> heartbeat_ms_{5000};
  absl::Notification stop_;
  std::atomic<int> trials_completed_{0};
};

}  // namespace infrarsi::client

#endif  // INFRARSI_CLIENT_AGENT_AGENT_H_
