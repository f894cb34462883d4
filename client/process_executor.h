// Runs a real training process for a trial. The command is an argv template
// whose "{knob}" placeholders are filled from the trial's setting; it is
// exec'd directly, never through a shell, in its own process group so that a
// timeout or a cancel kills everything it started.
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
#ifndef INFRARSI_CLIENT_PROCESS_EXECUTOR_H_
#define INFRARSI_CLIENT_PROCESS_EXECUTOR_H_

#include <memory>
#include <string>

#include "absl/time/time.h"
#include "client/executor.h"
#include "client/work_tree.h"

namespace infrarsi::client {

class ProcessExecutor : public Executor {
 public:
  struct Options {
    // Folder for per-trial scratch files (metrics, stdout, stderr); a fresh
    // subfolder per trial, removed afterwards. Required.
    std::string scratch_root;
    // How often the metrics file and the child are checked: the resolution
    // of the agent's clock (each line's arrival_s is late by at most the
    // longest gap between two checks, which the outcome reports).
    absl::Duration poll_interval = absl::Milliseconds(1);
    // The agent's bare clones of session repositories. Default:
    // scratch_root/git-cache.
    std::string git_cache_root;
  };
  explicit ProcessExecutor(Options options);

  // Thread-compatible per call; several calls may run concurrently.
  absl::StatusOr<v1::TrialOutcome> Run(const v1::TrialAssignment& trial,
                                       ProgressSink* sink) override;

 private:
  Options options_;
  std::unique_ptr<WorkTrees> work_trees_;
};

}  // namespace infrarsi::client

#endif  // INFRARSI_CLIENT_PROCESS_EXECUTOR_H_
