// The end-to-end fixture: infrarsi-server on port 0, infrarsi-agent
// processes, the infrarsi CLI, all real processes. Waiting is done on events
// (WatchSession) and on the processes' output, never by sleeping. Shared by
// the end-to-end tests and the tenancy (attack) tests.
#ifndef INFRARSI_TESTS_INTEGRATION_END_TO_END_FIXTURE_H_
#define INFRARSI_TESTS_INTEGRATION_END_TO_END_FIXTURE_H_

#include <gtest/gtest.h>
#include <pwd.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/strip.h"
#include "client/rpc_client.h"
#include "tests/testing/git_repo.h"
#include "tests/testing/subprocess.h"

namespace infrarsi {

namespace e2e_fs = std::filesystem;


inline const std::string kLandscape =
    std::string(INFRARSI_SOURCE_DIR) + "/data/landscapes/h200-gpt-354m-seq2048.jsonl";

class EndToEndTest : public ::testing::Test {
 protected:
  void SetUp() override { dir_ = testing::MakeTempDir("e2e"); }
  void TearDown() override {
    agents_.clear();
    server_.reset();
    // KEEP_E2E=1 keeps the folder (logs, database) for a post-mortem.
    if (!getenv("KEEP_E2E")) e2e_fs::remove_all(dir_);
  }

  // Starts the server; `listen` defaults to a free port.
  void StartServer(const std::string& listen = "127.0.0.1:0", double lease_timeout_s = 30) {
    std::vector<std::string> argv = {INFRARSI_SERVER_BIN, "--listen", listen, "--db",
                                     dir_ + "/infrarsi.db", "--lease-timeout-s",
                                     absl::StrCat(lease_timeout_s), "--log-level", "warn",
                                     "--http-listen", "127.0.0.1:0"};
    argv.insert(argv.end(), server_extra_.begin(), server_extra_.end());
    server_ = std::make_unique<testing::Subprocess>(argv, dir_ + "/server.log");
    address_ = server_->WaitForLinePrefix("infrarsi-server listening on ");
    ASSERT_FALSE(address_.empty()) << "server did not start; see " << dir_ << "/server.log";
    // The dashboard, on a port of its own (the second line).
    dashboard_ = server_->WaitForLinePrefix("infrarsi-server dashboard on ");
    ASSERT_FALSE(dashboard_.empty()) << "no dashboard; see " << dir_ << "/server.log";
    client::RpcClient::Options o;
    o.server = address_;
    client_ = *client::RpcClient::Create(o);
  }

  // Agent n's pool of trial ids: disjoint from every other agent's.
  static std::string TrialUids(int n) {
    const int first = 6200000 + 256 * n;
    return absl::StrCat(first, "-", first + 255);
  }

  testing::Subprocess& StartAgent(const std::string& executors, const std::string& gpu = "H200",
                         int gpus = 1, const std::vector<std::string>& extra = {}) {
    const int n = static_cast<int>(agents_.size());
    std::vector<std::string> argv = {INFRARSI_AGENT_BIN, "--server", address_, "--gpu-model", gpu,
                                     "--executors", executors,
                                     "--lease-wait-s", "1", "--scratch",
                                     absl::StrCat(dir_, "/scratch-", n), "--host",
                                     absl::StrCat("node-", n), "--log-level", "warn"};
    // A slurm agent registers its cluster's GPUs (--slurm-max-nodes x
    // --slurm-gpus-per-node), not a count of its own.
    if (executors != "slurm") argv.insert(argv.end(), {"--gpu-count", absl::StrCat(gpus)});
    const bool runs_code = absl::StrContains(executors, "process") || executors == "slurm";
    // Tenants' code: these tests' own programs, in this test's folder, as
    // the user running the tests (root in CI, said deliberately).
    if (runs_code && std::find(extra.begin(), extra.end(), "--allow-command") == extra.end()) {
      for (const char* flag : {"--allow-any-command"}) argv.push_back(flag);
    }
    auto given = [&](const char* flag) {
      return std::find(extra.begin(), extra.end(), flag) != extra.end();
    };
    if (runs_code && !given("--run-as") && !given("--trial-uids") && !given("--sandbox")) {
      const std::string me = geteuid() == 0 ? "root" : getpwuid(geteuid())->pw_name;
      if (executors == "slurm") {
        argv.insert(argv.end(), {"--run-as", me});  // jobs run as Slurm runs them
      } else if (geteuid() == 0) {
        // The sandbox as deployed: each trial its own id (a range per agent).
        argv.insert(argv.end(), {"--trial-uids", TrialUids(n)});
      } else {
        // Not root: no ids to switch to, so without the sandbox, deliberately.
        argv.insert(argv.end(), {"--sandbox", "off", "--run-as", me});
      }
    }
    if (runs_code && std::find(extra.begin(), extra.end(), "--workdir-root") == extra.end()) {
      argv.insert(argv.end(), {"--workdir-root", dir_});
    }
    argv.insert(argv.end(), extra.begin(), extra.end());
    agents_.push_back(std::make_unique<testing::Subprocess>(argv, absl::StrCat(dir_, "/agent-", n, ".log")));
    // Registered (with every agent started before it) before the test goes on.
    EXPECT_FALSE(agents_.back()->WaitForLinePrefix("infrarsi-agent registered as ").empty());
    return *agents_.back();
  }

  // Runs the CLI; returns its exit code, stdout in *out, stderr in *err.
  int Cli(const std::vector<std::string>& args, std::string* out, std::string* err = nullptr) {
    std::vector<std::string> argv = {INFRARSI_CLI_BIN, "--server", address_};
    argv.insert(argv.end(), args.begin(), args.end());
    const std::string err_path = dir_ + "/cli.err";
    e2e_fs::remove(err_path);
    testing::Subprocess p(argv, err_path);
    *out = p.ReadAll();
    const int status = p.Wait();
    if (err) {
      std::ifstream in(err_path);
      std::stringstream ss;
      ss << in.rdbuf();
      *err = ss.str();
    }
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  }

  // Creates a session with the CLI, whose stdout must be the id alone.
  std::string CliCreate(const std::string& spec) {
    std::string out, err;
    EXPECT_EQ(Cli({"session", "create", spec}, &out, &err), 0) << err;
    std::string id(absl::StripAsciiWhitespace(out));
    EXPECT_EQ(id.rfind("ses-", 0), 0u) << "stdout must be the id alone: " << out;
    return id;
  }

  // Runs `doctor` then `run` with the CLI; both must succeed.
  void CliDoctorAndRun(const std::string& id, std::vector<std::string> doctor_args = {},
                       std::vector<std::string> run_args = {}) {
    std::string out, err;
    doctor_args.insert(doctor_args.begin(), {"doctor", id});
    run_args.insert(run_args.begin(), {"run", id});
    EXPECT_EQ(Cli(doctor_args, &out, &err), 0) << err;
    EXPECT_EQ(Cli(run_args, &out, &err), 0) << err;
  }

  std::string WriteFile(const std::string& rel, const std::string& content) {
    const e2e_fs::path p = e2e_fs::path(dir_) / rel;
    e2e_fs::create_directories(p.parent_path());
    std::ofstream(p) << content;
    return p.string();
  }

  // A spec replaying the measured H200 landscape. The landscape sits beside
  // the spec's folder: relative paths resolve against the spec file's
  // folder, not the CLI's working directory.
  std::string H200Spec(int max_trials, int doctor, int candidates, int runs) {
    e2e_fs::create_directories(dir_ + "/landscapes");
    e2e_fs::copy_file(kLandscape, dir_ + "/landscapes/h200.jsonl", e2e_fs::copy_options::overwrite_existing);
    return WriteFile("specs/h200.yaml", absl::StrCat(R"(
name: gpt-354m-h200
workload: {model: gpt-354m, global_batch: 16, seq_len: 2048}
hardware: {gpu: H200, count: 1}
knobs:
  micro_batch: [1, 2, 4, 8, 16]
  attn: [math, sdpa]
  ckpt: [false, true]
  precision: [bf16, tf32]
  fused_adam: [false, true]
baseline: {micro_batch: 2, attn: math, ckpt: false, precision: tf32, fused_adam: false}
budget: {max_trials: )", max_trials, R"(}
doctor: {repeats: )", doctor, R"(}
verify: {candidates: )", candidates, ", runs: ", runs, R"(}
executor:
  replay: {landscape: ../landscapes/h200.jsonl}
)"));
  }

  // A spec whose trials run the fake trainer: `ms` is the step time knob.
  std::string ProcessSpec(int max_trials, int steps, int doctor_repeats, int verify_runs = 2) {
    return WriteFile("specs/proc.yaml",
                     absl::StrCat(R"(
name: fake-job
workload: {model: fake, global_batch: 32, seq_len: 128}
hardware: {gpu: H200, count: 1}
knobs:
  ms: [60, 70, 80, 90, 100, 110, 120, 130, 140]
baseline: {ms: 140}
budget: {max_trials: )",
                                  max_trials, R"(}
doctor: {repeats: )",
                                  doctor_repeats, R"(}
verify: {candidates: 1, runs: )",
                                  verify_runs, R"(}
executor:
  process:
    command: ")",
                                  FAKE_TRAINER, " --steps ", steps, R"( --step-ms {ms}"
    timeout_s: 60
)"));
  }

  // A job folder (dir_/job) holding the protected harness and `script` from
  // tests/testing/, run by two process agents on a started server.
  void StartProcessJob(const std::string& script) {
    StartServer();
    StartAgent("process", "cpu", 1);
    StartAgent("process", "cpu", 1);
    e2e_fs::create_directories(dir_ + "/job");
    e2e_fs::copy_file(std::string(INFRARSI_SOURCE_DIR) + "/client/harness/infrarsi_harness.py",
                      dir_ + "/job/infrarsi_harness.py");
    e2e_fs::copy_file(std::string(INFRARSI_SOURCE_DIR) + "/tests/testing/" + script,
                      dir_ + "/job/" + script);
  }

  // A token in a file only the test reads: never on a command line.
  std::string TokenFile(const std::string& token) {
    const std::string path = absl::StrCat(dir_, "/token-", std::hash<std::string>()(token));
    std::ofstream(path) << token << "\n";
    e2e_fs::permissions(path, e2e_fs::perms::owner_read | e2e_fs::perms::owner_write);
    return path;
  }

  // deploy/examples/tiny-gpt's repository, made by its make_repo.sh at
  // `path` (the job the real-training tests tune).
  void MakeTinyGptRepo(const std::string& path) {
    const std::string example = std::string(INFRARSI_SOURCE_DIR) + "/deploy/examples/tiny-gpt";
    testing::Subprocess make({"/bin/sh", example + "/make_repo.sh", path}, dir_ + "/make_repo.log");
    make.ReadAll();
    const int status = make.Wait();
    std::ifstream log(dir_ + "/make_repo.log");
    std::stringstream ss;
    ss << log.rdbuf();
    ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << ss.str();
  }

  // For sessions of real training on a shared CPU (the tiny GPT, the
  // framework trainers): beside other jobs its step times spread
  // (a CV of 0.44 and a 76% floor were seen beside a parallel ctest), and
  // past the doctor's own warning threshold (kNoisyFloor) nothing can clear
  // the floor; or the doctor calibrated a quiet host and jobs landed beside
  // the verification (pairs spreading 36% against a 4.7% CV were seen in
  // CI). Nothing promoted is then the honest verdict, and the session must
  // say why: checked here. Returns why the test stops there ("" when
  // something was promoted or the host was quiet enough to expect it).
  // The test's premise is a host as quiet as the doctor found it: pairs
  // spreading half as much again as calibrated break it (a 1.3x candidate
  // then no longer clears an 8% floor over four pairs), though the server
  // tells the user only from three times (host_noisier), where it is sure.
  // Where nothing was promoted it prints the doctor's figures and each
  // candidate's reason, so a failure that is not the host's shows what it was.
  std::string NothingPromotedOnALoadedHost(const v1::SessionReport& rep, const std::string& id) {
    const auto& v = rep.verification();
    if (v.promoted_rank() > 0) return "";
    std::printf("noise floor %.4f, CV %.4f; %s\n", rep.doctor().noise_floor(), rep.baseline().cv(),
                v.summary().c_str());
    for (const auto& c : v.candidates()) std::printf("  c%d: %s\n", c.rank(), c.reason().c_str());
    if (v.host_noisier()) {
      EXPECT_NE(v.summary().find("busier during verification"), std::string::npos) << v.summary();
      EXPECT_FALSE(client_->GetSession(id)->not_promoted().empty());
      return absl::StrCat("the host got busier after the doctor (", v.summary(),
                          "); the stages ran and the verdict says why");
    }
    double spread = 0;
    for (const auto& c : v.candidates()) spread = std::max(spread, c.pair_spread());
    EXPECT_GT(v.calibrated_pair_spread(), 0);
    if (spread > 1.5 * v.calibrated_pair_spread()) {
      EXPECT_FALSE(client_->GetSession(id)->not_promoted().empty());
      return absl::StrCat("the host got busier after the doctor: pairs spread ", spread,
                          " against a calibrated ", v.calibrated_pair_spread(),
                          "; the stages ran and the verdict says why");
    }
    if (rep.doctor().noise_floor() < 0.10) return "";
    EXPECT_NE(rep.doctor().warning().find("noisy"), std::string::npos) << rep.doctor().warning();
    EXPECT_FALSE(client_->GetSession(id)->not_promoted().empty());
    return absl::StrCat("a loaded host: noise floor ", rep.doctor().noise_floor(),
                        " (promotion needs a quiet one); the stages ran and the verdict says why");
  }

  std::string MakeRepo() {
    const std::string path = dir_ + "/target";
    EXPECT_FALSE(testing::MakeGitRepo(path, {{"train.py", "train\n"}}).empty());
    return path;
  }


  std::string dir_;
  std::string address_;
  std::string dashboard_;  // "http://127.0.0.1:PORT/"
  std::vector<std::string> server_extra_;  // more flags for the next StartServer
  std::unique_ptr<testing::Subprocess> server_;
  std::vector<std::unique_ptr<testing::Subprocess>> agents_;
  std::unique_ptr<client::RpcClient> client_;
};


// `infrarsi-server token ...` on the test's database; returns stdout.
inline std::string ReadText(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// A python3 that imports torch (Debian's python3-torch), or "".
inline std::string TorchPython() {
  for (const char* py : {"/usr/bin/python3", "/usr/local/bin/python3"}) {
    if (!e2e_fs::exists(py)) continue;
    testing::Subprocess p({py, "-c", "import torch"}, "/dev/null");
    p.ReadAll();
    const int status = p.Wait();
    if (WIFEXITED(status) && WEXITSTATUS(status) == 0) return py;
  }
  return "";
}

inline std::string ServerTokenCommand(const std::string& db, const std::vector<std::string>& args) {
  std::vector<std::string> argv = {INFRARSI_SERVER_BIN, "--db", db, "token"};
  argv.insert(argv.end(), args.begin(), args.end());
  testing::Subprocess p(argv, "/dev/null");
  std::string out = p.ReadAll();
  const int status = p.Wait();
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << absl::StrJoin(args, " ");
  return std::string(absl::StripAsciiWhitespace(out));
}

}  // namespace infrarsi

#endif  // INFRARSI_TESTS_INTEGRATION_END_TO_END_FIXTURE_H_
