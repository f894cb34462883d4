#include "tests/testing/subprocess.h"

#include <fcntl.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>

namespace infrarsi::testing {

Subprocess::Subprocess(const std::vector<std::string>& argv, const std::string& stderr_path) {
  int fds[2];
  if (pipe(fds) != 0) std::abort();
  pid_ = fork();
  if (pid_ < 0) std::abort();
  if (pid_ == 0) {
    dup2(fds[1], 1);
    close(fds[0]);
    close(fds[1]);
    if (!stderr_path.empty()) {
      const int e = open(stderr_path.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
      if (e >= 0) dup2(e, 2);
    }
    std::vector<char*> args;
    for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    execv(args[0], args.data());
    std::perror("execv");
    _exit(127);
  }
  close(fds[1]);
  out_fd_ = fds[0];
}

Subprocess::~Subprocess() {
  if (!reaped_ && pid_ > 0) {
    kill(pid_, SIGKILL);
    Wait();
  }
  if (out_fd_ >= 0) close(out_fd_);
}

bool Subprocess::ReadLine(std::string* line) {
  while (true) {
    const size_t nl = buf_.find('\n');
    if (nl != std::string::npos) {
      *line = buf_.substr(0, nl);
      buf_.erase(0, nl + 1);
      return true;
    }
    char chunk[4096];
    const ssize_t n = read(out_fd_, chunk, sizeof(chunk));
    if (n <= 0) {
      if (buf_.empty()) return false;
      *line = buf_;
      buf_.clear();
      return true;
    }
    buf_.append(chunk, static_cast<size_t>(n));
  }
}

std::string Subprocess::WaitForLinePrefix(const std::string& prefix) {
  std::string line;
  while (ReadLine(&line)) {
    if (line.rfind(prefix, 0) == 0) return line.substr(prefix.size());
  }
  return "";
}

std::string Subprocess::ReadAll() {
  std::string out = buf_, line;
  buf_.clear();
  char chunk[4096];
  ssize_t n;
  while ((n = read(out_fd_, chunk, sizeof(chunk))) > 0) out.append(chunk, static_cast<size_t>(n));
  return out;
}

void Subprocess::Signal(int sig) {
  if (!reaped_) kill(pid_, sig);
}

int Subprocess::Wait() {
  int status = 0;
  if (reaped_) return 0;
  waitpid(pid_, &status, 0);
  reaped_ = true;
  return status;
}

std::string MakeTempDir(const std::string& tag) {
  std::string tmpl = (std::filesystem::temp_directory_path() / ("infrarsi-" + tag + "-XXXXXX")).string();
  if (mkdtemp(tmpl.data()) == nullptr) std::abort();
  return tmpl;
}

}  // namespace infrarsi::testing
