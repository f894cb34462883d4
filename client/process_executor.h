// Runs a real training process for a trial. The command is an argv template
// whose "{knob}" placeholders are filled from the trial's setting; it is
// exec'd directly, never through a shell, in its own process group so that a
// timeout or a cancel kills everything it started.
//
// The process appends metrics lines (see metrics_line.h) to the file named by
// $INFRARSI_METRICS. It also gets $INFRARSI_TRIAL_ID, $INFRARSI_SESSION_ID and
// $INFRARSI_KNOB_<NAME> for every knob. The executor records when each line
// arrives (a timer the training code cannot touch) and checks the protected
// files' hashes before and after the run.
#ifndef INFRARSI_CLIENT_PROCESS_EXECUTOR_H_
#define INFRARSI_CLIENT_PROCESS_EXECUTOR_H_

#include <string>

#include "absl/time/time.h"
#include "client/executor.h"

namespace infrarsi::client {

class ProcessExecutor : public Executor {
 public:
  struct Options {
    // Folder for per-trial scratch files (metrics, stdout, stderr); a fresh
    // subfolder per trial, removed afterwards. Required.
    std::string scratch_root;
    // How often the metrics file and the child are checked; also the
    // resolution of the observed intervals between metrics lines.
    absl::Duration poll_interval = absl::Milliseconds(10);
  };
  explicit ProcessExecutor(Options options) : options_(std::move(options)) {}

  // Thread-compatible per call; several calls may run concurrently.
  absl::StatusOr<v1::TrialOutcome> Run(const v1::TrialAssignment& trial,
                                       ProgressSink* sink) override;

 private:
  Options options_;
};

}  // namespace infrarsi::client

#endif  // INFRARSI_CLIENT_PROCESS_EXECUTOR_H_
