// The slurm executor on a real Slurm: the two-node cluster of
// deploy/slurm/local-cluster.sh, started by tests/deploy/run_slurm_test.sh,
// which sets SLURM_CONF and INFRARSI_SLURM_DIR (the cluster's folder, for
// killing and restarting a node). Skipped without them.
//
// A 2-node trial of a stand-in trainer that checks its rendezvous and
// writes metrics from rank 0; a CUDA out-of-memory; a failure with its
// output; the trial's timeout; a lost lease; a node failure (one slurmd
// killed mid-trial); and a whole session through server and agent.
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <condition_variable>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <ctime>
#include <set>
#include <thread>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "client/agent/executors/slurm_client.h"
#include "client/agent/executors/slurm_executor.h"
#include "tests/integration/end_to_end_fixture.h"
#include "tests/testing/subprocess.h"

namespace infrarsi {
namespace {

namespace fs = std::filesystem;
using client::CommandSlurmClient;
using client::SlurmExecutor;

const std::string kTrainer = std::string(INFRARSI_SOURCE_DIR) + "/tests/testing/slurm_trainer.py";

// Slurm's commands for the test's own questions, on the test's cluster.
CommandSlurmClient Slurm() {
  CommandSlurmClient::Options o;
  o.env.push_back(absl::StrCat("SLURM_CONF=", std::getenv("SLURM_CONF")));
  return CommandSlurmClient(o);
}

std::string ClusterDir() {
  const char* d = std::getenv("INFRARSI_SLURM_DIR");
  return d == nullptr ? "" : d;
}

// Records reports; says stop once `stop_when_running` and the job runs.
class Sink : public client::ProgressSink {
 public:
  bool OnSteps(const std::vector<v1::StepMetrics>& steps) override {
    std::lock_guard<std::mutex> lock(mu);
    steps_seen.insert(steps_seen.end(), steps.begin(), steps.end());
    states.push_back(job.state());
    cv.notify_all();
    return !(stop_when_running && job.state() == "RUNNING");
  }
  void SetJob(const v1::SlurmJob& j) override {
    std::lock_guard<std::mutex> lock(mu);
    job = j;
  }
  void WaitForSteps(size_t n) {
    std::unique_lock<std::mutex> lock(mu);
    cv.wait(lock, [&] { return steps_seen.size() >= n; });
  }
  std::mutex mu;
  std::condition_variable cv;
  std::vector<v1::StepMetrics> steps_seen;
  std::vector<std::string> states;
  v1::SlurmJob job;
  bool stop_when_running = false;
};

class SlurmClusterTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (std::getenv("SLURM_CONF") == nullptr || ClusterDir().empty()) {
      GTEST_SKIP() << "no local Slurm (run through tests/deploy/run_slurm_test.sh)";
    }
    dir_ = testing::MakeTempDir("slurm-it");
  }
  void TearDown() override {
    if (!dir_.empty()) fs::remove_all(dir_);
  }
  std::unique_ptr<SlurmExecutor> Executor() {
    SlurmExecutor::Options o;
    o.scratch_root = dir_ + "/scratch";  // this machine is every node: shared
    o.gpus_per_node = 8;
    o.max_nodes = 2;
    o.allow_any_command = true;
    o.allow_root = true;
    o.workdir_root = dir_;
    o.query_interval = absl::Milliseconds(100);
    auto ex = SlurmExecutor::Create(o);
    EXPECT_TRUE(ex.ok()) << ex.status();
    return *std::move(ex);
  }
  v1::TrialAssignment Trial(int nodes, const std::string& mode, int timeout_s = 120) {
    v1::TrialAssignment t;
    t.set_trial_id(++next_id_);
    t.set_session_id("ses-slurm");
    t.set_attempt(1);
    t.set_lease_timeout_ms(3000);
    (*t.mutable_config())["ms"] = "100";
    v1::ProcessSpec* p = t.mutable_executor()->mutable_process();
    for (const std::string& a : {std::string("python3"), kTrainer, std::string("--nodes"),
                                 absl::StrCat(nodes), std::string("--mode"), mode,
                                 std::string("--step-ms"), std::string("{ms}")}) {
      p->add_argv(a);
    }
    p->set_workdir(dir_);
    p->set_timeout_s(timeout_s);
    t.mutable_executor()->mutable_slurm()->set_gpus(8 * nodes);
    return t;
  }
  std::string dir_;
  int next_id_ = 100;
};

TEST_F(SlurmClusterTest, ATwoNodeTrialRunsAsOneJobWithItsRendezvous) {
  Sink sink;
  auto out = Executor()->Run(Trial(2, "ok"), &sink);
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ(out->status(), "ok") << out->error();
  EXPECT_EQ(out->slurm().state(), "COMPLETED");
  EXPECT_EQ(out->slurm().nodes(), "node1,node2");
  EXPECT_FALSE(out->slurm().job_id().empty());
  // Rank 0's lines, each timed on the agent's clock from the job's start.
  ASSERT_EQ(sink.steps_seen.size(), 5u);
  for (const auto& s : sink.steps_seen) EXPECT_GT(s.arrival_s(), 0);
  EXPECT_GE(out->wall_s(), sink.steps_seen.back().arrival_s());
  EXPECT_GE(out->slurm().queued_s(), 0);
}

TEST_F(SlurmClusterTest, ACudaOutOfMemoryIsOom) {
  Sink sink;
  auto out = Executor()->Run(Trial(2, "oom"), &sink);
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ(out->status(), "oom") << out->error();
  EXPECT_EQ(out->slurm().state(), "FAILED");
}

TEST_F(SlurmClusterTest, AFailureKeepsTheTailOfItsOutput) {
  Sink sink;
  auto out = Executor()->Run(Trial(1, "fail"), &sink);
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ(out->status(), "failed");
  EXPECT_NE(out->error().find("exit code 3:0"), std::string::npos) << out->error();
  EXPECT_NE(out->error().find("loss diverged"), std::string::npos) << out->error();
}

TEST_F(SlurmClusterTest, TheTrialsTimeoutCancelsTheJob) {
  Sink sink;
  auto out = Executor()->Run(Trial(2, "sleep", /*timeout_s=*/3), &sink);
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ(out->status(), "timeout") << out->error();
  EXPECT_EQ(out->slurm().state(), "CANCELLED");
  auto job = Slurm().Query(out->slurm().job_id());
  ASSERT_TRUE(job.ok());
  EXPECT_TRUE(!job->known || job->state == "CANCELLED") << job->state;
}

TEST_F(SlurmClusterTest, ALostLeaseCancelsTheJob) {
  Sink sink;
  sink.stop_when_running = true;
  auto out = Executor()->Run(Trial(2, "sleep"), &sink);
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ(out->status(), "failed");
  EXPECT_NE(out->error().find("stopped"), std::string::npos) << out->error();
  EXPECT_EQ(out->slurm().state(), "CANCELLED");
}

TEST_F(SlurmClusterTest, ANodeFailureIsInfraAndNamesTheNode) {
  const std::string cluster = ClusterDir();
  Sink sink;
  auto ex = Executor();
  v1::TrialOutcome out;
  std::thread run([&] {
    auto r = ex->Run(Trial(2, "sleep"), &sink);
    ASSERT_TRUE(r.ok()) << r.status();
    out = *r;
  });
  // Every rank joined (rank 0's warm-up line): the step runs on both nodes.
  sink.WaitForSteps(1);
  // node2's slurmd dies mid-trial.
  pid_t pid = 0;
  std::ifstream(cluster + "/slurmd-node2.pid") >> pid;
  ASSERT_GT(pid, 0);
  ASSERT_EQ(kill(pid, SIGKILL), 0);
  run.join();
  // node2 comes back for the tests after this one, whatever this one saw.
  testing::Subprocess restart({"/usr/sbin/slurmd", "-f", std::getenv("SLURM_CONF"), "-N", "node2"},
                              dir_ + "/slurmd-restart.log");
  restart.Wait();
  EXPECT_EQ(out.status(), "infra") << out.error();
  EXPECT_EQ(out.slurm().state(), "NODE_FAIL") << out.error();
  EXPECT_EQ(out.slurm().failed_nodes_size(), 1) << out.error();
  if (out.slurm().failed_nodes_size() > 0) {
    EXPECT_EQ(out.slurm().failed_nodes(0), "node2");
  }
  CommandSlurmClient slurm = Slurm();
  for (int i = 0; i < 300; ++i) {
    auto down = slurm.DownNodes({"node2"});
    if (down.ok() && down->empty()) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));  // a real daemon's restart
  }
  auto down = slurm.DownNodes({"node2"});
  ASSERT_TRUE(down.ok());
  EXPECT_TRUE(down->empty()) << "node2 did not come back";
}

// A whole session through infrarsi-server and a slurm agent: 16 GPUs of
// two 8-GPU nodes, every trial one 2-node job.
class SlurmSessionTest : public EndToEndTest {
 protected:
  void SetUp() override {
    if (std::getenv("SLURM_CONF") == nullptr || ClusterDir().empty()) {
      GTEST_SKIP() << "no local Slurm (run through tests/deploy/run_slurm_test.sh)";
    }
    EndToEndTest::SetUp();
  }
  // A spec whose trials run the stand-in trainer as `nodes`-node jobs of 8
  // GPUs per node, with `args` after its --nodes; `ms` is the step time knob.
  std::string Spec(const std::string& name, int nodes, const std::string& ms,
                   const std::string& baseline, const std::string& args) {
    return WriteFile("specs/" + name + ".yaml", absl::StrCat(R"(
name: )", name, R"(
workload: {model: fake, global_batch: 32, seq_len: 128}
hardware: {gpu: H200, count: )", 8 * nodes, R"(}
knobs:
  ms: )", ms, R"(
baseline: {ms: )", baseline, R"(}
budget: {max_trials: 2}
doctor: {repeats: 2}
verify: {candidates: 1, runs: 2}
executor:
  process:
    command: "python3 )", kTrainer, " --nodes ", nodes, " ", args, R"( --step-ms {ms}"
    timeout_s: 600
  slurm: {}
)"));
  }
};

TEST_F(SlurmSessionTest, ASessionRunsAsTwoNodeSlurmJobs) {
  StartServer();
  StartAgent("slurm", "H200", 0,
             {"--slurm-gpus-per-node", "8", "--slurm-max-nodes", "2", "--slurm-query-interval-s",
              "0.1"});
  const std::string spec = Spec("two-node-job", 2, "[300, 400]", "400", "--steps 4");
  const std::string id = CliCreate(spec);
  CliDoctorAndRun(id);
  auto rep = client_->Report(id);
  ASSERT_TRUE(rep.ok()) << rep.status();
  EXPECT_EQ(rep->stage(), "searched");
  int jobs = 0;
  for (const auto& t : rep->trials()) {
    EXPECT_EQ(t.status(), "ok") << t.id() << ": " << t.error();
    EXPECT_FALSE(t.slurm().job_id().empty()) << t.id();
    EXPECT_EQ(t.slurm().nodes(), "node1,node2") << t.id();
    EXPECT_EQ(t.slurm().state(), "COMPLETED") << t.id();
    ++jobs;
  }
  EXPECT_GE(jobs, 4);
  EXPECT_GT(rep->best().speedup(), 1.1);  // 300 ms steps against 400
  // The report as the CLI prints it names the jobs.
  std::string out, err;
  ASSERT_EQ(Cli({"report", id}, &out, &err), 0) << err;
  EXPECT_NE(out.find("slurm job"), std::string::npos) << out;
}

// Load through Slurm: one slurm agent with four slots drives three
// sessions of 1-node trials at once; nothing is lost or run twice, and the
// jobs overlap in Slurm (the agent keeps several in the queue).
TEST_F(SlurmSessionTest, ThreeSessionsShareASlurmAgentsSlots) {
  StartServer();
  StartAgent("slurm", "H200", 0,
             {"--slurm-gpus-per-node", "8", "--slurm-max-nodes", "2", "--slurm-query-interval-s",
              "0.1", "--slots", "4"});
  std::vector<std::string> ids;
  for (int i = 0; i < 3; ++i) {
    const std::string spec =
        Spec(absl::StrCat("load-", i), 1, "[100, 150]", "150", "--steps 3");
    ids.push_back(CliCreate(spec));
  }
  // The three sessions' doctors at once, then their runs.
  std::vector<std::thread> drivers;
  for (const std::string& id : ids) {
    drivers.emplace_back([this, id] { CliDoctorAndRun(id); });
  }
  for (std::thread& d : drivers) d.join();
  std::set<std::string> jobs;
  std::vector<std::pair<std::string, std::string>> spans;  // start, end (scontrol's, seconds)
  CommandSlurmClient slurm = Slurm();
  for (const std::string& id : ids) {
    auto rep = client_->Report(id);
    ASSERT_TRUE(rep.ok()) << rep.status();
    EXPECT_EQ(rep->stage(), "searched") << id;
    for (const auto& t : rep->trials()) {
      EXPECT_EQ(t.status(), "ok") << t.id() << ": " << t.error();
      EXPECT_EQ(t.attempts(), 1) << t.id();
      EXPECT_TRUE(jobs.insert(t.slurm().job_id()).second) << "job " << t.slurm().job_id() << " twice";
    }
  }
  EXPECT_GE(jobs.size(), 3u * 6u);
  // The agent kept several jobs in Slurm at once: a job was submitted
  // before another one it had submitted ended. (Not whether Slurm ran them
  // at once: the local scheduler starts about one job per pass.)
  std::vector<std::pair<int64_t, int64_t>> runs;
  for (const std::string& job : jobs) {
    testing::Subprocess p({"/usr/bin/scontrol", "show", "job", "-o", job}, "/dev/null");
    const std::string line = p.ReadAll();
    p.Wait();
    auto field = [&](const std::string& key) {
      const size_t at = line.find(" " + key + "=");
      return at == std::string::npos ? std::string()
                                     : line.substr(at + key.size() + 2,
                                                   line.find(' ', at + 1) - at - key.size() - 2);
    };
    std::tm submitted{}, end{};
    if (strptime(field("SubmitTime").c_str(), "%Y-%m-%dT%H:%M:%S", &submitted) == nullptr ||
        strptime(field("EndTime").c_str(), "%Y-%m-%dT%H:%M:%S", &end) == nullptr) {
      continue;
    }
    runs.emplace_back(timegm(&submitted), timegm(&end));
  }
  ASSERT_GE(runs.size(), jobs.size() / 2) << "scontrol forgot the jobs";
  std::sort(runs.begin(), runs.end());
  bool overlap = false;
  int64_t latest_end = runs.front().second;
  for (size_t i = 1; i < runs.size(); ++i) {
    overlap = overlap || runs[i].first < latest_end;
    latest_end = std::max(latest_end, runs[i].second);
  }
  EXPECT_TRUE(overlap) << "the agent kept one job at a time in Slurm";
}

// An agent told to stop (SIGTERM, as systemd does) cancels its job in
// Slurm and hands the trial back as the infrastructure's: it runs again,
// not held against its setting.
TEST_F(SlurmSessionTest, AnAgentStoppingCancelsItsJob) {
  StartServer();
  testing::Subprocess& agent = StartAgent(
      "slurm", "H200", 0, {"--slurm-max-nodes", "2", "--slurm-query-interval-s", "0.1"});
  const std::string spec = Spec("stopped-agent", 2, "[100, 150]", "150", "--mode sleep");
  const std::string id = CliCreate(spec);
  v1::DoctorRequest d;
  d.set_session_id(id);
  ASSERT_TRUE(client_->Doctor(d).ok());
  // Its first job runs in Slurm.
  std::string job;
  for (int i = 0; i < 600 && job.empty(); ++i) {
    auto rep = client_->Report(id);
    ASSERT_TRUE(rep.ok());
    for (const auto& t : rep->trials()) {
      if (t.slurm().state() == "RUNNING") job = t.slurm().job_id();
    }
    if (job.empty()) std::this_thread::sleep_for(std::chrono::milliseconds(100));  // a real job starting
  }
  ASSERT_FALSE(job.empty()) << "no job ran";
  agent.Signal(SIGTERM);
  EXPECT_EQ(agent.Wait(), 0);
  auto gone = Slurm().Query(job);
  ASSERT_TRUE(gone.ok());
  EXPECT_TRUE(!gone->known || gone->state == "CANCELLED") << gone->state;
  auto rep = client_->Report(id);
  ASSERT_TRUE(rep.ok());
  bool requeued = false;
  for (const auto& t : rep->trials()) {
    if (t.slurm().job_id() != job) continue;
    requeued = t.status() == "queued" &&
               absl::StrContains(t.note(), "infrastructure: the agent is shutting down");
    EXPECT_TRUE(requeued) << t.status() << ": " << t.note();
  }
  EXPECT_TRUE(requeued);
}

// The simulator through Slurm: the 2-node MoE reference workload, every
// trial a 2-node job whose rank 0 runs `infrarsi-agent simulate`; the
// outcomes are the simulator's, the jobs Slurm's.
TEST_F(SlurmSessionTest, TheSimulatorRunsAsSlurmJobs) {
  StartServer();
  StartAgent("slurm", "H200", 0, {"--slurm-max-nodes", "2", "--slurm-query-interval-s", "0.1"});
  std::string yaml =
      ReadText(std::string(INFRARSI_SOURCE_DIR) + "/deploy/workloads/moe-8x7b-2x8-h200.yaml");
  yaml = absl::StrReplaceAll(yaml, {{"executor:\n  sim:", "verify: {candidates: 1, runs: 2}\nexecutor:\n  slurm: {}\n  sim:"}});
  ASSERT_NE(yaml.find("slurm: {}"), std::string::npos);
  const std::string id = CliCreate(WriteFile("specs/moe-slurm.yaml", yaml));
  CliDoctorAndRun(id, {"--repeats", "2"}, {"--max-trials", "4"});
  auto rep = client_->Report(id);
  ASSERT_TRUE(rep.ok()) << rep.status();
  EXPECT_EQ(rep->stage(), "searched");
  int simulated_ok = 0;
  for (const auto& t : rep->trials()) {
    EXPECT_FALSE(t.slurm().job_id().empty()) << t.id();
    EXPECT_EQ(t.slurm().nodes(), "node1,node2") << t.id();
    EXPECT_EQ(t.slurm().state(), "COMPLETED") << t.id() << ": " << t.error();
    if (t.status() == "ok") {
      ++simulated_ok;
      EXPECT_GT(t.step_time_s(), 0.5) << "a simulated MoE step, not the job's seconds";
    }
  }
  EXPECT_GE(simulated_ok, 2);
}

}  // namespace
}  // namespace infrarsi
