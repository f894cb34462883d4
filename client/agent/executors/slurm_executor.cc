#include "client/agent/executors/slurm_executor.h"

#include <spdlog/spdlog.h>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cerrno>
#include <condition_variable>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <set>
#include <thread>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "client/agent/executors/metrics_line.h"
#include "client/agent/executors/process_executor.h"
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

// For bash: the text between single quotes, each quote closed, escaped
// and reopened. Nothing inside is expanded.
std::string Quote(const std::string& s) {
  std::string out = "'";
  for (char c : s) {
    if (c == '\'') {
      out += "'\\''";
    } else {
      out += c;
    }
  }
  return out + "'";
}

bool Terminal(const std::string& state) {
  static const std::set<std::string> kTerminal = {
      "COMPLETED", "FAILED",   "CANCELLED",     "TIMEOUT",  "NODE_FAIL",    "PREEMPTED",
      "BOOT_FAIL", "DEADLINE", "OUT_OF_MEMORY", "REVOKED",  "SPECIAL_EXIT"};
  return kTerminal.count(state) > 0;
}

// The tail of a file the job wrote (a regular file only: the job may have
// put a link or a FIFO in its place).
std::string ReadFileTail(const std::string& path, size_t max_bytes) {
  const ScopedFd fd(open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK));
  struct stat st {};
  if (fd.fd < 0 || fstat(fd.fd, &st) != 0 || !S_ISREG(st.st_mode)) return "";
  return ReadTail(fd.fd, max_bytes);
}

// srun's words when a node, not the program, failed the step (the job may
// end FAILED before the controller marks the node down): the nodes named,
// and whether any such line was found.
bool NodeFailureInOutput(const std::string& out, std::vector<std::string>* nodes) {
  bool found = false;
  for (absl::string_view line : absl::StrSplit(out, '\n')) {
    for (absl::string_view marker : {"Node failure on ", "failed on node "}) {
      const size_t at = line.find(marker);
      if (at == absl::string_view::npos || !absl::StrContains(line, "srun: error:")) continue;
      found = true;
      absl::string_view rest = line.substr(at + marker.size());
      std::string node(rest.substr(0, rest.find_first_of(": ,")));
      if (!node.empty() && std::find(nodes->begin(), nodes->end(), node) == nodes->end()) {
        nodes->push_back(node);
      }
    }
    found = found || absl::StrContains(line, "DUE TO NODE FAILURE") ||
            (absl::StrContains(line, "srun: error:") &&
             absl::StrContains(line, "Communication connection failure"));
  }
  return found;
}

bool Listed(const std::vector<std::string>& list, const std::string& v) {
  return std::find(list.begin(), list.end(), v) != list.end();
}

// Asks Slurm about one job on its own thread, so that a slow controller
// never delays the metrics reads the agent's clock rests on.
class JobWatcher {
 public:
  JobWatcher(SlurmClient* slurm, std::string job_id, absl::Duration interval)
      : slurm_(slurm), job_id_(std::move(job_id)), interval_(interval) {
    thread_ = std::thread([this] {
      while (true) {
        auto q = slurm_->Query(job_id_);
        const SteadyClock::time_point at = SteadyClock::now();
        {
          std::unique_lock<std::mutex> lock(mu_);
          if (q.ok()) {
            job_ = *q;
            ++answers_;
            seen_at_ = at;
          } else {
            last_error_ = std::string(q.status().message());
          }
          if (cv_.wait_for(lock, absl::ToChronoMilliseconds(interval_), [&] { return done_; })) {
            return;
          }
        }
      }
    });
  }
  ~JobWatcher() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      done_ = true;
      cv_.notify_all();
    }
    thread_.join();
  }
  // The latest answer (answers == 0: none yet) and when it came.
  SlurmClient::Job Latest(int64_t* answers, SteadyClock::time_point* at, std::string* error) {
    std::lock_guard<std::mutex> lock(mu_);
    *answers = answers_;
    *at = seen_at_;
    *error = last_error_;
    return job_;
  }

 private:
  SlurmClient* slurm_;
  const std::string job_id_;
  const absl::Duration interval_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool done_ = false;
  SlurmClient::Job job_;
  int64_t answers_ = 0;
  SteadyClock::time_point seen_at_;
  std::string last_error_;
  std::thread thread_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<SlurmExecutor>> SlurmExecutor::Create(Options options) {
  if (options.scratch_root.empty()) {
    return absl::InvalidArgumentError("scratch_root: required (a folder the nodes share)");
  }
  if (options.gpus_per_node < 0 || options.gpus_per_node > 64) {
    return absl::InvalidArgumentError("gpus_per_node: must be in [0, 64]");
  }
  if (options.max_nodes < 1 || options.max_nodes > 4096) {
    return absl::InvalidArgumentError("max_nodes: must be in [1, 4096]");
  }
  if (options.max_time_limit_min < 1) {
    return absl::InvalidArgumentError("max_time_limit_min: must be >= 1");
  }
  if (options.allowed_commands.empty() && !options.allow_any_command) {
    return absl::InvalidArgumentError(
        "allowed_commands: name the commands the slurm executor may submit (--allow-command); "
        "with none it would run any submitter's command on the cluster");
  }
  if (geteuid() == 0 && !options.allow_root) {
    return absl::InvalidArgumentError(
        "run_as: the agent runs as root and Slurm runs a job as its submitter: run the agent as "
        "the cluster account trials should use, or --run-as root to submit as root deliberately");
  }
  for (const std::string& name : options.env_allow) {
    if (absl::StartsWith(name, "INFRARSI_")) {
      return absl::InvalidArgumentError(absl::StrCat(
          "env_allow: ", name, " is the agent's own (its token among them): jobs never get it"));
    }
  }
  for (const std::string& o : options.operator_options) {
    std::string name;
    if (std::string why = SlurmOptionError(o, &name); !why.empty()) {
      return absl::InvalidArgumentError(absl::StrCat("operator_options: ", why));
    }
  }
  for (const std::string& o : options.allowed_options) {
    if (!absl::StartsWith(o, "--") || absl::StrContains(o, "=") || !SlurmReservedOption(o).empty()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "allowed_options: '", o, "' must be an option name (--name) InfraRSI does not set"));
    }
  }
  if (!options.slurm) {
    // Slurm's commands find the cluster through SLURM_CONF (or DNS SRV
    // records when unset); nothing else of the agent's environment.
    CommandSlurmClient::Options co;
    if (const char* conf = std::getenv("SLURM_CONF"); conf != nullptr) {
      co.env.push_back(absl::StrCat("SLURM_CONF=", conf));
    }
    options.slurm = std::make_shared<CommandSlurmClient>(std::move(co));
  }
  return std::unique_ptr<SlurmExecutor>(new SlurmExecutor(std::move(options)));
}

SlurmExecutor::SlurmExecutor(Options options) : options_(std::move(options)) {
  if (options_.git_cache_root.empty()) {
    options_.git_cache_root = (fs::path(options_.scratch_root) / "git-cache").string();
  }
  WorkTrees::Options wo;
  wo.cache_root = options_.git_cache_root;
  work_trees_ = std::make_unique<WorkTrees>(wo);
}

std::string SlurmExecutor::Isolation() {
  std::call_once(isolation_once_, [this] {
    auto iso = options_.slurm->ClusterIsolation();
    std::string what = "slurm job as the agent's user; trial folder and git cache 0700";
    if (!iso.ok()) {
      isolation_ = absl::StrCat(what, "; the cluster's isolation unknown (", iso.status().message(), ")");
      return;
    }
    absl::StrAppend(&what, "; ProctrackType ", iso->proctrack.empty() ? "unset" : iso->proctrack,
                    ", JobContainerType ", iso->job_container.empty() ? "unset" : iso->job_container);
    // What docs/operations.md asks the operator to enable.
    if (iso->proctrack != "proctrack/cgroup") {
      spdlog::warn("slurm: ProctrackType is {}, not proctrack/cgroup: a process a trial starts "
                   "outside its job step may outlive the job",
                   iso->proctrack.empty() ? "unset" : iso->proctrack);
      absl::StrAppend(&what, " (a job's stray processes may outlive it)");
    }
    if (iso->job_container != "job_container/tmpfs") {
      spdlog::warn("slurm: JobContainerType is {}, not job_container/tmpfs: jobs on one node share "
                   "/tmp and /dev/shm",
                   iso->job_container.empty() ? "unset" : iso->job_container);
      absl::StrAppend(&what, " (jobs on a node share /tmp and /dev/shm)");
    }
    isolation_ = what;
  });
  return isolation_;
}

std::string SlurmExecutor::BatchScript(
    const std::vector<std::string>& argv, const std::string& workdir, const std::string& events,
    const std::vector<std::pair<std::string, std::string>>& vars, int gpus_per_node,
    int master_port_base) {
  std::string s = "#!/bin/bash\n# Written by infrarsi-agent: one trial as one Slurm job.\n";
  // The start, announced first: the agent's clock starts at the read
  // before this line arrives.
  absl::StrAppend(&s, "echo started >> ", Quote(events), "\n");
  // The rendezvous a multi-node launcher (torchrun, Megatron) reads. The
  // batch script runs on the first node of the allocation.
  absl::StrAppend(&s, "export MASTER_ADDR=\"$(hostname)\"\n",
                  "export MASTER_PORT=$(( ", master_port_base, " + SLURM_JOB_ID % 10000 ))\n",
                  "export NNODES=\"$SLURM_JOB_NUM_NODES\"\n",
                  "export GPUS_PER_NODE=", gpus_per_node, "\n",
                  "export WORLD_SIZE=$(( NNODES * GPUS_PER_NODE ))\n",
                  // torchrun reads its flags from PET_<FLAG>: a bare
                  // `torchrun train.py` joins the job's rendezvous.
                  "export PET_NNODES=\"$NNODES\" PET_NPROC_PER_NODE=\"$GPUS_PER_NODE\" "
                  "PET_MASTER_ADDR=\"$MASTER_ADDR\" PET_MASTER_PORT=\"$MASTER_PORT\"\n");
  for (const auto& [k, v] : vars) absl::StrAppend(&s, "export ", k, "=", Quote(v), "\n");
  std::vector<std::string> quoted;
  for (const std::string& a : argv) quoted.push_back(Quote(a));
  // One task per node; each gets its node's rank. A rank that fails ends
  // the step on every node.
  absl::StrAppend(&s, "srun --kill-on-bad-exit=1 --ntasks-per-node=1 --export=ALL bash -c ",
                  Quote("export NODE_RANK=\"$SLURM_NODEID\" PET_NODE_RANK=\"$SLURM_NODEID\"; "
                        "cd \"$0\" && exec \"$@\""),
                  " ",
                  Quote(workdir), " ", absl::StrJoin(quoted, " "), "\n");
  absl::StrAppend(&s, "rc=$?\necho \"ended $rc\" >> ", Quote(events), "\nexit $rc\n");
  return s;
}

std::string SlurmExecutor::Placement(const v1::TrialAssignment& trial,
                                     std::vector<std::string>* args,
                                     int* gpus_on_node) const {
  const v1::SlurmSpec& sl = trial.executor().slurm();
  const int gpn = sl.gpus_per_node() > 0 ? sl.gpus_per_node() : options_.gpus_per_node;
  if (sl.gpus_per_node() > options_.gpus_per_node) {
    return absl::StrCat("agent policy: executor.slurm.gpus_per_node ", sl.gpus_per_node(),
                        " is more than this cluster's nodes have (", options_.gpus_per_node, ")");
  }
  const int gpus = std::max(1, sl.gpus());
  int nodes = 1;
  if (gpn <= 0) {
    *gpus_on_node = 0;
  } else if (gpus <= gpn) {
    *gpus_on_node = gpus;
  } else {
    if (gpus % gpn != 0) {
      return absl::StrCat("agent policy: ", gpus, " GPUs are not a whole number of nodes of ", gpn);
    }
    nodes = gpus / gpn;
    *gpus_on_node = gpn;
  }
  if (nodes > options_.max_nodes) {
    return absl::StrCat("agent policy: the trial needs ", nodes, " nodes of ", gpn,
                        " GPUs; this agent submits at most ", options_.max_nodes);
  }
  auto pick = [&](const std::string& asked, const std::string& dflt,
                  const std::vector<std::string>& allowed, const char* what,
                  std::string* out) -> std::string {
    *out = asked.empty() ? dflt : asked;
    if (out->empty() || *out == dflt || Listed(allowed, *out)) return "";
    return absl::StrCat("agent policy: ", what, " '", *out, "' is not allowed (allowed: ",
                        allowed.empty() ? std::string("only the default") : absl::StrJoin(allowed, ", "),
                        ")");
  };
  std::string partition, account, qos;
  if (auto why = pick(sl.partition(), options_.default_partition, options_.partitions, "partition", &partition);
      !why.empty()) {
    return why;
  }
  if (auto why = pick(sl.account(), options_.default_account, options_.accounts, "account", &account);
      !why.empty()) {
    return why;
  }
  if (auto why = pick(sl.qos(), "", options_.qos, "qos", &qos); !why.empty()) return why;
  const int timeout_s = trial.executor().process().timeout_s() > 0 ? trial.executor().process().timeout_s() : 600;
  // Slurm's own limit backs the agent's timeout: a minute past it, so the
  // agent's (finer) clock normally ends it first.
  int limit = sl.time_limit_min() > 0 ? sl.time_limit_min() : (timeout_s + 59) / 60 + 1;
  if (sl.time_limit_min() > options_.max_time_limit_min) {
    return absl::StrCat("agent policy: executor.slurm.time_limit_min ", sl.time_limit_min(),
                        " is over this agent's limit of ", options_.max_time_limit_min);
  }
  limit = std::min(limit, options_.max_time_limit_min);
  for (const std::string& o : sl.sbatch_options()) {
    std::string name;
    if (std::string why = SlurmOptionError(o, &name); !why.empty()) {
      return absl::StrCat("agent policy: sbatch option: ", why);
    }
    if (!Listed(options_.allowed_options, name)) {
      return absl::StrCat("agent policy: sbatch option ", name, " is not allowed (allowed: ",
                          options_.allowed_options.empty() ? std::string("none")
                                                           : absl::StrJoin(options_.allowed_options, ", "),
                          ")");
    }
  }
  args->push_back(absl::StrCat("--nodes=", nodes));
  args->push_back("--ntasks-per-node=1");
  if (*gpus_on_node > 0) args->push_back(absl::StrCat("--gres=gpu:", *gpus_on_node));
  args->push_back(absl::StrCat("--time=", limit));
  if (!partition.empty()) args->push_back("--partition=" + partition);
  if (!account.empty()) args->push_back("--account=" + account);
  if (!qos.empty()) args->push_back("--qos=" + qos);
  std::vector<std::string> exclude;
  for (const std::string& n : sl.exclude_nodes()) {
    bool ok = !n.empty() && n.size() <= 128;
    for (char c : n) ok = ok && (absl::ascii_isalnum(c) || c == '-' || c == '_' || c == '.');
    if (ok) exclude.push_back(n);
  }
  if (!exclude.empty()) args->push_back("--exclude=" + absl::StrJoin(exclude, ","));
  for (const std::string& o : options_.operator_options) args->push_back(o);
  for (const std::string& o : sl.sbatch_options()) args->push_back(o);
  return "";
}

absl::StatusOr<v1::TrialOutcome> SlurmExecutor::Run(const v1::TrialAssignment& trial,
                                                    ProgressSink* sink) {
  const v1::ProcessSpec& spec = trial.executor().process();
  // A simulated trial runs the operator's simulator command, no tenant's.
  const bool sim = trial.executor().has_sim();
  std::vector<std::string> argv;
  if (sim) {
    if (options_.sim_command.empty()) {
      return RefusedOutcome("agent policy: this agent has no simulator command (--slurm-sim-command)");
    }
  } else {
    if (spec.argv().empty()) return absl::InvalidArgumentError("slurm: empty command");
    if (std::string why = TrialCommand({options_.allowed_commands, options_.allow_any_command,
                                        options_.workdir_root},
                                       trial, &argv);
        !why.empty()) {
      return RefusedOutcome(why);
    }
  }
  std::vector<std::string> args;
  int gpus_on_node = 0;
  if (std::string why = Placement(trial, &args, &gpus_on_node); !why.empty()) {
    return RefusedOutcome(why);
  }
  ASSIGN_OR_RETURN(const std::string folder,
                   FreshTrialFolder(options_.scratch_root, trial, "slurm"));
  const fs::path scratch(folder);
  std::error_code ec;
  const std::string metrics_path = (scratch / "metrics.jsonl").string();
  const std::string events_path = (scratch / "events").string();
  const std::string out_path = (scratch / "job.out").string();
  const std::string script_path = (scratch / "job.sh").string();
  auto create = [](const std::string& path) {
    return open(path.c_str(), O_RDWR | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0644);
  };
  const ScopedFd metrics_fd(create(metrics_path));
  const ScopedFd events_fd(create(events_path));
  // The job's output (Slurm writes both streams to it): made by the agent
  // before the job starts, so a log reader reads the file Slurm writes.
  const ScopedFd out_fd(create(out_path));
  auto made = TrialLogSteps::Create(spec);
  if (!made.ok()) return RefusedOutcome(absl::StrCat("agent: ", made.status().message()));
  const std::unique_ptr<TrialLogSteps> log_reader = *std::move(made);
  if (metrics_fd.fd < 0 || events_fd.fd < 0) {
    return absl::InternalError(absl::StrCat("slurm: cannot create the trial's files in ",
                                            scratch.string(), ": ", std::strerror(errno)));
  }
  v1::TrialOutcome outcome;
  outcome.set_clock("agent");
  outcome.set_isolation(Isolation());
  outcome.set_poll_interval_s(absl::ToDoubleSeconds(options_.poll_interval));

  std::string workdir = spec.workdir();
  const std::string sim_out = (scratch / "outcome.pb").string();
  if (sim) {
    // `infrarsi-agent simulate` on the job's rank 0 reads the assignment
    // and writes the simulator's outcome beside it.
    workdir = scratch.string();
    const std::string in = (scratch / "assignment.pb").string();
    std::ofstream f(in, std::ios::binary | std::ios::trunc);
    // The lease token is a credential: it never goes to the shared
    // filesystem (the simulator does not need it).
    v1::TrialAssignment for_job = trial;
    for_job.clear_lease_token();
    if (!for_job.SerializeToOstream(&f) || !f.flush()) {
      return absl::InternalError(absl::StrCat("slurm: cannot write ", in));
    }
    argv = {options_.sim_command, "simulate", "--assignment", in, "--outcome", sim_out};
  } else if (!spec.source().repository().empty()) {
    workdir = (scratch / "tree").string();
    if (absl::Status st = work_trees_->Make(spec.source(), workdir); !st.ok()) {
      outcome.set_status("failed");
      outcome.set_error(absl::StrCat("launcher: ", st.message()));
      fs::remove_all(scratch, ec);
      return outcome;
    }
  }
  for (const std::string& bad : ChangedProtectedFiles(workdir, spec.protected_hashes())) {
    outcome.add_protected_changed(bad + " (before the trial)");
  }

  auto vars = TrialVariables(trial, metrics_path);
  if (log_reader != nullptr) {
    std::erase_if(vars, [](const auto& kv) { return kv.first == "INFRARSI_METRICS"; });
  }
  // A log reader times each line as it arrives: no block-buffered stdout.
  if (log_reader != nullptr) vars.emplace_back("PYTHONUNBUFFERED", "1");
  {
    std::ofstream f(script_path, std::ios::trunc);
    f << BatchScript(argv, workdir, events_path, vars, gpus_on_node, options_.master_port_base);
    if (!f) return absl::InternalError(absl::StrCat("slurm: cannot write ", script_path));
  }
  chmod(script_path.c_str(), 0700);
  // sbatch's environment, and so the job's: the allowlist, never the
  // agent's whole environment (its token).
  std::vector<std::string> env;
  for (const std::string& name : options_.env_allow) {
    if (const char* v = std::getenv(name.c_str()); v != nullptr) env.push_back(absl::StrCat(name, "=", v));
  }
  if (const char* conf = std::getenv("SLURM_CONF"); conf != nullptr && !Listed(options_.env_allow, "SLURM_CONF")) {
    env.push_back(absl::StrCat("SLURM_CONF=", conf));
  }
  std::vector<std::string> sbatch = {"--parsable",
                                     absl::StrCat("--job-name=infrarsi-t", trial.trial_id()),
                                     "--output=" + out_path,
                                     "--error=" + out_path,
                                     "--chdir=" + workdir,
                                     "--export=ALL",
                                     "--no-requeue"};
  sbatch.insert(sbatch.end(), args.begin(), args.end());

  const SteadyClock::time_point submitted = SteadyClock::now();
  auto submit = options_.slurm->Submit(sbatch, script_path, env);
  if (!submit.ok()) {
    // A controller that cannot be reached is the infrastructure's failure;
    // a job Slurm refuses (no such partition, too many GPUs) is the
    // launcher's.
    outcome.set_status(absl::IsUnavailable(submit.status()) ? "infra" : "failed");
    outcome.set_error(absl::StrCat(absl::IsUnavailable(submit.status()) ? "" : "launcher: ",
                                   submit.status().message()));
    fs::remove_all(scratch, ec);
    return outcome;
  }
  const std::string job_id = *submit;
  v1::SlurmJob job;
  job.set_job_id(job_id);
  job.set_state("PENDING");
  sink->SetJob(job);

  LineTailer events(events_fd.fd), metrics(metrics_fd.fd), job_out(log_reader ? out_fd.fd : -1);
  StepReporter reporter(sink);
  reporter.Keepalive();  // the job id reaches the server at once
  JobWatcher watcher(options_.slurm.get(), job_id, options_.query_interval);

  bool started = false, oom_event = false;
  SteadyClock::time_point t0 = submitted, last_read = submitted, ended = submitted;
  double max_gap_s = 0;
  // What the clock cannot see of the run's ends: from t0 (the read before
  // the one that found "started") to the end of that read, and from the
  // read before the one that found the script's "ended" line (the trainer
  // had not exited then) to the run's end as read from Slurm's answer,
  // later by the controller's lag. A trainer that writes "ended" early
  // only widens it.
  double start_gap_s = 0;
  bool ended_line = false;
  SteadyClock::time_point before_ended_line = submitted;
  std::string bad_line;
  const double timeout_s = spec.timeout_s() > 0 ? spec.timeout_s() : 600;
  const absl::Duration keepalive =
      absl::Milliseconds(std::max<int64_t>(trial.lease_timeout_ms() / 3, 200));
  absl::Time last_report = absl::Now();
  SteadyClock::time_point last_activity = submitted;
  std::string cancel_why;  // why the agent cancelled the job ("" : it did not)
  std::string cancel_status;
  SlurmClient::Job last;
  int64_t seen_answers = 0;
  absl::Time cancel_sent = absl::InfinitePast();
  absl::Time unknown_since = absl::InfiniteFuture();
  absl::Time last_answer = absl::Now();

  auto drain = [&](SteadyClock::time_point now) {
    const double gap = SecondsSince(last_read, now);
    const std::vector<std::string> event_lines = events.NewLines();
    // `now` was taken before the read: a line it found may have been
    // written after `now`, never after this.
    const SteadyClock::time_point read_done = SteadyClock::now();
    for (const std::string& line : event_lines) {
      if (!started && absl::StartsWith(line, "started")) {
        // The job began after the previous read: the clock starts there,
        // never late.
        started = true;
        t0 = last_read;
        start_gap_s = SecondsSince(last_read, read_done);
        last_activity = now;
        job.set_queued_s(SecondsSince(submitted, t0));
      }
      if (started && !ended_line && absl::StartsWith(line, "ended")) {
        ended_line = true;
        before_ended_line = last_read;
      }
    }
    last_read = now;
    if (!started) return;
    max_gap_s = std::max(max_gap_s, gap);
    std::vector<v1::StepMetrics> steps;
    // One source of steps: the job's output when a log reader is named.
    for (const std::string& line : log_reader != nullptr ? std::vector<std::string>{} : metrics.NewLines()) {
      auto parsed = ParseMetricsLine(line);
      if (!parsed.ok()) {
        if (bad_line.empty()) bad_line = std::string(parsed.status().message());
        continue;
      }
      if (parsed->oom) {
        oom_event = true;
        continue;
      }
      parsed->step.set_arrival_s(std::max(SecondsSince(t0, now), 1e-6));
      parsed->step.set_arrival_error_s(std::max(gap, 1e-6));
      last_activity = now;
      steps.push_back(parsed->step);
    }
    if (log_reader != nullptr) {
      std::vector<v1::StepMetrics> found =
          log_reader->Feed(job_out.NewLines(), std::max(SecondsSince(t0, now), 1e-6), std::max(gap, 1e-6));
      if (!found.empty()) last_activity = now;
      steps.insert(steps.end(), found.begin(), found.end());
    }
    if (!steps.empty()) {
      last_report = absl::Now();
      reporter.Push(std::move(steps));
    }
  };

  while (true) {
    const SteadyClock::time_point now = SteadyClock::now();
    drain(now);
    int64_t answers = 0;
    SteadyClock::time_point seen_at;
    std::string query_error;
    const SlurmClient::Job latest = watcher.Latest(&answers, &seen_at, &query_error);
    if (answers == seen_answers && absl::Now() - last_answer > options_.unreachable_grace) {
      // No answer from the controller for this long: the infrastructure.
      last = SlurmClient::Job{};
      last.reason = absl::StrCat("no answer from Slurm for ",
                                 absl::FormatDuration(options_.unreachable_grace), ": ", query_error);
      if (cancel_why.empty()) {
        cancel_why = last.reason;
        cancel_status = "infra";
      }
      (void)options_.slurm->Cancel(job_id);
      ended = SteadyClock::now();
      break;
    }
    if (answers != seen_answers) {
      last_answer = absl::Now();
      seen_answers = answers;
      if (!latest.known) {
        // The controller forgot the job (it ended long ago, or was purged):
        // give it a moment, then count it lost.
        if (unknown_since == absl::InfiniteFuture()) unknown_since = absl::Now();
        if (absl::Now() - unknown_since > options_.unknown_grace) {
          last = latest;
          last.state = "";
          ended = SteadyClock::now();
          break;
        }
      } else {
        unknown_since = absl::InfiniteFuture();
        const bool changed = latest.state != last.state || latest.nodes != last.nodes;
        last = latest;
        job.set_state(last.state);
        job.set_reason(last.reason);
        job.set_exit_code(last.exit_code);
        if (changed) {
          if (auto expanded = options_.slurm->ExpandNodes(last.nodes); expanded.ok()) {
            job.set_nodes(absl::StrJoin(*expanded, ","));
          }
          sink->SetJob(job);
          reporter.Keepalive();
          last_report = absl::Now();
        }
        if (Terminal(last.state)) {
          ended = seen_at;
          drain(SteadyClock::now());
          break;
        }
        if ((last.restarts > 0 || absl::StartsWith(last.state, "REQUEUE")) && cancel_why.empty()) {
          cancel_why = "requeued by Slurm";
          cancel_status = "infra";
        }
      }
    }
    if (absl::Now() - last_report >= keepalive) {
      // Pending in the queue or running without a new line: the lease is
      // renewed all the same.
      sink->SetJob(job);
      reporter.Keepalive();
      last_report = absl::Now();
    }
    if (cancel_why.empty()) {
      if (aborting_) {
        cancel_why = "the agent is shutting down";
        cancel_status = "infra";
      } else if (reporter.refused()) {
        cancel_why = "stopped: lease lost or session cancelled";
        cancel_status = "failed";
      } else if (log_reader != nullptr && !log_reader->error().empty()) {
        cancel_why = absl::StrCat("metrics: ", log_reader->error());
        cancel_status = "failed";
      } else if (!started && SecondsSince(submitted, now) > absl::ToDoubleSeconds(options_.max_pending)) {
        cancel_why = absl::StrCat("pending in Slurm's queue for ",
                                  absl::FormatDuration(options_.max_pending),
                                  last.reason.empty() ? "" : " (" + last.reason + ")");
        cancel_status = "infra";
      } else if (started && SecondsSince(t0, now) > timeout_s) {
        cancel_why = absl::StrCat("killed after the ", spec.timeout_s(), " s timeout");
        cancel_status = "timeout";
      } else if (started && spec.watchdog_s() > 0 &&
                 SecondsSince(last_activity, now) > spec.watchdog_s()) {
        cancel_why = absl::StrCat("hung: no metrics line for ", spec.watchdog_s(),
                                  " s (watchdog); killed");
        cancel_status = "timeout";
      }
    }
    if (!cancel_why.empty() && absl::Now() - cancel_sent > absl::Seconds(5)) {
      // Sent again every few seconds until Slurm says the job ended.
      if (absl::Status st = options_.slurm->Cancel(job_id); !st.ok() && cancel_sent == absl::InfinitePast()) {
        outcome.set_note(std::string(st.message()));
      }
      cancel_sent = absl::Now();
    }
    absl::SleepFor(options_.poll_interval);
  }
  reporter.Finish();  // every step reaches the sink before the outcome is sent
  // Lines read after Slurm's answer were written before the job ended:
  // the run lasts at least until they were read (never less than what
  // the steps' arrivals show).
  ended = std::max(ended, last_read);
  if (!started) ended = t0;  // it never ran: no run time
  outcome.set_wall_s(std::max(0.0, SecondsSince(t0, ended)));
  // Never seen to end: the whole run says nothing finer than itself.
  double wall_resolution_s = outcome.wall_s();
  if (ended_line) wall_resolution_s = start_gap_s + std::max(0.0, SecondsSince(before_ended_line, ended));
  outcome.set_wall_resolution_s(std::min(outcome.wall_s(), wall_resolution_s));
  outcome.set_poll_interval_s(std::clamp(std::max(max_gap_s, absl::ToDoubleSeconds(options_.poll_interval)),
                                         1e-6, 1.0));
  for (const std::string& bad : ChangedProtectedFiles(workdir, spec.protected_hashes())) {
    outcome.add_protected_changed(bad);
  }
  const std::string tail = ReadFileTail(out_path, 4000);
  const std::string state = last.state;
  if (state == "NODE_FAIL" || state == "BOOT_FAIL" || state == "PREEMPTED") {
    if (auto down = options_.slurm->DownNodes(std::vector<std::string>(
            absl::StrSplit(job.nodes(), ',', absl::SkipEmpty())));
        down.ok()) {
      for (const std::string& n : *down) job.add_failed_nodes(n);
    }
  }
  const std::string where =
      absl::StrCat("slurm job ", job_id, job.nodes().empty() ? "" : " on " + job.nodes());
  if (!cancel_why.empty() && cancel_status != "failed" && (state == "CANCELLED" || state.empty())) {
    outcome.set_status(cancel_status);
    outcome.set_error(absl::StrCat(cancel_why, " (", where, " cancelled)"));
  } else if (!cancel_why.empty() && cancel_status == "failed") {
    outcome.set_status("failed");
    outcome.set_error(absl::StrCat(cancel_why, " (", where, " cancelled)"));
  } else if (state == "COMPLETED" && !oom_event && !LooksLikeOom(tail)) {
    outcome.set_status("ok");
    if (!bad_line.empty()) outcome.set_note(bad_line);
  } else if (state == "OUT_OF_MEMORY") {
    outcome.set_status("oom");
    outcome.set_error(absl::StrCat("out of memory (host: Slurm OUT_OF_MEMORY, ", where, ")"));
  } else if ((state == "FAILED" || state == "COMPLETED") && (oom_event || LooksLikeOom(tail))) {
    outcome.set_status("oom");
    outcome.set_error(absl::StrCat("out of memory (", where, ")"));
  } else if (state == "TIMEOUT" || state == "DEADLINE") {
    outcome.set_status("timeout");
    outcome.set_error(absl::StrCat("Slurm ", state, ": the job's time limit (", where, ")"));
  } else if (state == "NODE_FAIL" || state == "BOOT_FAIL" || state == "PREEMPTED") {
    outcome.set_status("infra");
    outcome.set_error(absl::StrCat(
        "Slurm ", state, " (", where, ")",
        job.failed_nodes().empty() ? "" : absl::StrCat("; down: ", absl::StrJoin(job.failed_nodes(), ","))));
  } else if (std::vector<std::string> named; state == "FAILED" && NodeFailureInOutput(tail, &named)) {
    // A node died under the step before Slurm noticed: the infrastructure.
    for (const std::string& n : named) job.add_failed_nodes(n);
    outcome.set_status("infra");
    outcome.set_error(absl::StrCat("node failure (", where, ")",
                                   named.empty() ? "" : "; failed: " + absl::StrJoin(named, ","),
                                   ": ", tail.substr(tail.size() > 300 ? tail.size() - 300 : 0)));
  } else if (state == "FAILED") {
    outcome.set_status("failed");
    outcome.set_error(absl::StrCat("exit code ", last.exit_code, " (", where, "): ",
                                   tail.substr(tail.size() > 500 ? tail.size() - 500 : 0)));
  } else {
    // Cancelled by someone else, vanished, or a state this agent does not
    // know: not the setting's doing.
    outcome.set_status("infra");
    outcome.set_error(absl::StrCat("Slurm ", state.empty() ? "lost the job" : state,
                                   last.reason.empty() || last.reason == "None" ? "" : " (" + last.reason + ")",
                                   " (", where, ")"));
  }
  if (!started && outcome.status() != "infra" && outcome.status() != "failed") {
    // Nothing ran: no clock to speak of.
    outcome.clear_clock();
  }
  if (sim) {
    // The simulator's own outcome (its times are simulated, not measured)
    // when the job completed; else what Slurm said, on no clock.
    outcome.set_clock("simulated");
    outcome.clear_poll_interval_s();
    outcome.clear_wall_resolution_s();
    if (outcome.status() == "ok") {
      const std::string bytes = ReadFileTail(sim_out, 64 << 20);
      v1::TrialOutcome simulated;
      if (bytes.empty() || !simulated.ParseFromString(bytes)) {
        outcome.set_status("failed");
        outcome.set_error(absl::StrCat("launcher: the simulator wrote no outcome (", where, "): ",
                                       tail.substr(tail.size() > 300 ? tail.size() - 300 : 0)));
      } else {
        outcome = std::move(simulated);
        outcome.set_clock("simulated");
      }
    }
  }
  *outcome.mutable_slurm() = job;
  // The job's output (both streams, as Slurm wrote them), for `infrarsi logs`.
  if (!sim) *outcome.mutable_stdout_log() = KeptOutput(out_fd.fd);
  fs::remove_all(scratch, ec);
  return outcome;
}

}  // namespace infrarsi::client
