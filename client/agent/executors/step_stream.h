// What the process and slurm executors share to turn a metrics file into
// timed steps reported to the server: a tailer over the file (read through
// a descriptor the agent opened itself) and a reporter thread (a slow or
// unreachable server must not delay the polling loop, whose clock times
// the lines).
#ifndef INFRARSI_CLIENT_AGENT_EXECUTORS_STEP_STREAM_H_
#define INFRARSI_CLIENT_AGENT_EXECUTORS_STEP_STREAM_H_

#include <atomic>
#include <condition_variable>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "client/agent/executors/executor.h"
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
