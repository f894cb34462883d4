// Test helper: a child process with its stdout readable line by line.
#ifndef INFRARSI_TESTS_TESTING_SUBPROCESS_H_
#define INFRARSI_TESTS_TESTING_SUBPROCESS_H_

#include <signal.h>
#include <sys/types.h>

#include <string>
#include <vector>

namespace infrarsi::testing {

class Subprocess {
 public:
  // Starts argv[0] (a path) with its stdout on a pipe; stderr goes to
  // `stderr_path` if given, else is inherited. Aborts the test on failure.
  Subprocess(const std::vector<std::string>& argv, const std::string& stderr_path = "");
  ~Subprocess();  // SIGKILLs a child still running
  Subprocess(const Subprocess&) = delete;
  Subprocess& operator=(const Subprocess&) = delete;

  // Blocks until a full line arrives; false at EOF.
  bool ReadLine(std::string* line);
  // Reads lines until one starts with `prefix`; returns the rest of it.
  std::string WaitForLinePrefix(const std::string& prefix);
  // Reads the rest of stdout until EOF.
  std::string ReadAll();
  void Signal(int sig);
  // Waits for exit; returns the wait status.
  int Wait();
  pid_t pid() const { return pid_; }

 private:
  pid_t pid_ = -1;
  int out_fd_ = -1;
  std::string buf_;
  bool reaped_ = false;
};

// Path of a fresh temporary folder (removed by the caller if wanted).
std::string MakeTempDir(const std::string& tag);

}  // namespace infrarsi::testing

#endif  // INFRARSI_TESTS_TESTING_SUBPROCESS_H_
