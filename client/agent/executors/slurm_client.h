// Slurm's commands as the slurm executor uses them: submit a batch script,
// read a job's state, cancel it, expand a node list, and find which nodes
// the controller has down. An interface so that the executor's handling of
// every job state is tested against a fake; CommandSlurmClient runs
// Debian's sbatch, scontrol, scancel and sinfo.
#ifndef INFRARSI_CLIENT_AGENT_EXECUTORS_SLURM_CLIENT_H_
#define INFRARSI_CLIENT_AGENT_EXECUTORS_SLURM_CLIENT_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace infrarsi::client {

class SlurmClient {
 public:
  struct Job {
    bool known = false;  // false: the controller no longer knows the job
    std::string state;   // JobState: PENDING, RUNNING, COMPLETED, NODE_FAIL, ...
    std::string reason;
    std::string exit_code;  // "code:signal"
    int restarts = 0;       // requeued this many times
    std::string nodes;      // NodeList as Slurm writes it: "node[1-2]"
  };
  virtual ~SlurmClient() = default;
  // Submits the batch script at `script` with `args` (sbatch's options), in
  // the environment `env` ("NAME=value", nothing inherited). The job id; an
  // error carries sbatch's message. UNAVAILABLE when the controller cannot
  // be reached (the infrastructure, not the trial).
  virtual absl::StatusOr<std::string> Submit(const std::vector<std::string>& args,
                                             const std::string& script,
                                             const std::vector<std::string>& env) = 0;
  virtual absl::StatusOr<Job> Query(const std::string& job_id) = 0;
  virtual absl::Status Cancel(const std::string& job_id) = 0;
  // "node[1-2],gpu7" -> node1, node2, gpu7.
  virtual absl::StatusOr<std::vector<std::string>> ExpandNodes(const std::string& nodelist) = 0;
  // Those of `nodes` the controller has down, drained, failing or not
  // responding.
  virtual absl::StatusOr<std::vector<std::string>> DownNodes(
      const std::vector<std::string>& nodes) = 0;
  // How the cluster isolates jobs: `scontrol show config`'s ProctrackType
  // and JobContainerType ("proctrack/cgroup", "job_container/tmpfs"; ""
  // when unset). UNIMPLEMENTED where a client cannot tell.
  struct Isolation {
    std::string proctrack, job_container;
  };
  virtual absl::StatusOr<Isolation> ClusterIsolation() {
    return absl::UnimplementedError("this Slurm client cannot read the cluster's configuration");
  }
};

// Runs Slurm's commands (found on PATH unless `bin_dir` is set), each
// exec'd directly with `env` (SLURM_CONF and the like; nothing else of the
// agent's environment, its token least of all) and killed after `timeout`.
// Thread-safe.
class CommandSlurmClient : public SlurmClient {
 public:
  struct Options {
    std::string bin_dir;            // "": PATH
    std::vector<std::string> env;   // "NAME=value" for every command
    absl::Duration timeout = absl::Seconds(30);
  };
  explicit CommandSlurmClient(Options options) : options_(std::move(options)) {}

  absl::StatusOr<std::string> Submit(const std::vector<std::string>& args,
                                     const std::string& script,
                                     const std::vector<std::string>& env) override;
  absl::StatusOr<Job> Query(const std::string& job_id) override;
  absl::Status Cancel(const std::string& job_id) override;
  absl::StatusOr<std::vector<std::string>> ExpandNodes(const std::string& nodelist) override;
  absl::StatusOr<std::vector<std::string>> DownNodes(const std::vector<std::string>& nodes) override;
  absl::StatusOr<Isolation> ClusterIsolation() override;

 private:
  struct Result {
    int exit_code = -1;
    std::string out, err;
  };
  absl::StatusOr<Result> Run(const std::string& command, const std::vector<std::string>& args,
                             const std::vector<std::string>& env);
  Options options_;
};

// `scontrol show config` output's isolation keys (exposed for tests).
SlurmClient::Isolation ParseScontrolConfig(const std::string& text);

// `scontrol show job -o` output parsed (exposed for tests).
SlurmClient::Job ParseScontrolJob(const std::string& text);

}  // namespace infrarsi::client

#endif  // INFRARSI_CLIENT_AGENT_EXECUTORS_SLURM_CLIENT_H_
