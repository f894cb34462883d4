#include "client/agent/executors/slurm_client.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"

namespace infrarsi::client {
namespace {

// The controller could not be reached: the infrastructure, not the trial.
bool Unreachable(const std::string& err) {
  const std::string e = absl::AsciiStrToLower(err);
  return absl::StrContains(e, "unable to contact slurm controller") ||
         absl::StrContains(e, "socket timed out") || absl::StrContains(e, "connection refused") ||
         absl::StrContains(e, "slurm_persist_conn") || absl::StrContains(e, "munge");
}

std::string Trimmed(const std::string& s) { return std::string(absl::StripAsciiWhitespace(s)); }

}  // namespace

SlurmClient::Job ParseScontrolJob(const std::string& text) {
  SlurmClient::Job job;
  for (absl::string_view token : absl::StrSplit(text, absl::ByAnyChar(" \n"), absl::SkipEmpty())) {
    const size_t eq = token.find('=');
    if (eq == absl::string_view::npos) continue;
    const absl::string_view key = token.substr(0, eq);
    const std::string value(token.substr(eq + 1));
    if (key == "JobState") {
      job.state = value;
      job.known = true;
    } else if (key == "Reason") {
      job.reason = value;
    } else if (key == "ExitCode") {
      job.exit_code = value;
    } else if (key == "Restarts") {
      (void)absl::SimpleAtoi(value, &job.restarts);
    } else if (key == "NodeList") {
      job.nodes = value == "(null)" ? "" : value;
    }
  }
  return job;
}

absl::StatusOr<CommandSlurmClient::Result> CommandSlurmClient::Run(
    const std::string& command, const std::vector<std::string>& args,
    const std::vector<std::string>& env) {
  const std::string path =
      options_.bin_dir.empty() ? command : absl::StrCat(options_.bin_dir, "/", command);
  std::vector<std::string> argv_s = {path};
  argv_s.insert(argv_s.end(), args.begin(), args.end());
  std::vector<std::string> env_s = options_.env;
  env_s.insert(env_s.end(), env.begin(), env.end());
  bool has_path = false;
  for (const std::string& e : env_s) has_path = has_path || absl::StartsWith(e, "PATH=");
  if (!has_path) env_s.push_back("PATH=/usr/local/bin:/usr/bin:/bin");
  std::vector<char*> cargv, cenv;
  for (auto& a : argv_s) cargv.push_back(a.data());
  cargv.push_back(nullptr);
  for (auto& e : env_s) cenv.push_back(e.data());
  cenv.push_back(nullptr);

  int out_pipe[2], err_pipe[2];
  if (pipe2(out_pipe, O_CLOEXEC) != 0) return absl::InternalError(std::strerror(errno));
  if (pipe2(err_pipe, O_CLOEXEC) != 0) {
    close(out_pipe[0]);
    close(out_pipe[1]);
    return absl::InternalError(std::strerror(errno));
  }
  const pid_t pid = fork();
  if (pid < 0) {
    for (int fd : {out_pipe[0], out_pipe[1], err_pipe[0], err_pipe[1]}) close(fd);
    return absl::InternalError(absl::StrCat("fork: ", std::strerror(errno)));
  }
  if (pid == 0) {
    setpgid(0, 0);
    const int devnull = open("/dev/null", O_RDONLY);
    if (devnull >= 0) dup2(devnull, 0);
    dup2(out_pipe[1], 1);
    dup2(err_pipe[1], 2);
    execvpe(cargv[0], cargv.data(), cenv.data());
    dprintf(2, "cannot run %s: %s\n", cargv[0], std::strerror(errno));
    _exit(127);
  }
  setpgid(pid, pid);
  close(out_pipe[1]);
  close(err_pipe[1]);
  Result r;
  const absl::Time deadline = absl::Now() + options_.timeout;
  pollfd fds[2] = {{out_pipe[0], POLLIN, 0}, {err_pipe[0], POLLIN, 0}};
  int open_fds = 2;
  bool timed_out = false;
  while (open_fds > 0) {
    const int64_t left = absl::ToInt64Milliseconds(deadline - absl::Now());
    if (left <= 0) {
      timed_out = true;
      break;
    }
    if (poll(fds, 2, static_cast<int>(std::min<int64_t>(left, 1000))) < 0 && errno != EINTR) break;
    for (int i = 0; i < 2; ++i) {
      if (fds[i].fd < 0 || !(fds[i].revents & (POLLIN | POLLHUP | POLLERR))) continue;
      char buf[4096];
      const ssize_t n = read(fds[i].fd, buf, sizeof(buf));
      if (n <= 0) {
        close(fds[i].fd);
        fds[i].fd = -1;
        --open_fds;
        continue;
      }
      std::string& dest = i == 0 ? r.out : r.err;
      if (dest.size() < (1 << 20)) dest.append(buf, static_cast<size_t>(n));
    }
  }
  for (auto& f : fds) {
    if (f.fd >= 0) close(f.fd);
  }
  if (timed_out) kill(-pid, SIGKILL);
  int status = 0;
  waitpid(pid, &status, 0);
  if (timed_out) {
    return absl::UnavailableError(absl::StrCat(command, ": no answer within ",
                                               absl::FormatDuration(options_.timeout)));
  }
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  if (r.exit_code == 127 && absl::StrContains(r.err, "cannot run")) {
    return absl::FailedPreconditionError(absl::StrCat(command, " is not installed: ", Trimmed(r.err)));
  }
  return r;
}

absl::StatusOr<std::string> CommandSlurmClient::Submit(const std::vector<std::string>& args,
                                                       const std::string& script,
                                                       const std::vector<std::string>& env) {
  std::vector<std::string> a = args;
  a.push_back(script);
  auto r = Run("sbatch", a, env);
  if (!r.ok()) return r.status();
  if (r->exit_code != 0) {
    const std::string msg = absl::StrCat("sbatch: ", Trimmed(r->err.empty() ? r->out : r->err));
    return Unreachable(r->err) ? absl::UnavailableError(msg) : absl::InvalidArgumentError(msg);
  }
  // --parsable: "id" or "id;cluster".
  std::string id = Trimmed(r->out);
  id = id.substr(0, id.find(';'));
  int64_t n = 0;
  if (!absl::SimpleAtoi(id, &n) || n <= 0) {
    return absl::InternalError(absl::StrCat("sbatch: unexpected answer '", id, "'"));
  }
  return id;
}

absl::StatusOr<SlurmClient::Job> CommandSlurmClient::Query(const std::string& job_id) {
  auto r = Run("scontrol", {"show", "job", "-o", job_id}, {});
  if (!r.ok()) return r.status();
  if (r->exit_code != 0) {
    if (absl::StrContains(absl::AsciiStrToLower(r->err), "invalid job id")) return Job{};
    const std::string msg = absl::StrCat("scontrol show job ", job_id, ": ", Trimmed(r->err));
    return Unreachable(r->err) ? absl::UnavailableError(msg) : absl::InternalError(msg);
  }
  return ParseScontrolJob(r->out);
}

absl::Status CommandSlurmClient::Cancel(const std::string& job_id) {
  auto r = Run("scancel", {job_id}, {});
  if (!r.ok()) return r.status();
  if (r->exit_code != 0) {
    return absl::UnavailableError(absl::StrCat("scancel ", job_id, ": ", Trimmed(r->err)));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<std::string>> CommandSlurmClient::ExpandNodes(
    const std::string& nodelist) {
  if (nodelist.empty()) return std::vector<std::string>();
  auto r = Run("scontrol", {"show", "hostnames", nodelist}, {});
  if (!r.ok()) return r.status();
  if (r->exit_code != 0) {
    return absl::InternalError(absl::StrCat("scontrol show hostnames: ", Trimmed(r->err)));
  }
  return std::vector<std::string>(absl::StrSplit(r->out, absl::ByAnyChar(" \n"), absl::SkipEmpty()));
}

absl::StatusOr<std::vector<std::string>> CommandSlurmClient::DownNodes(
    const std::vector<std::string>& nodes) {
  std::vector<std::string> down;
  if (nodes.empty()) return down;
  auto r = Run("sinfo", {"-h", "-N", "-n", absl::StrJoin(nodes, ","), "-o", "%N %t"}, {});
  if (!r.ok()) return r.status();
  if (r->exit_code != 0) return absl::UnavailableError(absl::StrCat("sinfo: ", Trimmed(r->err)));
  for (absl::string_view line : absl::StrSplit(r->out, '\n', absl::SkipEmpty())) {
    std::vector<std::string> parts = absl::StrSplit(line, ' ', absl::SkipEmpty());
    if (parts.size() < 2) continue;
    const std::string& st = parts[1];
    // "*": not responding; down, drain(ed/ing), fail(ing), no_respond.
    if (absl::StrContains(st, "*") || absl::StartsWith(st, "down") ||
        absl::StartsWith(st, "drain") || absl::StartsWith(st, "drng") ||
        absl::StartsWith(st, "fail") || absl::StartsWith(st, "boot")) {
      if (std::find(down.begin(), down.end(), parts[0]) == down.end()) down.push_back(parts[0]);
    }
  }
  return down;
}

SlurmClient::Isolation ParseScontrolConfig(const std::string& text) {
  SlurmClient::Isolation iso;
  for (absl::string_view line : absl::StrSplit(text, '\n', absl::SkipEmpty())) {
    const size_t eq = line.find('=');
    if (eq == absl::string_view::npos) continue;
    const absl::string_view key = absl::StripAsciiWhitespace(line.substr(0, eq));
    std::string value(absl::StripAsciiWhitespace(line.substr(eq + 1)));
    if (value == "(null)") value.clear();
    if (key == "ProctrackType") iso.proctrack = value;
    if (key == "JobContainerType") iso.job_container = value;
  }
  return iso;
}

absl::StatusOr<SlurmClient::Isolation> CommandSlurmClient::ClusterIsolation() {
  auto r = Run("scontrol", {"show", "config"}, {});
  if (!r.ok()) return r.status();
  if (r->exit_code != 0) return absl::UnavailableError(absl::StrCat("scontrol: ", Trimmed(r->err)));
  return ParseScontrolConfig(r->out);
}

}  // namespace infrarsi::client
