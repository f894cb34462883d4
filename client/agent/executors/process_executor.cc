#include "client/agent/executors/process_executor.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <grp.h>
#include <pwd.h>
#include <signal.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <sys/inotify.h>
#include <poll.h>
#include <sched.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cerrno>
#include <condition_variable>
#include <mutex>
#include <thread>
#include <cstring>
#include <filesystem>
#include <set>
#include <fstream>
#include <optional>
#include <sstream>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "client/agent/executors/metrics_line.h"
#include "client/agent/executors/protected_files.h"
#include "client/agent/executors/step_stream.h"
#include "base/file_util.h"
#include "base/status_macros.h"
#include "core/spec.h"


namespace infrarsi::client {
namespace {

namespace fs = std::filesystem;

using SteadyClock = std::chrono::steady_clock;

double SecondsSince(SteadyClock::time_point t0, SteadyClock::time_point t) {
  return std::chrono::duration<double>(t - t0).count();
}

}  // namespace

std::vector<std::string> ProcessExecutor::DefaultEnvAllow() {
  return {"PATH", "LANG", "LC_ALL", "LC_CTYPE", "TZ", "CUDA_VISIBLE_DEVICES",
          "NVIDIA_VISIBLE_DEVICES", "CUDA_DEVICE_ORDER"};
}

absl::StatusOr<std::unique_ptr<ProcessExecutor>> ProcessExecutor::Create(Options options) {
  if (options.scratch_root.empty()) return absl::InvalidArgumentError("scratch_root: required");
  if (options.allowed_commands.empty() && !options.allow_any_command) {
    return absl::InvalidArgumentError(
        "allowed_commands: name the commands the process executor may run (--allow-command); "
        "with none it would run any submitter's command");
  }
  for (const std::string& name : options.env_allow) {
    if (absl::StartsWith(name, "INFRARSI_")) {
      return absl::InvalidArgumentError(absl::StrCat(
          "env_allow: ", name, " is the agent's own (its token among them): trials never get it"));
    }
  }
  std::unique_ptr<ProcessExecutor> ex(new ProcessExecutor(std::move(options)));
  const Options& o = ex->options_;
  if (!o.workdir_root.empty()) {
    std::error_code ec;
    if (!fs::is_directory(o.workdir_root, ec)) {
      return absl::InvalidArgumentError(
          absl::StrCat("workdir_root: ", o.workdir_root, " is not a folder"));
    }
  }
  if (o.sandbox && !o.run_as.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "run_as: with the sandbox each trial runs as its own id of trial_uids (--trial-uids), "
        "not as '", o.run_as, "' shared by all; --run-as is for --sandbox=off"));
  }
  // Off, the sandbox still shares the GPUs out over the slots.
  Sandbox::Options so;
  so.enabled = o.sandbox;
  so.scratch_root = o.scratch_root;
  so.hidden = {o.git_cache_root};
  so.first_id = o.trial_first_id;
  so.id_count = o.trial_id_count;
  so.devices = o.devices;
  so.slots = o.slots;
  ASSIGN_OR_RETURN(ex->sandbox_, Sandbox::Create(std::move(so)));
  if (o.sandbox) return ex;  // each trial's uid is the pool's, not run_as's
  if (!o.run_as.empty()) {
    const passwd* pw = getpwnam(o.run_as.c_str());
    if (pw == nullptr) {
      return absl::InvalidArgumentError(absl::StrCat("run_as: no user '", o.run_as, "'"));
    }
    ex->uid_ = pw->pw_uid;
    ex->gid_ = pw->pw_gid;
    ex->switch_user_ = pw->pw_uid != geteuid() || pw->pw_gid != getegid();
    if (ex->switch_user_ && geteuid() != 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "run_as: only an agent running as root can run trials as ", o.run_as));
    }
    if (pw->pw_uid == 0 && !o.allow_root) {
      return absl::InvalidArgumentError("run_as: root; name an unprivileged user");
    }
  } else if (geteuid() == 0 && !o.allow_root) {
    return absl::InvalidArgumentError(
        "run_as: the agent runs as root: name the unprivileged user trials run as (--run-as "
        "nobody), or --run-as root to run them as root deliberately");
  }
  return ex;
}

ProcessExecutor::ProcessExecutor(Options options) : options_(std::move(options)) {
  if (options_.git_cache_root.empty()) {
    options_.git_cache_root = (fs::path(options_.scratch_root) / "git-cache").string();
  }
  WorkTrees::Options wo;
  wo.cache_root = options_.git_cache_root;
  work_trees_ = std::make_unique<WorkTrees>(wo);
}

std::string CodePolicyRefusal(const CodePolicy& policy, const std::vector<std::string>& argv,
                              const std::string& workdir, bool repository) {
  if (!policy.allow_any_command && !CommandAllowed(argv, policy.allowed_commands)) {
    std::vector<std::string> allowed;
    for (const CommandPrefix& p : policy.allowed_commands) allowed.push_back(absl::StrJoin(p, " "));
    return absl::StrCat("agent policy: command '", absl::StrJoin(argv, " "),
                        "' opens with none of the allowed commands (",
                        absl::StrJoin(allowed, "; "), ")");
  }
  if (repository) return "";  // a fresh work tree in the agent's own scratch
  if (policy.workdir_root.empty()) {
    return "agent policy: this agent runs only trials of a repository, in fresh work trees (no "
           "workdir root is configured)";
  }
  std::error_code ec;
  const fs::path root = fs::weakly_canonical(policy.workdir_root, ec);
  const fs::path dir = fs::weakly_canonical(workdir.empty() ? "." : workdir, ec);
  const std::string r = root.string(), d = dir.string();
  if (ec || workdir.empty() || !(d == r || absl::StartsWith(d, r == "/" ? r : r + "/"))) {
    return absl::StrCat("agent policy: workdir '", workdir, "' is outside the workdir root ",
                        policy.workdir_root);
  }
  return "";
}


std::string TrialCommand(const CodePolicy& policy, const v1::TrialAssignment& trial,
                         std::vector<std::string>* argv) {
  const v1::ProcessSpec& spec = trial.executor().process();
  const Config config(trial.config().begin(), trial.config().end());
  for (std::string& a : SubstituteCommand({spec.argv().begin(), spec.argv().end()}, config)) {
    argv->push_back(std::move(a));
  }
  return CodePolicyRefusal(policy, *argv, spec.workdir(), !spec.source().repository().empty());
}

std::string TrialEnvRefusal(const v1::ProcessSpec& spec, const std::vector<std::string>& env_allow) {
  for (const auto& [name, value] : spec.env()) {
    if (std::string why = TrialEnvNameError(name); !why.empty()) {
      return absl::StrCat("agent policy: env ", name, ": ", why);
    }
    if (std::find(env_allow.begin(), env_allow.end(), name) == env_allow.end()) {
      return absl::StrCat("agent policy: env ", name,
                          " is not among the variables this agent lets trials set (--env-allow ",
                          absl::StrJoin(env_allow, ","), ")");
    }
    if (value.find('\0') != std::string::npos) {
      return absl::StrCat("agent policy: env ", name, " holds a NUL character");
    }
  }
  return "";
}

v1::TrialOutcome RefusedOutcome(std::string why) {
  v1::TrialOutcome refused;
  refused.set_status("refused");
  refused.set_error(std::move(why));
  return refused;
}

absl::StatusOr<std::string> FreshTrialFolder(const std::string& root,
                                             const v1::TrialAssignment& trial,
                                             const char* executor) {
  const fs::path dir =
      fs::path(root) / absl::StrCat("trial-", trial.trial_id(), "-", trial.attempt());
  std::error_code ec;
  fs::create_directories(root, ec);  // the agent made it already (OwnScratchRoot)
  if (absl::Status st = RemoveTreeNoFollow(dir.string()); !st.ok()) {
    return absl::InternalError(absl::StrCat(executor, ": scratch dir: ", st.message()));
  }
  if (mkdir(dir.c_str(), 0700) != 0) {
    return absl::InternalError(absl::StrCat(executor, ": scratch dir ", dir.string(), ": ",
                                            std::strerror(errno)));
  }
  return dir.string();
}

std::vector<std::pair<std::string, std::string>> TrialVariables(
    const v1::TrialAssignment& trial, const std::string& metrics_path) {
  std::vector<std::pair<std::string, std::string>> vars = {
      {"INFRARSI_METRICS", metrics_path},
      {"INFRARSI_TRIAL_ID", absl::StrCat(trial.trial_id())},
      {"INFRARSI_SESSION_ID", trial.session_id()}};
  for (const auto& [k, v] : Config(trial.config().begin(), trial.config().end())) {
    std::string name = absl::AsciiStrToUpper(k);
    for (char& c : name) {
      if (!absl::ascii_isalnum(c)) c = '_';
    }
    vars.emplace_back("INFRARSI_KNOB_" + name, v);
  }
  return vars;
}

absl::StatusOr<v1::TrialOutcome> ProcessExecutor::Run(const v1::TrialAssignment& trial,
                                                      ProgressSink* sink) {
  const v1::ProcessSpec& spec = trial.executor().process();
  if (spec.argv().empty()) return absl::InvalidArgumentError("process: empty command");
  // The operator's policy first: nothing outside it runs.
  std::vector<std::string> argv;
  if (std::string why = TrialCommand({options_.allowed_commands, options_.allow_any_command,
                                      options_.workdir_root},
                                     trial, &argv);
      !why.empty()) {
    return RefusedOutcome(why);
  }
  // This trial's id and GPUs, held while it runs: no other running trial
  // has them.
  ASSIGN_OR_RETURN(Sandbox::Lease lease, sandbox_->Acquire());
  const bool sealed = sandbox_->enabled();
  ASSIGN_OR_RETURN(const std::string folder,
                   FreshTrialFolder(options_.scratch_root, trial, "process"));
  const fs::path scratch(folder);
  const std::string metrics_path = (scratch / "metrics.jsonl").string();
  const std::string stdout_path = (scratch / "stdout.log").string();
  const std::string stderr_path = (scratch / "stderr.log").string();
  // The agent opens the trial's files itself, before the trial runs, and
  // reads them only through these descriptors: a trial (which owns its
  // scratch folder) may replace a path with a link to a file it may not
  // read, and the agent, perhaps root, must not read it for it.
  auto create = [](const std::string& path, int flags) {
    return open(path.c_str(), flags | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0644);
  };
  const ScopedFd metrics_fd(create(metrics_path, O_RDWR));
  const ScopedFd out_fd(create(stdout_path, O_RDWR));
  const ScopedFd err_fd(create(stderr_path, O_RDWR));
  if (metrics_fd.fd < 0 || out_fd.fd < 0 || err_fd.fd < 0) {
    const std::string why = std::strerror(errno);
    (void)RemoveTreeNoFollow(scratch.string());
    return absl::InternalError(absl::StrCat("process: cannot create the trial's files in ",
                                            scratch.string(), ": ", why));
  }

  // Where the steps come from: the harness's metrics file, or a log reader
  // over the job's own stdout or stderr (core/log_readers.h).
  auto made = TrialLogSteps::Create(spec);
  if (!made.ok()) {
    (void)RemoveTreeNoFollow(scratch.string());
    return RefusedOutcome(absl::StrCat("agent: ", made.status().message()));
  }
  const std::unique_ptr<TrialLogSteps> log_reader = *std::move(made);
  // Read through a description of its own: the trial's stdout shares the
  // writing one's offset, which its writes keep at the end. Opened now,
  // before the trial owns the folder, so it is the file the agent made.
  const bool log_stderr = log_reader != nullptr && spec.metrics().stream() == "stderr";
  const ScopedFd log_read_fd(log_reader == nullptr
                                 ? -1
                                 : open((log_stderr ? stderr_path : stdout_path).c_str(),
                                        O_RDONLY | O_NOFOLLOW | O_CLOEXEC));
  const int log_fd = log_read_fd.fd;
  if (log_reader != nullptr && log_fd < 0) {
    const std::string why = std::strerror(errno);
    (void)RemoveTreeNoFollow(scratch.string());
    return absl::InternalError(absl::StrCat("process: cannot read the trial's output: ", why));
  }

  // The code to run: the workdir as it is, or a fresh patched work tree.
  std::string workdir = spec.workdir();
  if (!spec.source().repository().empty()) {
    workdir = (scratch / "tree").string();
    const absl::Time made = absl::Now();
    if (absl::Status st = work_trees_->Make(spec.source(), workdir); !st.ok()) {
      v1::TrialOutcome outcome;
      outcome.set_status("failed");
      outcome.set_error(absl::StrCat("launcher: ", st.message()));
      outcome.set_clock("agent");
      outcome.set_poll_interval_s(absl::ToDoubleSeconds(options_.poll_interval));
      outcome.set_wall_s(absl::ToDoubleSeconds(absl::Now() - made));
      outcome.set_isolation(sandbox_->Describe(lease));
      (void)RemoveTreeNoFollow(scratch.string());
      return outcome;
    }
  }

  // The trial's user owns its scratch folder (its tree, its metrics file),
  // which no one else may enter; links inside are never followed.
  const bool switch_user = sealed || switch_user_;
  const uid_t uid = sealed ? lease.uid() : uid_;
  const gid_t gid = sealed ? lease.gid() : gid_;
  if (switch_user) {
    if (absl::Status st = ChownTreeNoFollow(scratch.string(), uid, gid); !st.ok()) {
      (void)RemoveTreeNoFollow(scratch.string());
      return absl::InternalError(absl::StrCat("process: ", st.message()));
    }
  }
  // Protected files must be as Init locked them, before and after.
  v1::TrialOutcome outcome;
  outcome.set_isolation(sandbox_->Describe(lease));
  for (const std::string& bad : ChangedProtectedFiles(workdir, spec.protected_hashes())) {
    outcome.add_protected_changed(bad + " (before the trial)");
  }

  // The environment: an allowlist from the agent's, never all of it (the
  // agent's token must not reach a trial), and the trial's own.
  std::vector<std::string> env_strings;
  const std::set<std::string> devices_vars = {"CUDA_VISIBLE_DEVICES", "NVIDIA_VISIBLE_DEVICES"};
  for (const std::string& name : options_.env_allow) {
    if (!lease.visible_devices().empty() && devices_vars.count(name) > 0) continue;
    if (const char* v = std::getenv(name.c_str()); v != nullptr) {
      env_strings.push_back(absl::StrCat(name, "=", v));
    }
  }
  // Environment knobs: only names the operator allows, never the agent's
  // own or one that picks the program (checked at Init too; a server is
  // not trusted with the agent's policy).
  if (const std::string why = TrialEnvRefusal(spec, options_.env_allow); !why.empty()) {
    (void)RemoveTreeNoFollow(scratch.string());
    return RefusedOutcome(why);
  }
  {
    const Config values(trial.config().begin(), trial.config().end());
    for (const auto& [name, tmpl] : spec.env()) {
      std::erase_if(env_strings, [&](const std::string& e) { return absl::StartsWith(e, name + "="); });
      env_strings.push_back(absl::StrCat(name, "=", SubstituteKnobs(tmpl, values)));
    }
  }
  if (!lease.visible_devices().empty()) {
    // This slot's GPUs only: a trial beside it on the same host has others.
    env_strings.push_back("CUDA_VISIBLE_DEVICES=" + lease.visible_devices());
  }
  if (std::getenv("PATH") == nullptr ||
      std::find(options_.env_allow.begin(), options_.env_allow.end(), "PATH") ==
          options_.env_allow.end()) {
    env_strings.push_back("PATH=/usr/local/bin:/usr/bin:/bin");
  }
  // A log reader times each line as it arrives: Python must not hold
  // stdout in a block buffer until exit.
  if (log_reader != nullptr) env_strings.push_back("PYTHONUNBUFFERED=1");
  env_strings.push_back("HOME=" + scratch.string());
  env_strings.push_back("TMPDIR=" + scratch.string());
  for (const auto& [k, v] : TrialVariables(trial, metrics_path)) {
    if (log_reader != nullptr && k == "INFRARSI_METRICS") continue;
    env_strings.push_back(absl::StrCat(k, "=", v));
  }
  std::vector<char*> cargv, cenv;
  for (auto& a : argv) cargv.push_back(a.data());
  cargv.push_back(nullptr);
  for (auto& e : env_strings) cenv.push_back(e.data());
  cenv.push_back(nullptr);

  // The sandbox's mounts, prepared here: the child only makes system calls.
  SealPlan plan;
  if (sealed) {
    auto planned = sandbox_->PlanFor(scratch.string(), workdir, argv);
    if (!planned.ok()) {
      (void)RemoveTreeNoFollow(scratch.string());
      return planned.status();
    }
    plan = *std::move(planned);
  }
  // The sandbox's init reports the trial's own exit status here (its own
  // is only "the namespace ended").
  int status_pipe[2] = {-1, -1};
  if (sealed && pipe2(status_pipe, O_CLOEXEC) != 0) {
    (void)RemoveTreeNoFollow(scratch.string());
    return absl::InternalError(absl::StrCat("process: pipe: ", std::strerror(errno)));
  }
  const char* user = options_.run_as.c_str();
  const bool pool_id = sealed;
  // What the trial's own process does: redirect, drop privileges, exec.
  auto run_trial = [&]() {
    const int devnull = open("/dev/null", O_RDONLY);
    dup2(out_fd.fd, 1);
    dup2(err_fd.fd, 2);
    if (devnull >= 0) dup2(devnull, 0);
    // Drop to the trial's user: groups, then group, then user.
    const bool dropped =
        !switch_user ||
        ((pool_id ? setgroups(0, nullptr) == 0 : initgroups(user, gid) == 0) && setgid(gid) == 0 &&
         setuid(uid) == 0 && getuid() == uid && geteuid() == uid);
    if (!dropped) {
      dprintf(2, "infrarsi: cannot run as uid %u: %s\n", static_cast<unsigned>(uid),
              std::strerror(errno));
      _exit(126);
    }
    if (!workdir.empty() && chdir(workdir.c_str()) != 0) {
      dprintf(2, "infrarsi: cannot enter workdir %s: %s\n", workdir.c_str(), std::strerror(errno));
      _exit(126);
    }
    // Nothing of the agent's open files (sockets, the status pipe) reaches
    // the trial.
    syscall(SYS_close_range, 3U, ~0U, 0U);
    execvpe(cargv[0], cargv.data(), cenv.data());
    dprintf(2, "infrarsi: cannot run %s: %s\n", cargv[0], std::strerror(errno));
    _exit(127);
  };
  const absl::Time start = absl::Now();
  // The agent's clock: monotonic, started just before the process is.
  const SteadyClock::time_point t0 = SteadyClock::now();
  const pid_t pid = fork();
  if (pid < 0) {
    const std::string why = std::strerror(errno);
    if (sealed) {
      close(status_pipe[0]);
      close(status_pipe[1]);
    }
    (void)RemoveTreeNoFollow(scratch.string());
    return absl::InternalError(absl::StrCat("process: fork: ", why));
  }
  if (pid == 0) {
    // Child: own process group; sandboxed, the keeper of the trial's
    // namespaces (its init's end ends every process the trial started).
    setpgid(0, 0);
    if (!sealed) run_trial();
    close(status_pipe[0]);
    RunSealed(plan, status_pipe[1], err_fd.fd, run_trial);
  }
  if (sealed) close(status_pipe[1]);
  setpgid(pid, pid);  // also from the parent, to win the race with kill()

  LineTailer tailer(metrics_fd.fd);
  // Reads the job's own output when a log reader is the source (its own
  // descriptor: the metrics file is then unused).
  LineTailer log_tailer(log_fd);
  // When each metrics line arrived, on the agent's clock (the timer the
  // training code cannot touch), and the longest gap between two reads:
  // the bound on every arrival's error.
  SteadyClock::time_point last_read = t0;
  double max_gap_s = 0;
  bool oom_event = false, timed_out = false, stopped = false, hung = false;
  // The hang watchdog: time since the last metrics line (or the start).
  const absl::Duration watchdog = absl::Seconds(spec.watchdog_s());
  absl::Time last_activity = start;
  std::string bad_line;
  const absl::Duration timeout = absl::Seconds(spec.timeout_s() > 0 ? spec.timeout_s() : 600);
  const absl::Duration keepalive = absl::Milliseconds(std::max<int64_t>(trial.lease_timeout_ms() / 3, 200));
  absl::Time last_report = start;
  int wstatus = 0;
  bool exited = false;

  // Reporting runs on its own thread: a slow or unreachable server must not
  // delay the polling loop, whose clock times the metrics lines.
  StepReporter reporter(sink);

  // Reads what arrived since the last call; `now` is when it was read.
  auto drain = [&](SteadyClock::time_point now, bool final) {
    // A line read now was written at most this long ago.
    const double gap = SecondsSince(last_read, now);
    max_gap_s = std::max(max_gap_s, gap);
    last_read = now;
    std::vector<v1::StepMetrics> steps;
    // One source of steps: with a log reader the metrics file is not read
    // (the trial gets no $INFRARSI_METRICS, so a harness it carries writes
    // nothing), else both would report the same steps.
    for (const std::string& line : log_reader != nullptr ? std::vector<std::string>{} : tailer.NewLines()) {
      auto parsed = ParseMetricsLine(line);
      if (!parsed.ok()) {
        if (bad_line.empty()) bad_line = std::string(parsed.status().message());
        continue;
      }
      if (parsed->oom) {
        oom_event = true;
      } else {
        parsed->step.set_arrival_s(SecondsSince(t0, now));
        parsed->step.set_arrival_error_s(std::max(gap, 1e-6));
        last_activity = absl::Now();
        steps.push_back(parsed->step);
      }
    }
    if (log_reader != nullptr && log_reader->error().empty()) {
      std::vector<v1::StepMetrics> found =
          log_reader->Feed(log_tailer.NewLines(), SecondsSince(t0, now), std::max(gap, 1e-6));
      if (!found.empty()) last_activity = absl::Now();
      steps.insert(steps.end(), found.begin(), found.end());
    }
    const bool due = absl::Now() - last_report >= keepalive;
    if (!steps.empty() || (due && !final)) {
      last_report = absl::Now();
      if (steps.empty()) {
        reporter.Keepalive();
      } else {
        reporter.Push(std::move(steps));
      }
    }
    if (reporter.refused()) stopped = true;
  };

  // Woken as lines are written (inotify on the files the agent reads) and
  // as the process ends (its pidfd), else every poll_interval: the agent
  // reads a line right after it is written and costs next to nothing
  // between lines (tests/bench/agent_cpu_bench). Each arrival's stated
  // error stays the time since the previous read, which the timeout bounds.
  const ScopedFd notify(inotify_init1(IN_NONBLOCK | IN_CLOEXEC));
  if (notify.fd >= 0) {
    inotify_add_watch(notify.fd, metrics_path.c_str(), IN_MODIFY);
    if (log_reader != nullptr) {
      inotify_add_watch(notify.fd, (log_stderr ? stderr_path : stdout_path).c_str(), IN_MODIFY);
    }
  }
  const ScopedFd exit_fd(static_cast<int>(syscall(SYS_pidfd_open, pid, 0)));
  auto wait_for_news = [&] {
    pollfd fds[2] = {{notify.fd, POLLIN, 0}, {exit_fd.fd, POLLIN, 0}};
    const int ms = static_cast<int>(std::max<int64_t>(1, absl::ToInt64Milliseconds(options_.poll_interval)));
    if (notify.fd < 0 && exit_fd.fd < 0) {
      absl::SleepFor(options_.poll_interval);
      return;
    }
    if (poll(fds, 2, ms) > 0 && (fds[0].revents & POLLIN)) {
      char events[4096];
      while (read(notify.fd, events, sizeof(events)) > 0) {
      }
    }
  };
  SteadyClock::time_point ended;
  // With the pidfd the exit wakes the agent at once; without it, the exit
  // came after the previous look (the time before its waitpid, which found
  // the process alive): the run may read up to that long.
  SteadyClock::time_point last_look = t0;
  double wall_resolution_s = 0;
  while (!exited) {
    const SteadyClock::time_point look = SteadyClock::now();
    const pid_t r = waitpid(pid, &wstatus, WNOHANG);
    const SteadyClock::time_point now = SteadyClock::now();
    if (r == pid) {
      // Whatever is still unread arrived by now: it was written before exit.
      exited = true;
      ended = now;
      if (exit_fd.fd < 0) wall_resolution_s = SecondsSince(last_look, now);
      drain(now, true);
      break;
    }
    last_look = look;
    drain(now, false);
    hung = spec.watchdog_s() > 0 && absl::Now() - last_activity > watchdog;
    const bool log_failed = log_reader != nullptr && !log_reader->error().empty();
    if (stopped || hung || log_failed || absl::Now() - start > timeout) {
      timed_out = !stopped && !log_failed;
      kill(-pid, SIGKILL);
      waitpid(pid, &wstatus, 0);
      exited = true;
      ended = SteadyClock::now();
      drain(ended, true);
      break;
    }
    wait_for_news();
  }
  // Kill any grandchildren the process left behind in its group (a
  // sandbox's namespace has ended with its init already).
  kill(-pid, SIGKILL);
  if (sealed) {
    int trial_status = 0;
    if (read(status_pipe[0], &trial_status, sizeof(trial_status)) ==
        static_cast<ssize_t>(sizeof(trial_status))) {
      wstatus = trial_status;  // the trial's own exit, not its init's
    }
    close(status_pipe[0]);
  }
  outcome.set_clock("agent");
  outcome.set_wall_s(SecondsSince(t0, ended));
  outcome.set_wall_resolution_s(std::min(wall_resolution_s, outcome.wall_s()));
  outcome.set_poll_interval_s(
      std::max(max_gap_s, absl::ToDoubleSeconds(options_.poll_interval)));
  reporter.Finish();  // every step reaches the sink before the outcome is sent
  for (const std::string& bad : ChangedProtectedFiles(workdir, spec.protected_hashes())) {
    outcome.add_protected_changed(bad);
  }
  const std::string err_tail = ReadTail(err_fd.fd, 2000);
  const std::string out_tail = log_reader != nullptr ? ReadTail(out_fd.fd, 2000) : "";

  if (log_reader != nullptr && !log_reader->error().empty()) {
    outcome.set_status("failed");
    outcome.set_error(absl::StrCat("metrics: ", log_reader->error()));
  } else if (stopped) {
    outcome.set_status("failed");
    outcome.set_error("stopped: lease lost or session cancelled");
  } else if (timed_out) {
    outcome.set_status("timeout");
    outcome.set_error(hung ? absl::StrCat("hung: no metrics line for ", spec.watchdog_s(),
                                          " s (watchdog); killed")
                           : absl::StrCat("killed after the ", spec.timeout_s(), " s timeout"));
  } else if (oom_event || LooksLikeOom(err_tail) || LooksLikeOom(out_tail)) {
    outcome.set_status("oom");
    outcome.set_error("out of memory");
  } else if (WIFEXITED(wstatus) && WEXITSTATUS(wstatus) == 0) {
    outcome.set_status("ok");
    if (!bad_line.empty()) outcome.set_note(bad_line);
    if (log_reader != nullptr && log_reader->found() == 0) {
      outcome.set_note(absl::StrCat("metrics: the ", spec.metrics().reader(),
                                    " reader found no step line in the job's ",
                                    log_stderr ? "stderr" : "stdout", " (", log_reader->lines(),
                                    " lines read)"));
    }
  } else {
    outcome.set_status("failed");
    const std::string how = WIFEXITED(wstatus)
                                ? absl::StrCat("exit code ", WEXITSTATUS(wstatus))
                                : absl::StrCat("killed by signal ", WTERMSIG(wstatus));
    // The end of stderr, from a line's start: a traceback's last lines say
    // what failed, whole (the server keeps up to 4 KiB of an error).
    std::string tail = err_tail;
    if (tail.size() >= 2000) {
      if (const size_t nl = tail.find('\n'); nl != std::string::npos && nl + 1 < tail.size()) {
        tail = tail.substr(nl + 1);
      }
    }
    outcome.set_error(absl::StrCat(how, ": ", tail));
  }
  // What it printed, for `infrarsi logs` (the scratch folder goes now).
  *outcome.mutable_stdout_log() = KeptOutput(out_fd.fd);
  *outcome.mutable_stderr_log() = KeptOutput(err_fd.fd);
  (void)RemoveTreeNoFollow(scratch.string());
  return outcome;
}

}  // namespace infrarsi::client
