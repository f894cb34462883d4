// Real jobs as they are: an unmodified training script of each supported
// framework (tests/testing/framework_trainer.py prints exactly the
// framework's own per-step lines), a spec drafted from its launch command
// by the CLI, and all five stages through a real server and real agents.
// Nothing in the script is edited and nothing in the spec is hand-written.
#include <gtest/gtest.h>

#include <filesystem>
#include <map>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "tests/integration/end_to_end_fixture.h"
#include "tests/testing/git_repo.h"

namespace infrarsi {
namespace {

namespace fs = std::filesystem;

struct Framework {
  std::string name;
  std::vector<std::string> command;  // after "python3 framework_trainer.py"
  std::string reader;
  // What the report must say the reader checks, or cannot.
  std::string tokens_check;  // "ran" or "not run"
};

void PrintTo(const Framework& f, std::ostream* os) { *os << f.name; }

class RealJobsTest : public EndToEndTest, public ::testing::WithParamInterface<Framework> {};

TEST_P(RealJobsTest, DraftedFromTheLaunchCommandAndRunThroughAllFiveStages) {
  const Framework& f = GetParam();
  // The team's repository: the script as it is, and DeepSpeed's config.
  const std::string repo = dir_ + "/job";
  std::map<std::string, std::string> files = {
      {"framework_trainer.py",
       ReadText(std::string(INFRARSI_SOURCE_DIR) + "/tests/testing/framework_trainer.py")}};
  files["ds.json"] =
      R"({"train_batch_size": 16, "train_micro_batch_size_per_gpu": 2, "steps_per_print": 1})";
  ASSERT_FALSE(testing::MakeGitRepo(repo, files).empty());
  fs::create_directories(dir_ + "/specs");
  const std::string spec = dir_ + "/specs/" + f.name + ".yaml";
  std::vector<std::string> draft = {"draft", "--gpu", "cpu", "--repo", repo, "-o", spec, "--",
                                    "python3", "framework_trainer.py", f.name};
  draft.insert(draft.end(), f.command.begin(), f.command.end());
  std::string out, err;
  ASSERT_EQ(Cli(draft, &out, &err), 0) << err;
  const std::string yaml = ReadText(spec);
  EXPECT_NE(yaml.find("metrics: {reader: " + f.reader), std::string::npos) << yaml;
  EXPECT_EQ(yaml.find("optimizer_in_window"), std::string::npos) << yaml;

  StartServer();
  StartAgent("process", "cpu", 1);
  StartAgent("process", "cpu", 1);
  const std::string id = CliCreate(spec);
  CliDoctorAndRun(id);
  auto rep = client_->Report(id);
  ASSERT_TRUE(rep.ok()) << rep.status();
  EXPECT_EQ(rep->contract().metrics_reader(), f.reader);
  EXPECT_EQ(rep->contract().tokens_per_step(), 16 * 128);
  int search = 0;
  for (const auto& t : rep->trials()) {
    // Every trial's steps came from the framework's own lines; none was
    // judged a cheat (an honest micro-batch change computes the same).
    EXPECT_NE(t.status(), "violation") << t.error();
    search += t.purpose() == "search";
  }
  EXPECT_GT(search, 0);
  const auto& v = rep->verification();
  // The trainers run for real on this host's CPU: beside other jobs the
  // verification may honestly promote nothing, and must say why.
  if (const std::string loaded = NothingPromotedOnALoadedHost(*rep, id); !loaded.empty()) GTEST_SKIP() << loaded;
  ASSERT_GT(v.promoted_rank(), 0) << v.summary();
  std::map<std::string, const v1::IntegrityCheck*> checks;
  for (const auto& c : rep->integrity()) checks[c.name()] = &c;
  ASSERT_TRUE(checks.count("log reader")) << rep->DebugString();
  EXPECT_TRUE(checks["log reader"]->ran());
  EXPECT_NE(checks["log reader"]->detail().find("by the " + f.reader + " reader"), std::string::npos);
  ASSERT_TRUE(checks.count("tokens stated by the log"));
  EXPECT_EQ(checks["tokens stated by the log"]->ran(), f.tokens_check == "ran");
  ASSERT_TRUE(checks.count("optimizer in window"));
  EXPECT_FALSE(checks["optimizer in window"]->ran());
  ASSERT_EQ(Cli({"report", id}, &out, &err), 0) << err;
  EXPECT_NE(out.find("log reader"), std::string::npos) << out;
  // Every trial's own output is kept: the framework's lines, as printed.
  const int64_t first = rep->trials(0).id();
  std::vector<std::string> logs = {"logs", id, std::to_string(first), "--raw"};
  if (f.reader == "torchtitan") logs.push_back("--stderr");
  ASSERT_EQ(Cli(logs, &out, &err), 0) << err;
  EXPECT_NE(out.find(f.reader == "megatron"     ? "elapsed time per iteration (ms)"
                     : f.reader == "torchtitan" ? "step:"
                     : f.reader == "deepspeed"  ? "CurrSamplesPerSec="
                                                : "{'loss': "),
            std::string::npos)
      << out;
  ASSERT_EQ(Cli({"apply", id, "--repo", repo, "--branch", "infrarsi/" + f.name}, &out, &err), 0) << err;
  EXPECT_NE(out.find("committed "), std::string::npos) << out;
}

// A data file the job needs is missing (gitignored, so not in the trial's
// work tree): every baseline run would fail alike. The doctor stops after
// the first two, saying the whole error.
TEST_F(EndToEndTest, TheDoctorStopsWhenItsFirstTwoBaselineRunsFailAlike) {
  const std::string job = dir_ + "/job";
  fs::create_directories(job);
  const std::string spec = WriteFile("specs/missing.yaml", R"yaml(
name: missing-data
workload: {model: m, global_batch: 8, seq_len: 16}
hardware: {gpu: cpu, count: 1}
knobs:
  threads: [1, 2]
baseline: {threads: 1}
budget: {max_trials: 2}
doctor: {repeats: 6}
executor:
  process:
    command: ["python3", "-c", "import os; os.sched_yield(); open('data/shakespeare_char/train.bin', 'rb')"]
    workdir: ../job
    timeout_s: 60
    metrics: {reader: jsonl}
)yaml");
  StartServer();
  StartAgent("process", "cpu", 1);
  StartAgent("process", "cpu", 1);
  const std::string id = CliCreate(spec);
  std::string out, err;
  EXPECT_NE(Cli({"doctor", id}, &out, &err), 0);
  auto s = client_->GetSession(id);
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(s->stage_name(), "failed");
  auto rep = client_->Report(id);
  ASSERT_TRUE(rep.ok()) << rep.status();
  int failed = 0, cancelled = 0;
  for (const auto& t : rep->trials()) {
    failed += t.status() == "failed";
    cancelled += t.status() == "cancelled";
  }
  EXPECT_LE(failed, 3);  // two, and one the other agent had begun
  EXPECT_GE(cancelled, 3);
  const std::string shown = out + err;
  EXPECT_NE(shown.find("first two baseline runs failed the same way"), std::string::npos) << shown;
  EXPECT_NE(shown.find("'data/shakespeare_char/train.bin'"), std::string::npos) << shown;
  // What the failed runs printed is kept: `infrarsi logs` shows the whole
  // traceback (the scratch folder is gone).
  int64_t failed_id = 0;
  for (const auto& t : rep->trials()) {
    if (t.status() == "failed") failed_id = t.id();
  }
  ASSERT_GT(failed_id, 0);
  ASSERT_EQ(Cli({"logs", id, std::to_string(failed_id), "--stderr"}, &out, &err), 0) << err;
  EXPECT_NE(out.find("Traceback (most recent call last)"), std::string::npos) << out;
  EXPECT_NE(out.find("FileNotFoundError"), std::string::npos) << out;
  // A trial of no session of the caller's is not found, and says so.
  EXPECT_NE(Cli({"logs", id, "999999"}, &out, &err), 0);
  EXPECT_NE(err.find("has no trial 999999"), std::string::npos) << err;
}

// Issue 32: a wrong server address printed gRPC's own words with no
// mention of --server. Now: the address tried, the flag, and whether
// anything answered there.
TEST_F(EndToEndTest, AnUnreachableServerIsNamedWithTheFlagAndWhatAnsweredThere) {
  StartServer();
  auto cli = [&](const std::string& server) {
    const std::string err_path = dir_ + "/unreachable.err";
    testing::Subprocess p({INFRARSI_CLI_BIN, "--server", server, "sessions"}, err_path);
    p.ReadAll();
    const int status = p.Wait();
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) != 0) << server;
    return ReadText(err_path);
  };
  std::string err = cli("127.0.0.1:1");
  EXPECT_NE(err.find("cannot reach infrarsi-server at 127.0.0.1:1: nothing is listening there"),
            std::string::npos) << err;
  EXPECT_NE(err.find("--server"), std::string::npos) << err;
  // The dashboard's port answers HTTP, not gRPC.
  const std::string http = std::string(absl::StripSuffix(absl::StripPrefix(dashboard_, "http://"), "/"));
  err = cli(http);
  EXPECT_NE(err.find("cannot reach infrarsi-server at " + http), std::string::npos) << err;
  EXPECT_NE(err.find("not as an infrarsi-server's gRPC port"), std::string::npos) << err;
  // Every binary says its version (it had no --version).
  for (const auto& [bin, name] : std::vector<std::pair<std::string, std::string>>{
           {INFRARSI_CLI_BIN, "infrarsi "}, {INFRARSI_SERVER_BIN, "infrarsi-server "},
           {INFRARSI_AGENT_BIN, "infrarsi-agent "}}) {
    testing::Subprocess p({bin, "--version"}, dir_ + "/version.err");
    const std::string out = p.ReadAll();
    const int status = p.Wait();
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << bin;
    EXPECT_EQ(out.rfind(name, 0), 0u) << out;
  }
}

INSTANTIATE_TEST_SUITE_P(
    Frameworks, RealJobsTest,
    ::testing::Values(
        Framework{"megatron",
                  {"--micro-batch-size", "2", "--global-batch-size", "16", "--seq-length", "128",
                   "--train-iters", "6", "--log-interval", "10"},
                  "megatron", "ran"},
        Framework{"torchtitan",
                  {"--training.local_batch_size=2", "--training.global_batch_size=16",
                   "--training.seq_len=128", "--training.steps=6"},
                  "torchtitan", "ran"},
        Framework{"deepspeed",
                  {"--deepspeed_config", "ds.json", "--seq_length", "128", "--steps", "6",
                   "--train_micro_batch_size_per_gpu", "2"},
                  "deepspeed", "not run"},
        Framework{"hf_trainer",
                  {"--per_device_train_batch_size", "2", "--gradient_accumulation_steps", "8",
                   "--max_seq_length", "128", "--max_steps", "6", "--output_dir", "out"},
                  "hf_trainer", "not run"}),
    [](const ::testing::TestParamInfo<Framework>& info) { return info.param.name; });

}  // namespace
}  // namespace infrarsi
