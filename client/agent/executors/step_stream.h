// What the process and slurm executors share to turn a metrics file into
// timed steps reported to the server: a tailer over the file (read through
// a descriptor the agent opened itself) and a reporter thread (a slow or
// unreachable server must not delay the polling loop, whose clock times
// the lines).
#ifndef INFRARSI_CLIENT_AGENT_EXECUTORS_STEP_STREAM_H_
#define INFRARSI_CLIENT_AGENT_EXECUTORS_STEP_STREAM_H_

#include <atomic>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "client/agent/executors/executor.h"
#include "core/log_readers.h"
#include "infrarsi/v1/infrarsi.pb.h"

namespace infrarsi::client {

// The last `max_bytes` of the file open as `fd` (the agent's own
// descriptor: a trial that swaps the path for a link to another file
// changes nothing the agent reads).
std::string ReadTail(int fd, size_t max_bytes);

// What the server keeps of a trial's output: the last `max_bytes` of the
// file open as `fd`, and how many bytes came before them.
v1::TrialLog KeptOutput(int fd, size_t max_bytes = 1 << 20);

// Whether a trial's output says it ran out of memory (a CUDA OOM, a
// Python MemoryError's wording, torch's OutOfMemoryError).
bool LooksLikeOom(const std::string& output);

// Reads complete lines appended to a file since the last call, through one
// descriptor held open for the whole trial (cheap enough to poll every
// millisecond; opened by the agent before the trial starts, so the trial
// cannot point it elsewhere). Thread-compatible; does not own `fd`.
class LineTailer {
 public:
  explicit LineTailer(int fd) : fd_(fd) {}
  LineTailer(const LineTailer&) = delete;
  LineTailer& operator=(const LineTailer&) = delete;
  // Complete non-blank lines appended since the last call; an unfinished
  // last line waits for the next call.
  std::vector<std::string> NewLines();

 private:
  int fd_;
  std::string pending_;
};

// The steps a log reader (core/log_readers.h) finds in a trial's output,
// for the process and slurm executors alike. Thread-compatible.
class TrialLogSteps {
 public:
  // Null when `spec` names no log reader (the harness's metrics file is
  // then the source); INVALID_ARGUMENT when the reader cannot be made.
  static absl::StatusOr<std::unique_ptr<TrialLogSteps>> Create(const v1::ProcessSpec& spec);
  // The steps `lines` complete, arrived `arrival_s` after the process
  // started and read at most `error_s` late. Nothing more once error() is
  // set (the log skipped a step: the trial must fail with it).
  std::vector<v1::StepMetrics> Feed(const std::vector<std::string>& lines, double arrival_s,
                                    double error_s);
  const std::string& error() const { return steps_.error(); }
  int64_t lines() const { return lines_; }  // lines read
  int64_t found() const { return found_; }  // of them, step lines

 private:
  TrialLogSteps(std::unique_ptr<LogReader> reader, LogStepBuilder::Options o)
      : reader_(std::move(reader)), steps_(o) {}
  std::unique_ptr<LogReader> reader_;
  LogStepBuilder steps_;
  int64_t lines_ = 0, found_ = 0;
};

// Hands steps (and keep-alives) to a ProgressSink on its own thread, in
// order. Thread-safe. Finish() (also the destructor) returns once
// everything pushed reached the sink.
class StepReporter {
 public:
  explicit StepReporter(ProgressSink* sink);  // not owned
  ~StepReporter();
  StepReporter(const StepReporter&) = delete;
  StepReporter& operator=(const StepReporter&) = delete;

  void Push(std::vector<v1::StepMetrics> steps);
  // An empty report: renews the lease (and sends the sink's job, if any).
  void Keepalive();
  // Whether the sink said stop (the lease was lost or the session cancelled).
  bool refused() const { return refused_; }
  void Finish();

 private:
  ProgressSink* sink_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<v1::StepMetrics> pending_;
  bool keepalive_ = false, done_ = false;
  std::atomic<bool> refused_{false};
  std::thread thread_;
};

}  // namespace infrarsi::client

#endif  // INFRARSI_CLIENT_AGENT_EXECUTORS_STEP_STREAM_H_
