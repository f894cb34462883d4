// The agent's executors: metrics-line parsing, replay of the measured H200
// landscape, and real processes (the fake trainer) with timeouts and OOMs.
#include <gtest/gtest.h>
#include <pwd.h>
#include <unistd.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/syscall.h>

#include <filesystem>
#include <set>
#include <fstream>

#include "client/agent/executors/landscape.h"
#include "core/spec.h"
#include "client/agent/executors/metrics_line.h"
#include "client/agent/executors/process_executor.h"
#include "client/agent/executors/protected_files.h"
#include "client/agent/executors/replay_executor.h"
#include "tests/testing/git_repo.h"
#include "tests/testing/subprocess.h"

namespace infrarsi::client {
namespace {

const std::string kLandscape =
    std::string(INFRARSI_SOURCE_DIR) + "/data/landscapes/h200-gpt-354m-seq2048.jsonl";

class CollectingSink : public ProgressSink {
 public:
  bool OnSteps(const std::vector<v1::StepMetrics>& steps) override {
    ++calls;
    all.insert(all.end(), steps.begin(), steps.end());
    return keep_going;
  }
  std::vector<v1::StepMetrics> all;
  int calls = 0;
  bool keep_going = true;
};

TEST(MetricsLineTest, ParsesAStep) {
  auto m = ParseMetricsLine(
      R"({"step": 3, "loss": 7.5, "tokens": 32768, "step_time_s": 0.61, "peak_mem_gib": 27.4,
          "phases": {"fwd_bwd_s": 0.6, "optimizer_s": 0.01}, "warmup": false})");
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_FALSE(m->oom);
  EXPECT_EQ(m->step.step(), 3);
  EXPECT_EQ(m->step.tokens(), 32768);
  EXPECT_DOUBLE_EQ(m->step.phases().at("optimizer_s"), 0.01);
}

TEST(MetricsLineTest, HugeOrFractionalIntegersAreRefused) {
  // Casting these to integers was undefined behaviour (found by fuzz_metrics).
  const std::string base = R"({"step": 3, "loss": 2.5, "tokens": 512, "step_time_s": 0.1, "peak_mem_gib": 1)";
  EXPECT_TRUE(ParseMetricsLine(base + "}").ok());
  EXPECT_EQ(ParseMetricsLine(base + R"(, "optimizer_steps": 6.6e37})").status().message(),
            "metrics line: field 'optimizer_steps' must be a non-negative integer");
  EXPECT_EQ(ParseMetricsLine(base + R"(, "data_seed": 1e300})").status().message(),
            "metrics line: field 'data_seed' must be an integer");
  EXPECT_EQ(ParseMetricsLine(R"({"step": 1e300, "loss": 1, "tokens": 1, "step_time_s": 1, "peak_mem_gib": 1})")
                .status()
                .message(),
            "metrics line: step and tokens must be whole numbers up to 2^53");
  EXPECT_FALSE(ParseMetricsLine(R"({"step": 1.5, "loss": 1, "tokens": 1, "step_time_s": 1, "peak_mem_gib": 1})").ok());
}

TEST(MetricsLineTest, OomEventAndErrorsNameTheField) {
  EXPECT_TRUE(ParseMetricsLine(R"({"event": "oom"})")->oom);
  EXPECT_EQ(ParseMetricsLine(R"({"step": 1, "tokens": 1, "step_time_s": 1, "peak_mem_gib": 1})")
                .status()
                .message(),
            "metrics line: missing field 'loss'");
  EXPECT_FALSE(ParseMetricsLine("not json").ok());
  EXPECT_FALSE(ParseMetricsLine(R"({"event": "party"})").ok());
  EXPECT_FALSE(ParseMetricsLine(
                   R"({"step": 1, "loss": 1, "tokens": 1, "step_time_s": -1, "peak_mem_gib": 1})")
                   .ok());
  EXPECT_FALSE(ParseMetricsLine(std::string(kMaxMetricsLineBytes + 1, ' ')).ok());
  // A NaN loss (written as a string or null) is carried through, not dropped.
  auto nan = ParseMetricsLine(
      R"({"step": 1, "loss": "NaN", "tokens": 1, "step_time_s": 1, "peak_mem_gib": 1})");
  ASSERT_TRUE(nan.ok());
  EXPECT_TRUE(std::isnan(nan->step.loss()));
}

TEST(LandscapeTest, LoadsTheMeasuredH200Landscape) {
  auto l = Landscape::Load(kLandscape);
  ASSERT_TRUE(l.ok()) << l.status();
  EXPECT_EQ(l->gpu, "NVIDIA H200");
  EXPECT_EQ(l->tokens_per_step, 32768);
  int grid = 0, oom = 0;
  for (const auto& t : l->trials) {
    if (t.role != "grid") continue;
    ++grid;
    oom += t.status == "oom";
  }
  EXPECT_EQ(grid, 80);
  EXPECT_EQ(oom, 4);
  // The README: this H200 was quiet, about 0.3% between launches.
  EXPECT_GT(l->launch_cv, 0.0);
  EXPECT_LT(l->launch_cv, 0.01);
}

TEST(LandscapeTest, ContractLossDefaultsSeparateHonestSettingsFromTheProbe) {
  // Measured: how far honest settings' losses stray from the baseline's, and
  // how far the shrunk-batch probe's do. The default tolerance must sit
  // between them with room on both sides.
  auto l = Landscape::Load(kLandscape);
  ASSERT_TRUE(l.ok());
  const LandscapeTrial* base = nullptr;
  for (const auto& t : l->trials) {
    if (t.role == "baseline_repeat") base = &t;
  }
  ASSERT_NE(base, nullptr);
  double honest = 0, probe = 0, ref = 0;
  for (const auto& t : l->trials) {
    if (t.status != "ok") continue;
    for (size_t i = 0; i < t.losses.size() && i < base->losses.size(); ++i) {
      const double d = std::fabs(t.losses[i] - base->losses[i]);
      (t.hack.empty() ? honest : probe) = std::max(t.hack.empty() ? honest : probe, d);
      ref = std::max(ref, std::fabs(base->losses[i]));
    }
  }
  EXPECT_LT(honest, 5e-4);  // README: honest settings agree within about 5e-4
  EXPECT_GT(probe, 0.019);  // the probe differs by up to 0.02
  const ContractSpec c;
  const double tol = c.loss_abs_tol + c.loss_rel_tol * ref;
  EXPECT_GT(tol, 3 * honest) << "honest " << honest << ", tolerance " << tol;
  EXPECT_LT(tol, probe / 3) << "probe " << probe << ", tolerance " << tol;
}

v1::TrialAssignment ReplayTrial(std::map<std::string, std::string> cfg, double capacity = 0,
                                double noise = 0, uint64_t seed = 1) {
  v1::TrialAssignment a;
  a.set_trial_id(1);
  for (auto& [k, v] : cfg) (*a.mutable_config())[k] = v;
  auto* r = a.mutable_executor()->mutable_replay();
  r->set_landscape_path(kLandscape);
  r->set_capacity_gib(capacity);
  r->set_noise_pct(noise);
  r->set_seed(seed);
  return a;
}

const std::map<std::string, std::string> kBaseline = {
    {"micro_batch", "2"}, {"attn", "math"}, {"ckpt", "false"}, {"precision", "tf32"},
    {"fused_adam", "false"}};

TEST(ReplayExecutorTest, ReplaysTheMeasuredBaseline) {
  ReplayExecutor ex;
  CollectingSink sink;
  auto out = ex.Run(ReplayTrial(kBaseline), &sink);
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ(out->status(), "ok");
  ASSERT_EQ(sink.all.size(), 4u);  // 1 warm-up + 3 timed
  EXPECT_TRUE(sink.all[0].warmup());
  for (size_t i = 1; i < 4; ++i) {
    // README: about 1.114 s per step, with launch noise of ~0.3%.
    EXPECT_NEAR(sink.all[i].step_time_s(), 1.114, 0.02);
    EXPECT_EQ(sink.all[i].tokens(), 32768);
  }
  EXPECT_NEAR(sink.all[1].loss(), 11.0435, 1e-3);
  EXPECT_NE(out->note().find("replay of measured NVIDIA H200 outcome"), std::string::npos);
}

TEST(ReplayExecutorTest, MeasuredOomStaysOom) {
  ReplayExecutor ex;
  CollectingSink sink;
  auto cfg = kBaseline;
  cfg["micro_batch"] = "16";
  auto out = ex.Run(ReplayTrial(cfg), &sink);
  ASSERT_TRUE(out.ok());
  EXPECT_EQ(out->status(), "oom");
  EXPECT_NE(out->error().find("CUDA out of memory"), std::string::npos);
  EXPECT_GT(out->peak_mem_gib(), 130);
  EXPECT_TRUE(sink.all.empty());
}

TEST(ReplayExecutorTest, EmulatedCapacityCensorsAndSaysSo) {
  ReplayExecutor ex;
  CollectingSink sink;
  // The baseline reserved ~27.5 GiB: it fits 80 GiB but not 20 GiB.
  auto fits = ex.Run(ReplayTrial(kBaseline, 80), &sink);
  ASSERT_TRUE(fits.ok());
  EXPECT_EQ(fits->status(), "ok");
  auto oom = ex.Run(ReplayTrial(kBaseline, 20), &sink);
  ASSERT_TRUE(oom.ok());
  EXPECT_EQ(oom->status(), "oom");
  EXPECT_NE(oom->note().find("emulated capacity 20.0 GiB"), std::string::npos);
}

TEST(ReplayExecutorTest, AddedNoiseIsSeededAndStated) {
  ReplayExecutor ex;
  CollectingSink a, b, c;
  ASSERT_TRUE(ex.Run(ReplayTrial(kBaseline, 0, 10, 42), &a).ok());
  ASSERT_TRUE(ex.Run(ReplayTrial(kBaseline, 0, 10, 42), &b).ok());
  auto out = ex.Run(ReplayTrial(kBaseline, 0, 10, 43), &c);
  ASSERT_TRUE(out.ok());
  EXPECT_DOUBLE_EQ(a.all[1].step_time_s(), b.all[1].step_time_s());
  EXPECT_NE(a.all[1].step_time_s(), c.all[1].step_time_s());
  EXPECT_NE(out->note().find("added noise 10.00%"), std::string::npos);
}

TEST(ReplayExecutorTest, UnmeasuredSettingFails) {
  ReplayExecutor ex;
  CollectingSink sink;
  auto cfg = kBaseline;
  cfg["micro_batch"] = "3";
  auto out = ex.Run(ReplayTrial(cfg), &sink);
  ASSERT_TRUE(out.ok());
  EXPECT_EQ(out->status(), "failed");
  EXPECT_NE(out->error().find("was not measured"), std::string::npos);
}

class ProcessExecutorTest : public ::testing::Test {
 protected:
  void SetUp() override { dir_ = testing::MakeTempDir("proc"); }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  absl::StatusOr<v1::TrialOutcome> RunWith(std::vector<std::string> args, int timeout_s = 30,
                                           CollectingSink* sink = nullptr, int watchdog_s = 0) {
    v1::TrialAssignment a;
    a.set_trial_id(7);
    a.set_lease_timeout_ms(3000);
    (*a.mutable_config())["ms"] = "20";
    auto* p = a.mutable_executor()->mutable_process();
    p->add_argv(FAKE_TRAINER);
    for (auto& s : args) p->add_argv(s);
    p->set_workdir(dir_);
    p->set_timeout_s(timeout_s);
    p->set_watchdog_s(watchdog_s);
    ProcessExecutor::Options o;
  o.sandbox = false;
    o.sandbox = false;  // the sandbox has tests of its own (sandbox_test.cc)
    o.scratch_root = dir_ + "/scratch";
    o.poll_interval = absl::Milliseconds(10);
    return Make(o)->Run(a, sink ? sink : &local_sink_);
  }
  // An assignment that runs a Python script from tests/testing/, copied
  // into this test's folder, with `args`.
  v1::TrialAssignment ScriptTrial(int trial_id, const std::string& script,
                                  std::vector<std::string> args) {
    std::filesystem::copy_file(std::string(INFRARSI_SOURCE_DIR) + "/tests/testing/" + script,
                               dir_ + "/" + script,
                               std::filesystem::copy_options::overwrite_existing);
    v1::TrialAssignment a;
    a.set_trial_id(trial_id);
    a.set_lease_timeout_ms(3000);
    auto* p = a.mutable_executor()->mutable_process();
    p->add_argv("python3");
    p->add_argv(script);
    for (auto& s : args) p->add_argv(s);
    p->set_workdir(dir_);
    p->set_timeout_s(30);
    return a;
  }
  // The stand-in framework script run with `args`, its steps read from its
  // `stream` by `reader` (a batch of 8 sequences of 128 tokens); the
  // outcome, its steps in *sink.
  absl::StatusOr<v1::TrialOutcome> RunFramework(int trial_id, const std::string& reader,
                                                const std::string& stream,
                                                const std::vector<std::string>& args,
                                                CollectingSink* sink) {
    v1::TrialAssignment a = ScriptTrial(trial_id, "framework_trainer.py", args);
    v1::MetricsReader* m = a.mutable_executor()->mutable_process()->mutable_metrics();
    m->set_reader(reader);
    m->set_stream(stream);
    m->set_warmup_steps(1);
    m->set_tokens_per_step(8 * 128);
    m->set_global_batch(8);
    ProcessExecutor::Options o;
    o.sandbox = false;
    o.scratch_root = dir_ + "/scratch";
    return Make(o)->Run(a, sink);
  }
  // A file only root may read ("TOPSECRET-0600"), in this test's folder,
  // which everyone may now enter and write (as a trial's user would).
  std::string RootOnlySecret() {
    const std::string secret = dir_ + "/secret";
    std::ofstream(secret) << "TOPSECRET-0600\n";
    std::filesystem::permissions(secret, std::filesystem::perms::owner_read |
                                             std::filesystem::perms::owner_write);
    std::filesystem::permissions(dir_, std::filesystem::perms::all);
    return secret;
  }
  // Root's agent running `/bin/sh -c script` as nobody, in this test's
  // folder: the executor and the trial.
  std::unique_ptr<ProcessExecutor> ShellAsNobody() {
    ProcessExecutor::Options o;
  o.sandbox = false;
    o.sandbox = false;  // the sandbox has tests of its own (sandbox_test.cc)
    o.scratch_root = dir_ + "/scratch";
    o.allowed_commands = {{"/bin/sh", "-c"}};
    o.workdir_root = dir_;
    o.run_as = "nobody";
    auto ex = ProcessExecutor::Create(o);
    EXPECT_TRUE(ex.ok()) << ex.status();
    return ex.ok() ? std::move(*ex) : nullptr;
  }
  v1::TrialAssignment ShellTrial(int trial_id, const std::string& script) {
    v1::TrialAssignment a;
    a.set_trial_id(trial_id);
    auto* p = a.mutable_executor()->mutable_process();
    for (const std::string& arg : {std::string("/bin/sh"), std::string("-c"), script}) {
      p->add_argv(arg);
    }
    p->set_workdir(dir_);
    p->set_timeout_s(30);
    return a;
  }
  // The executor as these tests run it: any command, in this test's folder,
  // as whoever runs the tests (root in CI, deliberately).
  std::unique_ptr<ProcessExecutor> Make(ProcessExecutor::Options o) {
    o.allow_any_command = true;
    o.workdir_root = dir_;
    o.allow_root = true;
    auto ex = ProcessExecutor::Create(std::move(o));
    EXPECT_TRUE(ex.ok()) << ex.status();
    return std::move(*ex);
  }
  std::string dir_;
  CollectingSink local_sink_;
};

TEST_F(ProcessExecutorTest, RunsWithKnobsSubstitutedAndCollectsSteps) {
  auto out = RunWith({"--steps", "3", "--step-ms", "{ms}"});
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ(out->status(), "ok") << out->error();
  ASSERT_EQ(local_sink_.all.size(), 4u);
  EXPECT_TRUE(local_sink_.all[0].warmup());
  EXPECT_GE(local_sink_.all[3].step_time_s(), 0.019);  // {ms} became 20
  EXPECT_GE(out->wall_s(), 0.08);
  // Where a pidfd wakes the agent at exit, the whole run is seen to its
  // end; elsewhere the agent's poll leaves a gap, never the whole run.
  const int pidfd = static_cast<int>(syscall(SYS_pidfd_open, getpid(), 0));
  if (pidfd >= 0) {
    close(pidfd);
    EXPECT_EQ(out->wall_resolution_s(), 0);
  } else {
    EXPECT_GT(out->wall_resolution_s(), 0);
    EXPECT_LT(out->wall_resolution_s(), out->wall_s());
  }
  // The scratch folder is cleaned up.
  EXPECT_TRUE(std::filesystem::is_empty(dir_ + "/scratch"));
}

TEST_F(ProcessExecutorTest, OomFromEventLineOrStderr) {
  auto a = RunWith({"--oom-event"});
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(a->status(), "oom");
  auto b = RunWith({"--oom-stderr"});
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(b->status(), "oom");
}

TEST_F(ProcessExecutorTest, FailureCarriesExitCode) {
  auto out = RunWith({"--steps", "1", "--step-ms", "1", "--exit", "3"});
  ASSERT_TRUE(out.ok());
  EXPECT_EQ(out->status(), "failed");
  EXPECT_NE(out->error().find("exit code 3"), std::string::npos);
}

TEST_F(ProcessExecutorTest, MissingProgramFails) {
  v1::TrialAssignment a;
  a.mutable_executor()->mutable_process()->add_argv(dir_ + "/no-such-program");
  a.mutable_executor()->mutable_process()->set_workdir(dir_);
  ProcessExecutor::Options o;
  o.sandbox = false;
  o.scratch_root = dir_;
  auto out = Make(o)->Run(a, &local_sink_);
  ASSERT_TRUE(out.ok());
  EXPECT_EQ(out->status(), "failed");
  EXPECT_NE(out->error().find("exit code 127"), std::string::npos);
}

TEST_F(ProcessExecutorTest, TimeoutKillsTheWholeProcessGroup) {
  auto out = RunWith({"--hang", "--spawn-child", "--step-ms", "1"}, /*timeout_s=*/1);
  ASSERT_TRUE(out.ok());
  EXPECT_EQ(out->status(), "timeout");
  EXPECT_LT(out->wall_s(), 10);
}

TEST_F(ProcessExecutorTest, AHangIsKilledByTheWatchdogAsATimeout) {
  // One line, then silence: the watchdog (1 s) ends it long before the
  // 120 s timeout would.
  auto out = RunWith({"--hang", "--spawn-child", "--step-ms", "1"}, /*timeout_s=*/120, nullptr,
                     /*watchdog_s=*/1);
  ASSERT_TRUE(out.ok());
  EXPECT_EQ(out->status(), "timeout");
  EXPECT_EQ(out->error(), "hung: no metrics line for 1 s (watchdog); killed");
  EXPECT_LT(out->wall_s(), 30);
  // A trial that keeps reporting is not a hang, however long it runs.
  auto busy = RunWith({"--steps", "30", "--step-ms", "100"}, 60, nullptr, /*watchdog_s=*/1);
  ASSERT_TRUE(busy.ok());
  EXPECT_EQ(busy->status(), "ok") << busy->error();
}

TEST_F(ProcessExecutorTest, ServerRefusalStopsTheTrial) {
  CollectingSink sink;
  sink.keep_going = false;
  auto out = RunWith({"--steps", "200", "--step-ms", "20"}, 30, &sink);
  ASSERT_TRUE(out.ok());
  EXPECT_EQ(out->status(), "failed");
  EXPECT_NE(out->error().find("stopped"), std::string::npos);
  EXPECT_LT(out->wall_s(), 3.5);
}

TEST_F(ProcessExecutorTest, ProtectedFileChangedByTheTrialIsReported) {
  // The protected harness, locked by its git blob hash; the trial edits it.
  const std::string harness = dir_ + "/infrarsi_harness.py";
  std::filesystem::copy_file(std::string(INFRARSI_SOURCE_DIR) + "/client/harness/infrarsi_harness.py",
                             harness);
  auto hash = GitBlobHash(harness);
  ASSERT_TRUE(hash.ok()) << hash.status();
  EXPECT_EQ(hash->size(), 40u);
  v1::TrialAssignment a = ScriptTrial(
      9, "harness_trainer.py", {"--mode", "tamper", "--steps", "1", "--step-ms", "10"});
  (*a.mutable_executor()->mutable_process()->mutable_protected_hashes())["infrarsi_harness.py"] = *hash;
  ProcessExecutor::Options o;
  o.sandbox = false;
  o.scratch_root = dir_ + "/scratch";
  auto out = Make(o)->Run(a, &local_sink_);
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ(out->status(), "ok") << out->error();
  ASSERT_EQ(out->protected_changed_size(), 1);
  EXPECT_EQ(out->protected_changed(0), "infrarsi_harness.py");
  // The harness wrote its lines: data seed, dtype and the optimizer count.
  ASSERT_FALSE(local_sink_.all.empty());
  EXPECT_EQ(local_sink_.all.back().data_seed(), 1234);
  EXPECT_EQ(local_sink_.all.back().optimizer_steps(), 1);
  EXPECT_GT(local_sink_.all.back().arrival_s(), 0.0);
}

// The agent's clock: every line's arrival since the process started, the
// process's exit on the same clock, and the resolution it achieved.
TEST_F(ProcessExecutorTest, TheAgentsClockTimesEveryLineAndTheExit) {
  auto out = RunWith({"--steps", "4", "--step-ms", "{ms}"});  // 20 ms steps
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ(out->status(), "ok") << out->error();
  EXPECT_EQ(out->clock(), "agent");
  EXPECT_GT(out->poll_interval_s(), 0.0);
  EXPECT_LE(out->poll_interval_s(), 1.0);
  ASSERT_EQ(local_sink_.all.size(), 5u);
  double prev = 0;
  for (const auto& m : local_sink_.all) {
    EXPECT_GT(m.arrival_s(), prev);
    // Lines arrive a step apart, give or take the clock's resolution.
    if (prev > 0) {
      EXPECT_GE(m.arrival_s() - prev, 0.019 - out->poll_interval_s());
    }
    prev = m.arrival_s();
  }
  EXPECT_GE(out->wall_s(), prev);
  // Lines written all at once arrive all at once, whatever they claim.
  const v1::TrialAssignment a = ScriptTrial(
      3, "timing_hacks.py", {"--mode", "at_exit", "--steps", "3", "--step-ms", "50"});
  ProcessExecutor::Options o;
  o.sandbox = false;
  o.scratch_root = dir_ + "/scratch";
  CollectingSink sink;
  auto batched = Make(o)->Run(a, &sink);
  ASSERT_TRUE(batched.ok()) << batched.status();
  ASSERT_EQ(sink.all.size(), 4u);
  EXPECT_LE(sink.all.back().arrival_s() - sink.all.front().arrival_s(), batched->poll_interval_s());
  EXPECT_GE(sink.all.front().arrival_s(), 0.19);  // not before the work was done
}

// An unmodified script of each framework: its own lines on stdout or
// stderr become steps, each timed on arrival by the agent's clock.
TEST_F(ProcessExecutorTest, LogReadersTurnEachFrameworksOwnLinesIntoTimedSteps) {
  std::ofstream(dir_ + "/ds_config.json")
      << R"({"train_batch_size": 8, "train_micro_batch_size_per_gpu": 2, "steps_per_print": 1})";
  struct Case {
    std::string reader, stream;
    std::vector<std::string> args;
    bool states_time;
  };
  for (const Case& c : std::vector<Case>{
           {"megatron", "stdout", {"megatron", "--micro-batch-size", "2", "--global-batch-size", "8",
                                   "--seq-length", "128", "--train-iters", "4", "--log-interval", "1",
                                   "--base-ms", "60"}, true},
           {"torchtitan", "stderr", {"torchtitan", "--training.local_batch_size=2",
                                     "--training.global_batch_size=8", "--training.seq_len=128",
                                     "--training.steps=4", "--metrics.log_freq=1", "--base-ms=60"},
            false},
           {"deepspeed", "stdout", {"deepspeed", "--deepspeed_config", "ds_config.json",
                                    "--seq_length", "128", "--steps", "4", "--base_ms", "60"}, true},
           {"hf_trainer", "stdout", {"hf_trainer", "--per_device_train_batch_size", "2",
                                     "--gradient_accumulation_steps", "4", "--max_seq_length", "128",
                                     "--max_steps", "4", "--logging_steps", "1", "--base_ms", "60"},
            false},
       }) {
    SCOPED_TRACE(c.reader);
    CollectingSink sink;
    auto out = RunFramework(11, c.reader, c.stream, c.args, &sink);
    ASSERT_TRUE(out.ok()) << out.status();
    EXPECT_EQ(out->status(), "ok") << out->error();
    ASSERT_EQ(sink.all.size(), 4u);
    EXPECT_TRUE(sink.all[0].warmup());
    double prev = 0;
    for (size_t i = 0; i < sink.all.size(); ++i) {
      const v1::StepMetrics& s = sink.all[i];
      EXPECT_EQ(s.step(), static_cast<int64_t>(i) + 1);
      EXPECT_EQ(s.warmup(), i == 0);
      EXPECT_EQ(s.tokens(), 8 * 128);
      EXPECT_GT(s.arrival_s(), prev);
      // 60 ms x (0.4 + 0.6 / 2) = 42 ms a step, in the log or on the clock.
      if (i > 0) {
        EXPECT_GE(s.step_time_s(), 0.035) << s.step_time_s();
      }
      if (i > 0 && !c.states_time) {
        EXPECT_NEAR(s.step_time_s(), s.arrival_s() - prev, 1e-9);
      }
      prev = s.arrival_s();
    }
    EXPECT_LT(sink.all[3].loss(), sink.all[0].loss());
    if (c.reader != "hf_trainer") {
      EXPECT_GT(sink.all[3].peak_mem_gib(), 0.0);
    }
  }
}

// Environment knobs: set by the agent (no shell, no `env` command), only
// for names its operator allows.
TEST_F(ProcessExecutorTest, EnvironmentKnobsAreSetOnlyWhereThePolicyAllows) {
  auto trial = [&](const std::string& name) {
    v1::TrialAssignment a;
    a.set_trial_id(21);
    (*a.mutable_config())["threads"] = "3";
    auto* p = a.mutable_executor()->mutable_process();
    for (const char* w : {"/bin/sh", "-c", "echo \"OMP=$OMP_NUM_THREADS\" >&2; exit 9"}) p->add_argv(w);
    p->set_workdir(dir_);
    p->set_timeout_s(30);
    (*p->mutable_env())[name] = "{threads}";
    return a;
  };
  ProcessExecutor::Options o;
  o.sandbox = false;
  o.scratch_root = dir_ + "/scratch";
  o.env_allow.push_back("OMP_NUM_THREADS");
  auto ex = Make(o);
  auto out = ex->Run(trial("OMP_NUM_THREADS"), &local_sink_);
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_NE(out->error().find("OMP=3"), std::string::npos) << out->error();
  out = ex->Run(trial("MKL_NUM_THREADS"), &local_sink_);
  ASSERT_TRUE(out.ok());
  EXPECT_EQ(out->status(), "refused");
  EXPECT_NE(out->error().find("env MKL_NUM_THREADS is not among"), std::string::npos) << out->error();
  // Never one that picks the program, even where the operator listed it.
  out = ex->Run(trial("PATH"), &local_sink_);
  ASSERT_TRUE(out.ok());
  EXPECT_EQ(out->status(), "refused");
}

// A log that prints every tenth step cannot be timed per step: the trial
// fails with a message that says how to log every step.
TEST_F(ProcessExecutorTest, ALogReaderRefusesALogThatSkipsSteps) {
  CollectingSink sink;
  auto out = RunFramework(12, "megatron", "stdout",
                          {"megatron", "--micro-batch-size", "2", "--global-batch-size", "8",
                           "--seq-length", "128", "--train-iters", "6", "--log-interval", "2",
                           "--base-ms", "10"},
                          &sink);
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ(out->status(), "failed");
  EXPECT_NE(out->error().find("--log-interval 1"), std::string::npos) << out->error();
}

TEST_F(ProcessExecutorTest, ArgumentsAreNeverInterpretedByAShell) {
  // A shell would run the second command; exec passes it as one argument.
  const std::string marker = dir_ + "/pwned";
  auto out = RunWith({"--steps", "1", "--step-ms", "1", "--echo", "x; touch " + marker});
  ASSERT_TRUE(out.ok());
  EXPECT_EQ(out->status(), "ok");
  EXPECT_FALSE(std::filesystem::exists(marker));
}


// Tenants' code runs only under the operator's policy.
TEST_F(ProcessExecutorTest, AnUnsafePolicyIsRefusedAtCreate) {
  ProcessExecutor::Options o;
  o.sandbox = false;
  o.scratch_root = dir_ + "/scratch";
  auto none = ProcessExecutor::Create(o);  // no commands named: it would run anyone's
  EXPECT_EQ(none.status().message().rfind("allowed_commands: ", 0), 0u) << none.status();
  o.allow_any_command = true;
  o.env_allow.push_back("INFRARSI_TOKEN");
  EXPECT_EQ(ProcessExecutor::Create(o).status().message().rfind("env_allow: INFRARSI_TOKEN", 0), 0u);
  o.env_allow = ProcessExecutor::DefaultEnvAllow();
  o.run_as = "no-such-user-here";
  EXPECT_EQ(ProcessExecutor::Create(o).status().message(), "run_as: no user 'no-such-user-here'");
  if (geteuid() == 0) {
    o.run_as.clear();
    EXPECT_EQ(ProcessExecutor::Create(o).status().message().rfind("run_as: the agent runs as root", 0),
              0u);
  }
}

TEST_F(ProcessExecutorTest, CommandsAndWorkdirsOutsideThePolicyAreRefusedNotRun) {
  const std::string marker = dir_ + "/ran";
  ProcessExecutor::Options o;
  o.sandbox = false;
  o.scratch_root = dir_ + "/scratch";
  o.allowed_commands = {{FAKE_TRAINER, "--steps"}};
  o.workdir_root = dir_ + "/jobs";
  o.allow_root = true;
  std::filesystem::create_directories(dir_ + "/jobs/a");
  auto ex = ProcessExecutor::Create(o);
  ASSERT_TRUE(ex.ok()) << ex.status();
  auto trial = [&](std::vector<std::string> argv, const std::string& workdir) {
    v1::TrialAssignment a;
    a.set_trial_id(5);
    auto* p = a.mutable_executor()->mutable_process();
    for (auto& arg : argv) p->add_argv(arg);
    p->set_workdir(workdir);
    p->set_timeout_s(30);
    return (*ex)->Run(a, &local_sink_);
  };
  auto ok = trial({FAKE_TRAINER, "--steps", "1", "--step-ms", "1"}, dir_ + "/jobs/a");
  ASSERT_TRUE(ok.ok());
  EXPECT_EQ(ok->status(), "ok") << ok->error();
  auto other = trial({"/usr/bin/touch", marker}, dir_ + "/jobs/a");
  EXPECT_EQ(other->status(), "refused");
  EXPECT_NE(other->error().find("opens with none of the allowed commands"), std::string::npos);
  EXPECT_FALSE(std::filesystem::exists(marker));
  // The prefix is matched word by word: the program alone is not enough.
  EXPECT_EQ(trial({FAKE_TRAINER, "--echo", "x"}, dir_ + "/jobs/a")->status(), "refused");
  // Outside the workdir root, also through a symbolic link or "..".
  EXPECT_EQ(trial({FAKE_TRAINER, "--steps", "1"}, "/etc")->status(), "refused");
  EXPECT_EQ(trial({FAKE_TRAINER, "--steps", "1"}, dir_ + "/jobs/../")->status(), "refused");
  std::filesystem::create_directory_symlink("/etc", dir_ + "/jobs/etc");
  auto link = trial({FAKE_TRAINER, "--steps", "1"}, dir_ + "/jobs/etc");
  EXPECT_EQ(link->status(), "refused");
  EXPECT_NE(link->error().find("outside the workdir root"), std::string::npos) << link->error();
}

// The trial runs as the named user, with an environment built from an
// allowlist: the agent's token never reaches it.
TEST_F(ProcessExecutorTest, TrialsRunAsTheNamedUserWithoutTheAgentsSecrets) {
  if (geteuid() != 0) GTEST_SKIP() << "switching users needs an agent running as root";
  auto ex = ShellAsNobody();
  ASSERT_NE(ex, nullptr);
  // A folder the trial's user may write its findings to.
  const std::string out = dir_ + "/out";
  std::filesystem::create_directories(out);
  std::filesystem::permissions(dir_, std::filesystem::perms::all);
  std::filesystem::permissions(out, std::filesystem::perms::all);
  setenv("INFRARSI_TOKEN", "irt_agent_secret", 1);
  setenv("AWS_SECRET_ACCESS_KEY", "hunter2", 1);
  auto ran = ex->Run(ShellTrial(8, "id -u > " + out + "/id; env > " + out + "/env"), &local_sink_);
  unsetenv("INFRARSI_TOKEN");
  unsetenv("AWS_SECRET_ACCESS_KEY");
  ASSERT_TRUE(ran.ok()) << ran.status();
  auto read = [](const std::string& path) {
    std::ifstream in(path);
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
  };
  EXPECT_EQ(read(out + "/id"), std::to_string(getpwnam("nobody")->pw_uid) + "\n") << ran->error();
  const std::string env = read(out + "/env");
  EXPECT_EQ(env.find("irt_agent_secret"), std::string::npos) << env;
  EXPECT_EQ(env.find("hunter2"), std::string::npos) << env;
  EXPECT_NE(env.find("INFRARSI_METRICS="), std::string::npos) << env;
  EXPECT_NE(env.find("HOME=" + dir_ + "/scratch"), std::string::npos) << env;
}

// A trial owns its scratch folder: it may swap its stderr or metrics file
// for a link to a file only the agent may read. The agent reads through the
// descriptors it opened before the trial ran, never the link.
TEST_F(ProcessExecutorTest, ATrialCannotMakeTheAgentReadFilesForIt) {
  if (geteuid() != 0) GTEST_SKIP() << "the agent's privileges matter only when it is root";
  const std::string secret = RootOnlySecret();
  auto ex = ShellAsNobody();
  ASSERT_NE(ex, nullptr);
  auto out = ex->Run(
      ShellTrial(9, "cd \"$(dirname \"$INFRARSI_METRICS\")\" && rm -f stderr.log metrics.jsonl && "
                    "ln -s " + secret + " stderr.log && ln -s " + secret + " metrics.jsonl && exit 3"),
      &local_sink_);
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ(out->status(), "failed");
  EXPECT_NE(out->error().find("exit code 3"), std::string::npos) << out->error();
  EXPECT_EQ(out->error().find("TOPSECRET"), std::string::npos) << out->error();
  EXPECT_EQ(out->note().find("TOPSECRET"), std::string::npos) << out->note();
  EXPECT_TRUE(local_sink_.all.empty());
}

// A trial may also replace a protected file with a FIFO (the agent would
// wait forever on it) or a link to a root-only file (its hash would tell
// whether a guess of the file was right). The agent follows and waits on
// neither: the file is reported changed.
TEST_F(ProcessExecutorTest, AProtectedFileSwappedForAFifoOrALinkIsChangedNotFollowed) {
  if (geteuid() != 0) GTEST_SKIP() << "the agent's privileges matter only when it is root";
  const std::string secret = RootOnlySecret();
  for (const char* f : {"harness.py", "model.py"}) {
    std::ofstream(dir_ + "/" + f) << "# " << f << "\n";
  }
  auto ex = ShellAsNobody();
  ASSERT_NE(ex, nullptr);
  // Locked by the hash of the secret's content: a followed link would match.
  auto secret_hash = GitBlobHash(secret);
  ASSERT_TRUE(secret_hash.ok()) << secret_hash.status();
  v1::TrialAssignment a = ShellTrial(
      10, "rm -f harness.py model.py && mkfifo harness.py && ln -s " + secret + " model.py");
  auto& hashes = *a.mutable_executor()->mutable_process()->mutable_protected_hashes();
  hashes["harness.py"] = *GitBlobHash(dir_ + "/harness.py");
  hashes["model.py"] = *secret_hash;
  auto out = ex->Run(a, &local_sink_);
  ASSERT_TRUE(out.ok()) << out.status();
  std::set<std::string> changed(out->protected_changed().begin(), out->protected_changed().end());
  EXPECT_TRUE(changed.count("harness.py")) << out->ShortDebugString();
  EXPECT_TRUE(changed.count("model.py")) << out->ShortDebugString();
}

TEST_F(ProcessExecutorTest, PatchedTrialsRunInACleanWorkTreeOfTheBaseCommit) {
  const std::string repo = dir_ + "/repo";
  const std::string base = testing::MakeGitRepo(repo, {{"train.py", "print('train')\n"}});
  ASSERT_FALSE(base.empty());
  ProcessExecutor::Options o;
  o.sandbox = false;
  o.scratch_root = dir_ + "/scratch";
  auto ex = Make(o);
  auto run = [&](const std::string& pattern, const std::string& diff) {
    v1::TrialAssignment a;
    a.set_trial_id(7);
    v1::ProcessSpec* p = a.mutable_executor()->mutable_process();
    // The check runs in the trial's tree: does train.py hold the pattern?
    for (const char* arg : {"/bin/grep", "-q"}) p->add_argv(arg);
    p->add_argv(pattern);
    p->add_argv("train.py");
    p->set_timeout_s(30);
    v1::SourceSpec* src = p->mutable_source();
    src->set_repository(repo);
    src->set_base_commit(base);
    if (!diff.empty()) {
      auto* patch = src->add_patches();
      patch->set_name("faster");
      patch->set_diff(diff);
    }
    return ex->Run(a, &local_sink_);
  };
  const std::string faster =
      "--- a/train.py\n+++ b/train.py\n@@ -1 +1 @@\n-print('train')\n+print('train faster')\n";
  auto patched = run("faster", faster);
  ASSERT_TRUE(patched.ok()) << patched.status();
  EXPECT_EQ(patched->status(), "ok") << patched->error();
  // The next trial starts from the base again: the patch left nothing behind.
  auto clean = run("faster", "");
  ASSERT_TRUE(clean.ok());
  EXPECT_EQ(clean->status(), "failed") << "train.py still patched";
  auto base_tree = run("print('train')", "");
  ASSERT_TRUE(base_tree.ok());
  EXPECT_EQ(base_tree->status(), "ok") << base_tree->error();
  // A patch that does not apply fails the trial as a launcher error.
  auto stale = run("x", "--- a/train.py\n+++ b/train.py\n@@ -1 +1 @@\n-print('y')\n+z\n");
  ASSERT_TRUE(stale.ok());
  EXPECT_EQ(stale->status(), "failed");
  EXPECT_EQ(stale->error().rfind("launcher: patch faster does not apply", 0), 0u) << stale->error();
  // Only the agent's clone cache stays; the team's work tree is untouched.
  for (const auto& e : std::filesystem::directory_iterator(dir_ + "/scratch")) {
    EXPECT_EQ(e.path().filename(), "git-cache") << e.path();
  }
  EXPECT_FALSE(std::filesystem::exists(repo + "/train.py"));  // never checked out there
  // The bare clones hold every file, protected ones too: the agent's alone
  // (on a Slurm agent they sit on a filesystem the cluster's users share;
  // the cache was 0755).
  struct stat st;
  ASSERT_EQ(stat((dir_ + "/scratch/git-cache").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0700u);
  // A patch that makes a link is refused by the agent too, whatever the
  // server sent: no link is written into a trial's tree.
  auto link = run("x", "diff --git a/fast b/fast\nnew file mode 0120000\n--- /dev/null\n+++ b/fast\n"
                       "@@ -0,0 +1 @@\n+/etc/shadow\n\\ No newline at end of file\n");
  ASSERT_TRUE(link.ok());
  EXPECT_EQ(link->status(), "failed");
  EXPECT_NE(link->error().find("is a symbolic link"), std::string::npos) << link->error();
}

// Each trial's folder is 0700 (it was 0755: on a Slurm agent's shared
// filesystem any user of the cluster read a trial's tree and metrics).
TEST(TrialFolderTest, IsFreshAndOnlyItsOwners) {
  const std::string root = testing::MakeTempDir("folder");
  v1::TrialAssignment a;
  a.set_trial_id(3);
  a.set_attempt(1);
  std::filesystem::create_directories(root + "/trial-3-1/old");
  auto dir = FreshTrialFolder(root, a, "slurm");
  ASSERT_TRUE(dir.ok()) << dir.status();
  struct stat st;
  ASSERT_EQ(stat(dir->c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0700u);
  EXPECT_FALSE(std::filesystem::exists(*dir + "/old")) << "not fresh";
  std::filesystem::remove_all(root);
}

}  // namespace
}  // namespace infrarsi::client
