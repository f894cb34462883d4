// The slurm executor against a fake Slurm: how a trial becomes a job (its
// size, placement, script and environment), the policy that bounds it, and
// how every job state Slurm can end in becomes a trial outcome. The real
// two-node cluster runs the same executor in tests/integration/slurm_test.cc.
#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <filesystem>
#include <fstream>
#include <functional>
#include <mutex>
#include <thread>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "client/agent/agent_policy_file.h"
#include "client/agent/executors/slurm_client.h"
#include "client/agent/executors/slurm_executor.h"
#include "tests/testing/subprocess.h"

namespace infrarsi::client {
namespace {

namespace fs = std::filesystem;

// A Slurm whose one job does what the test's `behaviour` says, on its own
// thread, given the job's folder (where the executor put the script, the
// metrics file and the events file).
class FakeSlurm : public SlurmClient {
 public:
  std::function<void(FakeSlurm&, const std::string& dir)> behaviour;

  ~FakeSlurm() override {
    if (thread_.joinable()) thread_.join();
  }
  absl::StatusOr<std::string> Submit(const std::vector<std::string>& args, const std::string& script,
                                     const std::vector<std::string>& env) override {
    std::lock_guard<std::mutex> lock(mu_);
    if (!submit_error.ok()) return submit_error;
    args_ = args;
    env_ = env;
    script_ = script;
    job_.known = true;
    job_.state = "PENDING";
    const std::string dir = fs::path(script).parent_path().string();
    thread_ = std::thread([this, dir] {
      if (behaviour) behaviour(*this, dir);
    });
    return std::string("41");
  }
  absl::StatusOr<Job> Query(const std::string& id) override {
    std::lock_guard<std::mutex> lock(mu_);
    EXPECT_EQ(id, "41");
    ++queries_;
    cv_.notify_all();
    if (silent) return absl::UnavailableError("scontrol: Unable to contact slurm controller");
    return job_;
  }
  absl::Status Cancel(const std::string& id) override {
    std::lock_guard<std::mutex> lock(mu_);
    EXPECT_EQ(id, "41");
    ++cancels_;
    if (job_.state == "PENDING" || job_.state == "RUNNING") job_.state = "CANCELLED";
    cv_.notify_all();
    return absl::OkStatus();
  }
  absl::StatusOr<std::vector<std::string>> ExpandNodes(const std::string& list) override {
    if (list == "node[1-2]") return std::vector<std::string>{"node1", "node2"};
    return std::vector<std::string>(absl::StrSplit(list, ',', absl::SkipEmpty()));
  }
  absl::StatusOr<std::vector<std::string>> DownNodes(const std::vector<std::string>& nodes) override {
    std::vector<std::string> out;
    for (const std::string& n : nodes) {
      if (std::find(down.begin(), down.end(), n) != down.end()) out.push_back(n);
    }
    return out;
  }

  // The cluster's side.
  void Set(const std::string& state, const std::string& exit_code = "0:0", int restarts = 0) {
    std::lock_guard<std::mutex> lock(mu_);
    job_.state = state;
    job_.exit_code = exit_code;
    job_.restarts = restarts;
    if (job_.nodes.empty() && state != "PENDING") job_.nodes = "node[1-2]";
  }
  void Forget() {
    std::lock_guard<std::mutex> lock(mu_);
    job_ = Job{};
  }
  static void Append(const std::string& path, const std::string& text) {
    std::ofstream(path, std::ios::app) << text;
  }
  static void Start(const std::string& dir) { Append(dir + "/events", "started\n"); }
  static void Steps(const std::string& dir, int n) {
    for (int s = 0; s < n; ++s) {
      Append(dir + "/metrics.jsonl",
             absl::StrCat(R"({"step": )", s, R"(, "loss": 9.5, "tokens": 4096, "step_time_s": 0.01, )",
                          R"("peak_mem_gib": 3, "warmup": )", s == 0 ? "true" : "false", "}\n"));
    }
  }
  // Waits until the executor asked about the job `n` more times.
  void WaitForQueries(int n) {
    std::unique_lock<std::mutex> lock(mu_);
    const int until = queries_ + n;
    cv_.wait(lock, [&] { return queries_ >= until; });
  }
  // Waits until the executor cancelled the job.
  void WaitCancelled() {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [&] { return cancels_ > 0; });
  }
  int cancels() {
    std::lock_guard<std::mutex> lock(mu_);
    return cancels_;
  }
  std::vector<std::string> args() {
    std::lock_guard<std::mutex> lock(mu_);
    return args_;
  }
  std::vector<std::string> env() {
    std::lock_guard<std::mutex> lock(mu_);
    return env_;
  }
  absl::Status submit_error = absl::OkStatus();
  std::vector<std::string> down;
  std::atomic<bool> silent{false};  // every Query fails

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  Job job_;
  std::vector<std::string> args_, env_;
  std::string script_;
  int queries_ = 0, cancels_ = 0;
  std::thread thread_;
};

// Records what the agent would send; `stop_after_jobs` > 0 says stop once
// that many job reports came (a lost lease).
class RecordingSink : public ProgressSink {
 public:
  bool OnSteps(const std::vector<v1::StepMetrics>& steps) override {
    std::lock_guard<std::mutex> lock(mu);
    steps_seen.insert(steps_seen.end(), steps.begin(), steps.end());
    if (has_job) job_reports.push_back(job);
    cv.notify_all();
    return !(stop_after_jobs > 0 && static_cast<int>(job_reports.size()) >= stop_after_jobs);
  }
  void SetJob(const v1::SlurmJob& j) override {
    std::lock_guard<std::mutex> lock(mu);
    job = j;
    has_job = true;
  }
  // Waits for `n` reports of a job in `state`.
  void WaitForReports(const std::string& state, int n) {
    std::unique_lock<std::mutex> lock(mu);
    cv.wait(lock, [&] {
      return std::count_if(job_reports.begin(), job_reports.end(),
                           [&](const v1::SlurmJob& j) { return j.state() == state; }) >= n;
    });
  }
  std::mutex mu;
  std::condition_variable cv;
  std::vector<v1::StepMetrics> steps_seen;
  std::vector<v1::SlurmJob> job_reports;
  v1::SlurmJob job;
  bool has_job = false;
  int stop_after_jobs = 0;
};

class SlurmExecutorTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = testing::MakeTempDir("slurm-ex");
    slurm_ = std::make_shared<FakeSlurm>();
  }
  void TearDown() override { fs::remove_all(dir_); }

  SlurmExecutor::Options Opts() {
    SlurmExecutor::Options o;
    o.scratch_root = dir_ + "/scratch";
    o.gpus_per_node = 8;
    o.max_nodes = 2;
    o.allow_any_command = true;
    o.allow_root = true;
    o.workdir_root = dir_;
    o.poll_interval = absl::Milliseconds(1);
    o.query_interval = absl::Milliseconds(2);
    o.unknown_grace = absl::Milliseconds(50);
    o.slurm = slurm_;
    return o;
  }
  v1::TrialAssignment Trial(int gpus = 16) {
    v1::TrialAssignment t;
    t.set_trial_id(7);
    t.set_session_id("ses-1");
    t.set_attempt(1);
    t.set_lease_timeout_ms(300);
    (*t.mutable_config())["mb"] = "2";
    v1::ProcessSpec* p = t.mutable_executor()->mutable_process();
    p->add_argv("python3");
    p->add_argv("train.py");
    p->add_argv("--micro-batch={mb}");
    p->set_workdir(dir_);
    p->set_timeout_s(60);
    t.mutable_executor()->mutable_slurm()->set_gpus(gpus);
    return t;
  }
  v1::TrialOutcome Run(const v1::TrialAssignment& t, SlurmExecutor::Options o) {
    auto ex = SlurmExecutor::Create(std::move(o));
    EXPECT_TRUE(ex.ok()) << ex.status();
    auto out = (*ex)->Run(t, &sink_);
    EXPECT_TRUE(out.ok()) << out.status();
    return out.ok() ? *out : v1::TrialOutcome();
  }
  v1::TrialOutcome Run(const v1::TrialAssignment& t) { return Run(t, Opts()); }

  std::string dir_;
  std::shared_ptr<FakeSlurm> slurm_;
  RecordingSink sink_;
};

TEST_F(SlurmExecutorTest, ATwoNodeTrialIsOneJobSizedFromTheHardware) {
  slurm_->behaviour = [](FakeSlurm& s, const std::string& dir) {
    s.Set("RUNNING");
    FakeSlurm::Start(dir);
    FakeSlurm::Steps(dir, 4);
    s.Set("COMPLETED");
  };
  v1::TrialAssignment t = Trial(16);
  t.mutable_executor()->mutable_slurm()->set_partition("gpu");
  t.mutable_executor()->mutable_slurm()->add_exclude_nodes("node9");
  SlurmExecutor::Options o = Opts();
  o.partitions = {"gpu"};
  const v1::TrialOutcome out = Run(t, o);
  EXPECT_EQ(out.status(), "ok") << out.error();
  EXPECT_EQ(out.clock(), "agent");
  const std::vector<std::string> args = slurm_->args();
  for (const char* want : {"--nodes=2", "--ntasks-per-node=1", "--gres=gpu:8", "--time=2",
                           "--partition=gpu", "--exclude=node9", "--no-requeue", "--export=ALL",
                           "--job-name=infrarsi-t7"}) {
    EXPECT_NE(std::find(args.begin(), args.end(), want), args.end())
        << want << " not in " << absl::StrJoin(args, " ");
  }
  EXPECT_EQ(out.slurm().job_id(), "41");
  EXPECT_EQ(out.slurm().state(), "COMPLETED");
  EXPECT_EQ(out.slurm().nodes(), "node1,node2");
  // Every step came through the sink, timed on the agent's clock.
  ASSERT_EQ(sink_.steps_seen.size(), 4u);
  for (const auto& s : sink_.steps_seen) EXPECT_GT(s.arrival_s(), 0);
  EXPECT_GE(out.wall_s(), sink_.steps_seen.back().arrival_s());
  // The job id reached the server before the job ran.
  ASSERT_FALSE(sink_.job_reports.empty());
  EXPECT_EQ(sink_.job_reports.front().job_id(), "41");
}

TEST_F(SlurmExecutorTest, TheScriptQuotesEverythingAndSetsTheRendezvous) {
  const std::string script = SlurmExecutor::BatchScript(
      {"python3", "train.py", "--name=a'b; rm -rf /", "$(id)"}, "/w d", "/s/events",
      {{"INFRARSI_KNOB_MB", "2'; echo pwned"}}, 8, 29500);
  EXPECT_NE(script.find("'--name=a'\\''b; rm -rf /'"), std::string::npos) << script;
  EXPECT_NE(script.find("'$(id)'"), std::string::npos) << script;
  EXPECT_NE(script.find("export INFRARSI_KNOB_MB='2'\\''; echo pwned'"), std::string::npos) << script;
  for (const char* v : {"MASTER_ADDR", "MASTER_PORT", "NNODES", "GPUS_PER_NODE", "WORLD_SIZE",
                        "NODE_RANK", "PET_NNODES", "PET_NODE_RANK", "PET_MASTER_ADDR",
                        "PET_MASTER_PORT", "PET_NPROC_PER_NODE"}) {
    EXPECT_NE(script.find(v), std::string::npos) << v;
  }
  // bash reads it as written: the dangerous argument stays one argument.
  const std::string dir = testing::MakeTempDir("slurm-script");
  const std::string path = dir + "/s.sh";
  std::ofstream(path) << "set -- 'python3' 'train.py' '--name=a'\\''b; rm -rf /' '$(id)'\n"
                         "printf '%s\\n' \"$3\"\n";
  testing::Subprocess p({"/bin/bash", path}, "/dev/null");
  EXPECT_EQ(p.ReadAll(), "--name=a'b; rm -rf /\n");
  p.Wait();
  fs::remove_all(dir);
}

TEST_F(SlurmExecutorTest, TheAgentsTokenNeverReachesTheJob) {
  setenv("INFRARSI_TOKEN", "secret-token", 1);
  setenv("SLURM_CONF", "/etc/slurm/test.conf", 1);
  slurm_->behaviour = [](FakeSlurm& s, const std::string&) { s.Set("FAILED", "1:0"); };
  Run(Trial());
  unsetenv("INFRARSI_TOKEN");
  const std::vector<std::string> env = slurm_->env();
  EXPECT_NE(std::find(env.begin(), env.end(), "SLURM_CONF=/etc/slurm/test.conf"), env.end());
  for (const std::string& e : env) EXPECT_FALSE(absl::StrContains(e, "secret-token")) << e;
  unsetenv("SLURM_CONF");
}

TEST_F(SlurmExecutorTest, PlacementOutsideThePolicyIsRefused) {
  struct Case {
    std::function<void(v1::TrialAssignment&)> edit;
    std::string why;
  };
  const std::vector<Case> cases = {
      {[](v1::TrialAssignment& t) { t.mutable_executor()->mutable_slurm()->set_gpus(24); },
       "needs 3 nodes of 8 GPUs; this agent submits at most 2"},
      {[](v1::TrialAssignment& t) { t.mutable_executor()->mutable_slurm()->set_gpus(12); },
       "12 GPUs are not a whole number of nodes of 8"},
      {[](v1::TrialAssignment& t) { t.mutable_executor()->mutable_slurm()->set_partition("vip"); },
       "partition 'vip' is not allowed"},
      {[](v1::TrialAssignment& t) { t.mutable_executor()->mutable_slurm()->set_account("boss"); },
       "account 'boss' is not allowed"},
      {[](v1::TrialAssignment& t) { t.mutable_executor()->mutable_slurm()->set_time_limit_min(10000); },
       "time_limit_min 10000 is over this agent's limit"},
      {[](v1::TrialAssignment& t) {
         t.mutable_executor()->mutable_slurm()->add_sbatch_options("--reservation=x");
       },
       "sbatch option --reservation is not allowed"},
      {[](v1::TrialAssignment& t) {
         t.mutable_executor()->mutable_slurm()->add_sbatch_options("--uid=0");
       },
       "--uid is set by InfraRSI"},
      {[](v1::TrialAssignment& t) {
         t.mutable_executor()->mutable_process()->set_workdir("/etc");
       },
       "workdir '/etc' is outside the workdir root"},
  };
  for (const Case& c : cases) {
    v1::TrialAssignment t = Trial();
    c.edit(t);
    const v1::TrialOutcome out = Run(t);
    EXPECT_EQ(out.status(), "refused") << c.why;
    EXPECT_NE(out.error().find(c.why), std::string::npos) << out.error();
  }
  EXPECT_TRUE(slurm_->args().empty()) << "nothing outside the policy is submitted";
}

// The controller says a job ended only a while after its script did (on a
// busy host, long enough that CI judged an honest candidate a cheat by its
// whole runs): the run's time reads long by that lag, and the outcome says
// how long it may read. Without the script's "ended" line the agent never
// saw the end: the whole run is all it can say.
TEST_F(SlurmExecutorTest, TheWholeRunsResolutionCoversTheControllersLag) {
  using Steady = std::chrono::steady_clock;
  Steady::time_point started_before, started_after, ended_before, ended_after, lag_done;
  slurm_->behaviour = [&](FakeSlurm& s, const std::string& dir) {
    s.Set("RUNNING");
    started_before = Steady::now();
    FakeSlurm::Start(dir);
    started_after = Steady::now();
    FakeSlurm::Steps(dir, 3);
    s.WaitForQueries(10);  // the trainer at work
    ended_before = Steady::now();
    FakeSlurm::Append(dir + "/events", "ended 0\n");
    ended_after = Steady::now();
    s.WaitForQueries(30);  // the controller's lag
    lag_done = Steady::now();
    s.Set("COMPLETED");
  };
  const v1::TrialOutcome out = Run(Trial());
  ASSERT_EQ(out.status(), "ok") << out.error();
  auto secs = [](Steady::time_point a, Steady::time_point b) {
    return std::chrono::duration<double>(b - a).count();
  };
  // The run lasted at most from before "started" to after "ended"; the
  // outcome may say more, never less, and its resolution covers the rest.
  EXPECT_GE(out.wall_s(), secs(started_after, ended_before));
  EXPECT_GE(out.wall_s(), secs(started_after, lag_done)) << "the controller's lag is in it";
  EXPECT_LE(out.wall_s() - out.wall_resolution_s(), secs(started_before, ended_after))
      << "wall " << out.wall_s() << " s, resolution " << out.wall_resolution_s() << " s";
  EXPECT_GT(out.wall_resolution_s(), 0);
  EXPECT_LE(out.wall_resolution_s(), out.wall_s());

  // No "ended" line: never seen to end.
  slurm_ = std::make_shared<FakeSlurm>();
  slurm_->behaviour = [](FakeSlurm& s, const std::string& dir) {
    s.Set("RUNNING");
    FakeSlurm::Start(dir);
    FakeSlurm::Steps(dir, 3);
    s.Set("COMPLETED");
  };
  const v1::TrialOutcome unseen = Run(Trial());
  ASSERT_EQ(unseen.status(), "ok") << unseen.error();
  EXPECT_EQ(unseen.wall_resolution_s(), unseen.wall_s());
}

TEST_F(SlurmExecutorTest, PendingRenewsTheLeaseAndIsNotRunTime) {
  slurm_->behaviour = [this](FakeSlurm& s, const std::string& dir) {
    sink_.WaitForReports("PENDING", 4);  // at submit, first answer, two renewals
    s.Set("RUNNING");
    FakeSlurm::Start(dir);
    FakeSlurm::Steps(dir, 3);
    s.Set("COMPLETED");
  };
  const v1::TrialOutcome out = Run(Trial());
  EXPECT_EQ(out.status(), "ok");
  // At least two keep-alive periods (200 ms each) were spent queued, and
  // none of it is run time.
  EXPECT_GE(out.slurm().queued_s(), 0.4);
  EXPECT_LT(out.wall_s(), out.slurm().queued_s());
}

struct EndCase {
  std::string name;
  std::function<void(FakeSlurm&, const std::string&)> behaviour;
  std::string status;
  std::string error;  // a part of the outcome's error
};

class SlurmOutcomeTest : public SlurmExecutorTest, public ::testing::WithParamInterface<int> {};

const std::vector<EndCase>& EndCases() {
  static const auto* cases = new std::vector<EndCase>{
      {"host_oom",
       [](FakeSlurm& s, const std::string& dir) {
         FakeSlurm::Start(dir);
         s.Set("OUT_OF_MEMORY", "0:125");
       },
       "oom", "Slurm OUT_OF_MEMORY"},
      {"cuda_oom",
       [](FakeSlurm& s, const std::string& dir) {
         FakeSlurm::Start(dir);
         FakeSlurm::Append(dir + "/job.out", "RuntimeError: CUDA out of memory. Tried to allocate\n");
         s.Set("FAILED", "1:0");
       },
       "oom", "out of memory"},
      {"timeout",
       [](FakeSlurm& s, const std::string& dir) {
         FakeSlurm::Start(dir);
         s.Set("TIMEOUT", "0:15");
       },
       "timeout", "Slurm TIMEOUT"},
      {"node_fail",
       [](FakeSlurm& s, const std::string& dir) {
         FakeSlurm::Start(dir);
         s.down = {"node2"};
         s.Set("NODE_FAIL", "0:15");
       },
       "infra", "Slurm NODE_FAIL (slurm job 41 on node1,node2); down: node2"},
      {"preempted",
       [](FakeSlurm& s, const std::string& dir) {
         FakeSlurm::Start(dir);
         s.Set("PREEMPTED", "0:15");
       },
       "infra", "Slurm PREEMPTED"},
      {"boot_fail", [](FakeSlurm& s, const std::string&) { s.Set("BOOT_FAIL", "0:0"); }, "infra",
       "Slurm BOOT_FAIL"},
      {"requeued",
       [](FakeSlurm& s, const std::string& dir) {
         FakeSlurm::Start(dir);
         s.Set("RUNNING", "0:0", /*restarts=*/1);
         s.WaitCancelled();
       },
       "infra", "requeued by Slurm"},
      {"failed",
       [](FakeSlurm& s, const std::string& dir) {
         FakeSlurm::Start(dir);
         FakeSlurm::Append(dir + "/job.out", "Traceback...\nValueError: bad shape\n");
         s.Set("FAILED", "3:0");
       },
       "failed", "exit code 3:0 (slurm job 41 on node1,node2): Traceback...\nValueError: bad shape"},
      {"node_lost_at_launch",
       [](FakeSlurm& s, const std::string& dir) {
         FakeSlurm::Start(dir);
         FakeSlurm::Append(dir + "/job.out",
                           "srun: error: Task launch for StepId=41.0 failed on node node2: "
                           "Communication connection failure\n");
         s.Set("FAILED", "233:0");
       },
       "infra", "node failure (slurm job 41 on node1,node2); failed: node2"},
      {"cancelled_by_an_admin",
       [](FakeSlurm& s, const std::string& dir) {
         FakeSlurm::Start(dir);
         s.Set("CANCELLED", "0:15");
       },
       "infra", "Slurm CANCELLED"},
      {"vanished",
       [](FakeSlurm& s, const std::string& dir) {
         FakeSlurm::Start(dir);
         s.Forget();
       },
       "infra", "Slurm lost the job"},
  };
  return *cases;
}

TEST_P(SlurmOutcomeTest, EverySlurmEndIsClassified) {
  const EndCase& c = EndCases()[static_cast<size_t>(GetParam())];
  slurm_->behaviour = c.behaviour;
  const v1::TrialOutcome out = Run(Trial());
  EXPECT_EQ(out.status(), c.status) << c.name << ": " << out.error();
  EXPECT_NE(out.error().find(c.error), std::string::npos) << c.name << ": " << out.error();
  EXPECT_EQ(out.slurm().job_id(), "41") << c.name;
  if (c.name == "node_fail" || c.name == "node_lost_at_launch") {
    ASSERT_EQ(out.slurm().failed_nodes_size(), 1);
    EXPECT_EQ(out.slurm().failed_nodes(0), "node2");
  }
}

INSTANTIATE_TEST_SUITE_P(States, SlurmOutcomeTest, ::testing::Range(0, 11),
                         [](const ::testing::TestParamInfo<int>& i) {
                           return EndCases()[static_cast<size_t>(i.param)].name;
                         });

TEST_F(SlurmExecutorTest, ALostLeaseCancelsTheJob) {
  sink_.stop_after_jobs = 2;  // the server refuses the second report
  slurm_->behaviour = [](FakeSlurm& s, const std::string& dir) {
    s.Set("RUNNING");
    FakeSlurm::Start(dir);
    s.WaitCancelled();
  };
  const v1::TrialOutcome out = Run(Trial());
  EXPECT_EQ(out.status(), "failed");
  EXPECT_NE(out.error().find("stopped: lease lost or session cancelled"), std::string::npos)
      << out.error();
  EXPECT_GE(slurm_->cancels(), 1);
}

TEST_F(SlurmExecutorTest, TheTrialsTimeoutCancelsTheJob) {
  v1::TrialAssignment t = Trial();
  t.mutable_executor()->mutable_process()->set_timeout_s(1);
  slurm_->behaviour = [](FakeSlurm& s, const std::string& dir) {
    s.Set("RUNNING");
    FakeSlurm::Start(dir);
    s.WaitCancelled();
  };
  const v1::TrialOutcome out = Run(t);
  EXPECT_EQ(out.status(), "timeout");
  EXPECT_NE(out.error().find("killed after the 1 s timeout"), std::string::npos) << out.error();
  EXPECT_GE(out.wall_s(), 1.0);
}

TEST_F(SlurmExecutorTest, AnAgentShuttingDownCancelsItsJobAsInfra) {
  std::unique_ptr<SlurmExecutor> ex = *SlurmExecutor::Create(Opts());
  slurm_->behaviour = [&ex](FakeSlurm& s, const std::string& dir) {
    s.Set("RUNNING");
    FakeSlurm::Start(dir);
    ex->Abort();
    s.WaitCancelled();
  };
  auto out = ex->Run(Trial(), &sink_);
  ASSERT_TRUE(out.ok());
  EXPECT_EQ(out->status(), "infra");
  EXPECT_NE(out->error().find("the agent is shutting down"), std::string::npos) << out->error();
}

TEST_F(SlurmExecutorTest, SubmitFailuresAreTheLaunchersOrTheInfrastructures) {
  slurm_->submit_error = absl::InvalidArgumentError("sbatch: error: invalid partition specified: x");
  v1::TrialOutcome out = Run(Trial());
  EXPECT_EQ(out.status(), "failed");
  EXPECT_NE(out.error().find("launcher: sbatch: error: invalid partition"), std::string::npos);
  slurm_->submit_error = absl::UnavailableError("sbatch: error: Unable to contact slurm controller");
  out = Run(Trial());
  EXPECT_EQ(out.status(), "infra");
}

// A simulated trial's job runs the operator's simulator command, and its
// outcome is the simulator's (on the simulator's clock), with the job's.
TEST_F(SlurmExecutorTest, ASimulatedTrialTakesTheSimulatorsOutcome) {
  v1::TrialAssignment t = Trial();
  t.mutable_executor()->clear_process();
  t.mutable_executor()->mutable_sim()->set_timed_steps(2);
  EXPECT_NE(Run(t).error().find("no simulator command"), std::string::npos);
  t.set_lease_token("lease-credential");
  std::string written;  // the assignment as the job would read it
  slurm_->behaviour = [&written](FakeSlurm& s, const std::string& dir) {
    s.Set("RUNNING");
    FakeSlurm::Start(dir);
    std::ifstream in(dir + "/assignment.pb", std::ios::binary);
    written.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
    v1::TrialOutcome simulated;
    simulated.set_status("oom");
    simulated.set_peak_mem_gib(212);
    std::ofstream(dir + "/outcome.pb", std::ios::binary) << simulated.SerializeAsString();
    s.Set("COMPLETED");
  };
  SlurmExecutor::Options o = Opts();
  o.sim_command = "/opt/infrarsi/bin/infrarsi-agent";
  const v1::TrialOutcome out = Run(t, o);
  EXPECT_EQ(out.status(), "oom");
  EXPECT_EQ(out.peak_mem_gib(), 212);
  EXPECT_EQ(out.clock(), "simulated");
  EXPECT_EQ(out.slurm().state(), "COMPLETED");
  // The lease token (a credential) is not written to the shared filesystem.
  v1::TrialAssignment job_view;
  ASSERT_TRUE(job_view.ParseFromString(written));
  EXPECT_EQ(job_view.trial_id(), t.trial_id());
  EXPECT_TRUE(job_view.lease_token().empty());
}

// A controller that stops answering (the first real run hung here: the
// commands had no SLURM_CONF) ends the trial as the infrastructure's.
TEST_F(SlurmExecutorTest, AControllerThatNeverAnswersIsInfra) {
  slurm_->silent = true;
  SlurmExecutor::Options o = Opts();
  o.unreachable_grace = absl::Milliseconds(200);
  const v1::TrialOutcome out = Run(Trial(), o);
  EXPECT_EQ(out.status(), "infra");
  EXPECT_NE(out.error().find("no answer from Slurm"), std::string::npos) << out.error();
  EXPECT_NE(out.error().find("Unable to contact slurm controller"), std::string::npos) << out.error();
  EXPECT_GE(slurm_->cancels(), 1);
}

// A job that never leaves the queue (a partition that is down) is
// cancelled after max_pending and its trial handed back.
TEST_F(SlurmExecutorTest, AJobPendingTooLongIsCancelledAsInfra) {
  slurm_->behaviour = [](FakeSlurm& s, const std::string&) { s.WaitCancelled(); };
  SlurmExecutor::Options o = Opts();
  o.max_pending = absl::Milliseconds(100);
  const v1::TrialOutcome out = Run(Trial(), o);
  EXPECT_EQ(out.status(), "infra");
  EXPECT_NE(out.error().find("pending in Slurm's queue for 100ms"), std::string::npos)
      << out.error();
  EXPECT_EQ(out.wall_s(), 0);  // it never ran
}

// The operator's placement policy also comes from the policy file; every
// field is checked, naming it.
TEST(AgentPolicyFileTest, TheSlurmSection) {
  auto p = ParseAgentPolicy(R"(
executors: [slurm]
commands: [torchrun]
slurm:
  gpus_per_node: 4
  max_nodes: 8
  shared_dir: /shared/infrarsi
  partition: gpu
  partitions: [gpu, debug]
  accounts: [llm]
  qos: [high]
  max_time_min: 240
  allow_options: [--constraint]
  options: [--constraint=h200]
  max_pending_h: 2.5
)");
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(p->slurm.gpus_per_node, 4);
  EXPECT_EQ(p->slurm.max_nodes, 8);
  EXPECT_EQ(p->slurm.shared_dir, "/shared/infrarsi");
  EXPECT_EQ(p->slurm.partitions, (std::vector<std::string>{"gpu", "debug"}));
  EXPECT_EQ(p->slurm.options, (std::vector<std::string>{"--constraint=h200"}));
  EXPECT_EQ(p->slurm.max_pending_h, 2.5);
  EXPECT_FALSE(p->slurm.account.has_value());
  EXPECT_EQ(ParseAgentPolicy("slurm: {max_nodes: 0}").status().message(),
            "policy.slurm.max_nodes: must be an integer in [1, 4096]");
  EXPECT_EQ(ParseAgentPolicy("slurm: {partitons: [gpu]}").status().message().rfind(
                "policy.slurm.partitons: unknown field", 0),
            0u);
  EXPECT_EQ(ParseAgentPolicy("slurm: [gpu]").status().message(), "policy.slurm: must be a mapping");
}

TEST(AgentPolicyFileTest, TheSandbox) {
  auto p = ParseAgentPolicy("sandbox: on\ntrial_uids: 6200000-6200099\n");
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(p->sandbox, "on");
  EXPECT_EQ(p->trial_uids, "6200000-6200099");
  EXPECT_FALSE(ParseAgentPolicy("")->sandbox.has_value());
  EXPECT_EQ(ParseAgentPolicy("sandbox: maybe").status().message(), "policy.sandbox: must be on or off");
}

TEST(SlurmClientTest, ParsesScontrolsJobLine) {
  const SlurmClient::Job j = ParseScontrolJob(
      "JobId=12 JobName=x UserId=root(0) JobState=NODE_FAIL Reason=NodeDown Dependency=(null) "
      "Requeue=0 Restarts=2 BatchFlag=1 ExitCode=0:15 NodeList=node[1-2] BatchHost=node1\n");
  EXPECT_TRUE(j.known);
  EXPECT_EQ(j.state, "NODE_FAIL");
  EXPECT_EQ(j.reason, "NodeDown");
  EXPECT_EQ(j.exit_code, "0:15");
  EXPECT_EQ(j.restarts, 2);
  EXPECT_EQ(j.nodes, "node[1-2]");
  EXPECT_FALSE(ParseScontrolJob("").known);
}

// What the agent checks of the cluster's own isolation (docs/operations.md
// asks for proctrack/cgroup and job_container/tmpfs).
TEST(SlurmClientTest, ParsesTheClustersIsolationFromScontrolShowConfig) {
  const auto iso = ParseScontrolConfig(
      "Configuration data as of 2026-12-01T20:00:00\nAccountingStorageType   = (null)\n"
      "JobContainerType        = job_container/tmpfs\nProctrackType           = proctrack/cgroup\n");
  EXPECT_EQ(iso.proctrack, "proctrack/cgroup");
  EXPECT_EQ(iso.job_container, "job_container/tmpfs");
  const auto bare = ParseScontrolConfig("ProctrackType = proctrack/linuxproc\nJobContainerType = (null)\n");
  EXPECT_EQ(bare.proctrack, "proctrack/linuxproc");
  EXPECT_EQ(bare.job_container, "");
}

TEST(SlurmExecutorCreateTest, AnUnsafePolicyIsRefused) {
  SlurmExecutor::Options o;
  o.scratch_root = "/tmp";
  o.allow_root = true;
  EXPECT_NE(SlurmExecutor::Create(o).status().message().find("allowed_commands"), std::string::npos);
  o.allow_any_command = true;
  o.allowed_options = {"--uid"};
  EXPECT_NE(SlurmExecutor::Create(o).status().message().find("allowed_options"), std::string::npos);
  o.allowed_options = {"--ui"};  // sbatch reads it as --uid
  EXPECT_NE(SlurmExecutor::Create(o).status().message().find("allowed_options"), std::string::npos);
  o.allowed_options = {};
  o.env_allow = {"INFRARSI_TOKEN"};
  EXPECT_NE(SlurmExecutor::Create(o).status().message().find("env_allow"), std::string::npos);
  if (geteuid() == 0) {
    o.env_allow = {};
    o.allow_root = false;
    EXPECT_NE(SlurmExecutor::Create(o).status().message().find("run_as"), std::string::npos);
  }
}

}  // namespace
}  // namespace infrarsi::client
