// infrarsi-agent: runs on a GPU host, leases trials from infrarsi-server.
#include <signal.h>
#include <unistd.h>
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cstdio>
#include <fstream>
#include <cstdlib>
#include <memory>
#include <thread>

#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "base/logs/json_logs.h"
#include "client/agent/agent.h"
#include "client/agent/agent_policy_file.h"
#include "client/agent/executors/sim_executor.h"
#include "client/credential_flags.h"
#include "core/spec.h"

namespace {

// Best effort: the first GPU's name and memory from nvidia-smi, if present.
void DetectGpu(infrarsi::client::Agent::Options& o) {
  FILE* p = popen("nvidia-smi --query-gpu=name,memory.total --format=csv,noheader,nounits 2>/dev/null", "r");
  if (p == nullptr) return;
  char buf[512];
  int count = 0;
  std::string first;
  while (fgets(buf, sizeof(buf), p)) {
    if (count++ == 0) first = buf;
  }
  pclose(p);
  if (count == 0) return;
  std::vector<std::string> parts = absl::StrSplit(first, ',');
  if (parts.size() < 2) return;
  std::string name(absl::StripAsciiWhitespace(parts[0]));
  // "NVIDIA H200" -> "H200": the catalog name specs use.
  if (name.rfind("NVIDIA ", 0) == 0) name = name.substr(7);
  double mib = 0;
  if (absl::SimpleAtod(absl::StripAsciiWhitespace(parts[1]), &mib)) o.memory_per_gpu_gib = mib / 1024.0;
  o.gpu_model = name;
  o.gpu_count = count;
}

// `infrarsi-agent simulate`: the simulator inside a Slurm job.
int Simulate(const std::string& in, const std::string& out) {
  if (const char* rank = std::getenv("NODE_RANK"); rank != nullptr && std::string(rank) != "0") {
    return 0;  // rank 0 simulates the whole cluster
  }
  infrarsi::v1::TrialAssignment trial;
  std::ifstream f(in, std::ios::binary);
  if (!f || !trial.ParseFromIstream(&f)) {
    std::fprintf(stderr, "simulate: cannot read the trial from %s\n", in.c_str());
    return 2;
  }
  // Every step goes into the outcome (nothing to report to while running).
  class Collect : public infrarsi::client::ProgressSink {
   public:
    bool OnSteps(const std::vector<infrarsi::v1::StepMetrics>& steps) override {
      all.insert(all.end(), steps.begin(), steps.end());
      return true;
    }
    std::vector<infrarsi::v1::StepMetrics> all;
  } sink;
  auto outcome = infrarsi::client::SimExecutor().Run(trial, &sink);
  if (!outcome.ok()) {
    std::fprintf(stderr, "simulate: %s\n", outcome.status().ToString().c_str());
    return 1;
  }
  infrarsi::v1::TrialOutcome o = *std::move(outcome);
  infrarsi::v1::TrialOutcome with_steps;
  for (auto& st : sink.all) *with_steps.add_steps() = std::move(st);
  for (auto& st : *o.mutable_steps()) *with_steps.add_steps() = std::move(st);
  o.clear_steps();
  o.MergeFrom(with_steps);
  const std::string tmp = out + ".tmp";
  {
    std::ofstream w(tmp, std::ios::binary | std::ios::trunc);
    if (!o.SerializeToOstream(&w) || !w.flush()) {
      std::fprintf(stderr, "simulate: cannot write %s\n", tmp.c_str());
      return 1;
    }
  }
  return std::rename(tmp.c_str(), out.c_str()) == 0 ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  // Logs go to stderr from the first line (spdlog's default is stdout).
  spdlog::set_default_logger(spdlog::stderr_color_mt("infrarsi-agent"));
  CLI::App app{"infrarsi-agent: leases trials from infrarsi-server and runs them "
               "(executors: replay of measured outcomes, process for real training, sim for the "
               "cluster simulator, slurm for real training as Slurm jobs from a submit host)."};
  app.set_version_flag("--version", std::string("infrarsi-agent ") + INFRARSI_VERSION);
  infrarsi::client::Agent::Options o;
  o.server = "127.0.0.1:7420";
  DetectGpu(o);
  std::string executors = "replay,sim";
  double lease_wait_s = 5;
  std::string log_level = "info";
  app.add_option("--server", o.server, "infrarsi-server HOST:PORT")->capture_default_str();
  app.add_option("--host", o.host, "host name to register (default: this host's name)");
  app.add_option("--gpu-model", o.gpu_model,
                 "GPU model to register (default: detected with nvidia-smi, else cpu); a CPU "
                 "host may stand in for a GPU model, e.g. for replay")
      ->capture_default_str();
  app.add_option("--gpu-count", o.gpu_count, "GPUs on this host")->capture_default_str();
  app.add_option("--gpu-mem-gib", o.memory_per_gpu_gib, "memory per GPU, GiB")
      ->capture_default_str();
  app.add_option("--executors", executors,
                 "comma-separated: replay, process, sim, slurm (process and slurm run tenants' "
                 "code: off unless listed, and then only under the policy below)")
      ->capture_default_str();
  // The operator's policy for tenants' code (the process executor).
  std::string policy_path;
  app.add_option("--policy", policy_path,
                 "YAML policy file: executors, teams, commands, allow_any_command, workdir_root, "
                 "run_as, sandbox, trial_uids, env_allow, slurm (flags given on the command line "
                 "override it)");
  std::vector<std::string> commands, teams, env_allow;
  bool allow_any_command = false;
  std::string workdir_root, run_as;
  app.add_option("--allow-command", commands,
                 "a command prefix trials may run, e.g. \"python3 train.py\" (repeatable; "
                 "matched word by word)");
  app.add_flag("--allow-any-command", allow_any_command,
               "let trials run any command (a dedicated, disposable host only)");
  app.add_option("--workdir-root", workdir_root,
                 "folder trials' workdirs must be inside (default: none, only trials of a "
                 "repository run, in fresh work trees)");
  std::string sandbox = "on", trial_uids;
  app.add_option("--sandbox", sandbox,
                 "on: each process trial in its own PID, mount and IPC namespaces, with private "
                 "/tmp, /var/tmp and /dev/shm, the agent's folders hidden, as its own id of "
                 "--trial-uids (the agent must be root); off: none of that, deliberately")
      ->capture_default_str()
      ->check(CLI::IsMember({"on", "off"}));
  app.add_option("--trial-uids", trial_uids,
                 "with --sandbox=on: the ids trials run as, FIRST-LAST (uid = gid; ids no "
                 "account uses, at least --slots of them), e.g. 6200000-6200099");
  app.add_option("--run-as", run_as,
                 "with --sandbox=off: the user every process trial runs as (an agent running "
                 "as root must name one; \"root\" deliberately); a slurm agent's jobs run as "
                 "its own user (--run-as root: submit as root, deliberately)");
  app.add_option("--env-allow", env_allow,
                 "environment variable trials may see (passed from the agent's environment) "
                 "and a session's spec may set (executor.process.env), beside PATH, LANG, LC_*, "
                 "TZ and the CUDA device variables (repeatable; never INFRARSI_*, PATH or LD_* "
                 "from a spec)");
  // The slurm executor: an agent on a submit host, trials as Slurm jobs.
  infrarsi::client::SlurmExecutor::Options& sl = o.slurm;
  double slurm_query_s = 1;
  app.add_option("--slurm-gpus-per-node", sl.gpus_per_node,
                 "slurm: GPUs per node of the cluster (jobs ask --gres=gpu:N per node)")
      ->capture_default_str()
      ->check(CLI::Range(0, 64));
  app.add_option("--slurm-max-nodes", sl.max_nodes,
                 "slurm: the most nodes one trial's job may ask for; the agent registers "
                 "max-nodes x gpus-per-node GPUs")
      ->capture_default_str()
      ->check(CLI::Range(1, 4096));
  app.add_option("--slurm-shared-dir", sl.scratch_root,
                 "slurm: folder for trials' scripts, metrics and output, on a filesystem every "
                 "node mounts at the same path (default: --scratch)");
  app.add_option("--slurm-partition", sl.default_partition,
                 "slurm: partition for jobs whose spec names none (default: Slurm's default)");
  app.add_option("--slurm-allow-partition", sl.partitions,
                 "slurm: a partition specs may name (repeatable)");
  app.add_option("--slurm-account", sl.default_account, "slurm: account for jobs whose spec names none");
  app.add_option("--slurm-allow-account", sl.accounts, "slurm: an account specs may name (repeatable)");
  app.add_option("--slurm-allow-qos", sl.qos, "slurm: a QoS specs may name (repeatable)");
  app.add_option("--slurm-max-time-min", sl.max_time_limit_min,
                 "slurm: the longest time limit a job may ask for, minutes")
      ->capture_default_str()
      ->check(CLI::Range(1, 7 * 1440));
  app.add_option("--slurm-allow-option", sl.allowed_options,
                 "slurm: an extra sbatch option name specs may pass, e.g. --constraint "
                 "(repeatable; none by default)");
  app.add_option("--slurm-option", sl.operator_options,
                 "slurm: an sbatch option every job gets, e.g. --constraint=h200 (repeatable)");
  double slurm_max_pending_h = 24;
  app.add_option("--slurm-max-pending-h", slurm_max_pending_h,
                 "slurm: a job pending longer is cancelled and its trial runs again (infra)")
      ->capture_default_str()
      ->check(CLI::Range(0.01, 24.0 * 30));
  app.add_option("--slurm-query-interval-s", slurm_query_s,
                 "slurm: how often the agent asks Slurm about a job in flight")
      ->capture_default_str()
      ->check(CLI::Range(0.05, 60.0));
  app.add_option("--serve-team", teams, "a team whose trials this agent runs (repeatable; default: any)");
  int poll_ms = 5;
  app.add_option("--poll-ms", poll_ms,
                 "process trials: the longest the agent waits between reads of a trial's lines "
                 "(it also wakes as each is written): each line's stated timing error is at most "
                 "about this; smaller costs more CPU (tests/bench/agent_cpu_bench: 5 ms, 0.9% of a "
                 "core; 1 ms, 2.9%)")
      ->check(CLI::Range(1, 1000))
      ->capture_default_str();
  app.add_option("--scratch", o.scratch_root,
                 "folder for per-trial scratch files: created by the agent (0711), or one it owns "
                 "that no one else may write (default: a fresh /tmp/infrarsi-agent-XXXXXX)");
  app.add_option("--lease-wait-s", lease_wait_s, "long-poll wait per lease request")
      ->capture_default_str()
      ->check(CLI::Range(0.0, 30.0));
  app.add_option("--slots", o.slots,
                 "trials run at once, each leased on its own (a slurm agent: jobs in Slurm's "
                 "queue at once)")
      ->capture_default_str()
      ->check(CLI::Range(1, 256));
  app.add_option("--max-trials", o.max_trials, "exit after this many trials (0: never)")
      ->capture_default_str();
  std::string log_format = "text";
  app.add_option("--log-format", log_format, "text, or json: one JSON object per line")
      ->check(CLI::IsMember({"text", "json"}))
      ->capture_default_str();
  app.add_option("--log-level", log_level, "trace, debug, info, warn, error")
      ->capture_default_str()
      ->check(CLI::IsMember({"trace", "debug", "info", "warn", "error"}));
  app.add_option("--slurm-sim-command", sl.sim_command,
                 "slurm: the infrarsi-agent binary simulated trials' jobs run (`simulate`) on the "
                 "nodes (default: this binary's path, which the nodes must share)");
  // What a simulated trial's Slurm job runs on its nodes.
  std::string sim_in, sim_out;
  CLI::App* simulate = app.add_subcommand(
      "simulate", "run one simulated trial (a Slurm job of the slurm executor runs this): read a "
                  "TrialAssignment, write its TrialOutcome; ranks other than NODE_RANK 0 do nothing");
  simulate->add_option("--assignment", sim_in, "the trial, binary protobuf")->required();
  simulate->add_option("--outcome", sim_out, "where its outcome goes, binary protobuf")->required();
  infrarsi::client::CredentialFlags cred_flags;
  cred_flags.AddTo(app);
  CLI11_PARSE(app, argc, argv);
  // The level and format apply before anything below can log.
  spdlog::set_level(spdlog::level::from_str(log_level));
  if (log_format == "json") infrarsi::UseJsonLogs();
  if (*simulate) return Simulate(sim_in, sim_out);
  if (sl.sim_command.empty()) {
    char self[4096];
    const ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
    if (n > 0) sl.sim_command.assign(self, static_cast<size_t>(n));
  }
  {
    auto creds = cred_flags.Resolve();
    if (!creds.ok()) {
      std::fprintf(stderr, "%s\n", std::string(creds.status().message()).c_str());
      return 2;
    }
    o.token = creds->token;
    o.tls = creds->tls;
    // Nothing the agent starts inherits its token.
    unsetenv("INFRARSI_TOKEN");
  }
  infrarsi::client::AgentPolicy policy;
  if (!policy_path.empty()) {
    auto loaded = infrarsi::client::LoadAgentPolicy(policy_path);
    if (!loaded.ok()) {
      std::fprintf(stderr, "%s\n", std::string(loaded.status().message()).c_str());
      return 2;
    }
    policy = *std::move(loaded);
  }
  // Flags given on the command line win over the policy file.
  if (app.count("--executors") || !policy.executors) policy.executors = executors;
  if (app.count("--allow-command")) policy.commands = commands;
  if (app.count("--allow-any-command")) policy.allow_any_command = allow_any_command;
  if (app.count("--workdir-root")) policy.workdir_root = workdir_root;
  if (app.count("--run-as")) policy.run_as = run_as;
  if (app.count("--env-allow")) policy.env_allow = env_allow;
  if (app.count("--serve-team")) policy.teams = teams;
  // The slurm section of the policy file, where no flag overrides it.
  {
    const auto& ps = policy.slurm;
    auto take = [&](const char* flag, const auto& from, auto& to) {
      if (from.has_value() && !app.count(flag)) to = *from;
    };
    take("--slurm-gpus-per-node", ps.gpus_per_node, sl.gpus_per_node);
    take("--slurm-max-nodes", ps.max_nodes, sl.max_nodes);
    take("--slurm-max-time-min", ps.max_time_min, sl.max_time_limit_min);
    take("--slurm-max-pending-h", ps.max_pending_h, slurm_max_pending_h);
    take("--slurm-shared-dir", ps.shared_dir, sl.scratch_root);
    take("--slurm-partition", ps.partition, sl.default_partition);
    take("--slurm-account", ps.account, sl.default_account);
    take("--slurm-allow-partition", ps.partitions, sl.partitions);
    take("--slurm-allow-account", ps.accounts, sl.accounts);
    take("--slurm-allow-qos", ps.qos, sl.qos);
    take("--slurm-allow-option", ps.allow_options, sl.allowed_options);
    take("--slurm-option", ps.options, sl.operator_options);
  }
  o.executors = absl::StrSplit(*policy.executors, ',', absl::SkipEmpty());
  if (std::find(o.executors.begin(), o.executors.end(), "slurm") != o.executors.end()) {
    // A submit host's agent holds the cluster, not its own GPUs: what a
    // trial may ask for is max-nodes x gpus-per-node.
    for (const std::string& e : o.executors) {
      if (e != "slurm") {
        std::fprintf(stderr, "--executors: slurm runs alone on a submit host's agent (its GPU "
                             "count is the cluster's); run another agent for %s\n", e.c_str());
        return 2;
      }
    }
    if (app.count("--gpu-count")) {
      std::fprintf(stderr, "--gpu-count: a slurm agent registers --slurm-max-nodes x "
                           "--slurm-gpus-per-node GPUs; set those instead\n");
      return 2;
    }
    o.gpu_count = sl.max_nodes * std::max(1, sl.gpus_per_node);
    sl.query_interval = absl::Seconds(slurm_query_s);
    sl.max_pending = absl::Seconds(slurm_max_pending_h * 3600);
  }
  o.serve_teams = policy.teams;
  o.allow_commands = policy.commands;
  o.process.allow_any_command = policy.allow_any_command;
  o.process.workdir_root = policy.workdir_root;
  o.process.run_as = policy.run_as;
  if (!app.count("--sandbox") && policy.sandbox) sandbox = *policy.sandbox;
  if (!app.count("--trial-uids") && !policy.trial_uids.empty()) trial_uids = policy.trial_uids;
  o.process.sandbox = sandbox == "on";
  if (!trial_uids.empty()) {
    if (absl::Status st = infrarsi::client::ParseIdRange(trial_uids, "--trial-uids",
                                                         &o.process.trial_first_id,
                                                         &o.process.trial_id_count);
        !st.ok()) {
      std::fprintf(stderr, "%s\n", std::string(st.message()).c_str());
      return 2;
    }
  }
  o.process.allow_root = policy.run_as == "root";
  o.process.poll_interval = absl::Milliseconds(poll_ms);
  for (const std::string& name : policy.env_allow) o.process.env_allow.push_back(name);
  // Scripts (and tests) wait for this line to know the agent can take work.
  o.on_registered = [](const std::string& id) {
    std::printf("infrarsi-agent registered as %s\n", id.c_str());
    std::fflush(stdout);
  };
  o.lease_wait = absl::Seconds(lease_wait_s);

  sigset_t sigs;
  sigemptyset(&sigs);
  sigaddset(&sigs, SIGTERM);
  sigaddset(&sigs, SIGINT);
  pthread_sigmask(SIG_BLOCK, &sigs, nullptr);

  auto agent = infrarsi::client::Agent::Create(o);
  if (!agent.ok()) {
    spdlog::error("{}", agent.status().ToString());
    return 1;
  }
  std::thread waiter([&] {
    int sig = 0;
    sigwait(&sigs, &sig);
    spdlog::info("signal {}: stopping after the current trial", sig);
    (*agent)->Stop();
  });
  waiter.detach();
  const absl::Status st = (*agent)->RunLoop();
  if (!st.ok()) {
    spdlog::error("{}", st.ToString());
    return 1;
  }
  return 0;
}
