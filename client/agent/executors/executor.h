// Executors run one leased trial on an agent and describe its outcome.
#ifndef INFRARSI_CLIENT_AGENT_EXECUTORS_EXECUTOR_H_
#define INFRARSI_CLIENT_AGENT_EXECUTORS_EXECUTOR_H_

#include <vector>

#include "absl/status/statusor.h"
#include "infrarsi/v1/infrarsi.pb.h"

namespace infrarsi::client {

// Receives per-step metrics while a trial runs. Returns false when the trial
// must stop (the lease was lost or the session cancelled).
class ProgressSink {
 public:
  virtual ~ProgressSink() = default;
  virtual bool OnSteps(const std::vector<v1::StepMetrics>& steps) = 0;
  // A Slurm trial's job as now seen: sent with every later report (an
  // empty OnSteps sends it at once). Default: not reported.
  virtual void SetJob(const v1::SlurmJob& job) { (void)job; }
};

class Executor {
 public:
  virtual ~Executor() = default;
  // Runs the trial to its end. The outcome's status is ok, oom, failed or
  // timeout; steps already given to `sink` are not repeated in it. A non-OK
  // return means the executor itself broke (e.g. a missing file); the agent
  // reports it as a failed trial. `sink` is not owned.
  virtual absl::StatusOr<v1::TrialOutcome> Run(const v1::TrialAssignment& trial,
                                               ProgressSink* sink) = 0;
  // The agent is shutting down: an executor whose trials outlive it (a
  // Slurm job) ends them now and reports them as "infra" (they run again
  // elsewhere). Thread-safe. Default: the trial runs to its end.
  virtual void Abort() {}
};

}  // namespace infrarsi::client

#endif  // INFRARSI_CLIENT_AGENT_EXECUTORS_EXECUTOR_H_
