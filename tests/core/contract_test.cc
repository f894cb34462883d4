// The task contract's rules one by one, the patch scope checks, and the
// doctor's statistics.
#include "core/contract.h"

#include <gtest/gtest.h>

#include <cmath>

#include "core/doctor.h"
#include "core/patch_scope.h"

namespace infrarsi {
namespace {

ContractSpec Contract() {
  ContractSpec c;
  c.tokens_per_step = 32768;
  return c;
}

// An honest trial: one warm-up and three timed steps on the reference path.
TrialEvidence Honest() {
  TrialEvidence e;
  const double losses[] = {11.0286, 11.0435, 11.0363, 11.0269};
  for (int i = 0; i < 4; ++i) {
    StepEvidence s;
    s.step = i;
    s.warmup = i == 0;
    s.loss = losses[i] + 3e-4;  // honest settings differ by up to ~5e-4
    s.tokens = 32768;
    s.step_time_s = 0.5;
    s.observed_interval_s = i == 0 ? 0 : 0.52;
    e.steps.push_back(s);
  }
  e.wall_s = 6.0;
  return e;
}

const std::vector<double> kReference = {11.0286, 11.0435, 11.0363, 11.0269};

TEST(ContractTest, HonestTrialPasses) {
  EXPECT_FALSE(CheckContract(Contract(), kReference, 3, Honest()).has_value());
}

TEST(ContractTest, ShrunkBatchProbeFromTheH200LandscapeIsCaught) {
  // The probe's measured losses differ by up to 0.0196 and it processed one
  // micro-batch of 4 sequences per step: both rules catch it.
  TrialEvidence e = Honest();
  const double probe[] = {11.0456, 11.0239, 11.0483, 11.0238};
  for (int i = 0; i < 4; ++i) e.steps[i].loss = probe[i];
  auto v = CheckContract(Contract(), kReference, 3, e);
  ASSERT_TRUE(v.has_value());
  EXPECT_EQ(v->kind, "loss");
  for (auto& s : e.steps) s.tokens = 8192;
  v = CheckContract(Contract(), kReference, 3, e);
  EXPECT_EQ(v->kind, "tokens_per_step");
  EXPECT_NE(v->reason.find("processed 8192 tokens, the contract says 32768"), std::string::npos);
}

TEST(ContractTest, EachRuleNamesItself) {
  struct Case {
    std::string kind;
    std::function<void(ContractSpec&, TrialEvidence&)> edit;
  };
  const std::vector<Case> cases = {
      {"protected_file", [](ContractSpec&, TrialEvidence& e) { e.protected_changed = {"data.py"}; }},
      {"timed_steps", [](ContractSpec&, TrialEvidence& e) { e.steps.pop_back(); }},
      {"tokens_per_step", [](ContractSpec&, TrialEvidence& e) { e.steps[2].tokens = 16384; }},
      {"instrumentation",
       [](ContractSpec& c, TrialEvidence&) {
         c.data_seed_set = true;
         c.data_seed = 7;
       }},
      {"data_seed",
       [](ContractSpec& c, TrialEvidence& e) {
         c.data_seed_set = true;
         c.data_seed = 7;
         for (auto& s : e.steps) s.data_seed = 8;
       }},
      {"precision",
       [](ContractSpec& c, TrialEvidence& e) {
         c.precision = {"bf16", "tf32"};
         e.steps[1].dtype = "fp8";
       }},
      {"loss_nan", [](ContractSpec&, TrialEvidence& e) { e.steps[2].loss = std::nan(""); }},
      {"loss", [](ContractSpec&, TrialEvidence& e) { e.steps[3].loss += 0.005; }},
      {"timing",  // optimizer step moved outside the timed window
       [](ContractSpec& c, TrialEvidence& e) {
         c.optimizer_in_window = true;
         for (auto& s : e.steps) s.optimizer_steps = s.warmup ? 1 : 0;
       }},
      {"timing",  // self-reported step time smaller than it took
       [](ContractSpec&, TrialEvidence& e) { e.steps[2].step_time_s = 0.1; }},
      {"timing",  // steps claim more time than the whole trial ran
       [](ContractSpec&, TrialEvidence& e) { e.wall_s = 1.0; }},
  };
  for (const Case& c : cases) {
    ContractSpec spec = Contract();
    TrialEvidence e = Honest();
    c.edit(spec, e);
    auto v = CheckContract(spec, kReference, 3, e);
    ASSERT_TRUE(v.has_value()) << c.kind;
    EXPECT_EQ(v->kind, c.kind) << v->reason;
    EXPECT_FALSE(v->reason.empty());
  }
}

TEST(ContractTest, StepExtraRoundTrips) {
  StepEvidence s;
  s.optimizer_steps = 1;
  s.observed_interval_s = 0.25;
  s.data_seed = 1234;
  s.dtype = "bf16";
  StepEvidence back;
  DecodeStepExtra(EncodeStepExtra(s), &back);
  EXPECT_EQ(back.optimizer_steps, 1);
  EXPECT_DOUBLE_EQ(back.observed_interval_s, 0.25);
  EXPECT_EQ(back.data_seed, 1234);
  EXPECT_EQ(back.dtype, "bf16");
}

// ---- patch scope

constexpr char kEditModel[] = R"(diff --git a/model/attn.py b/model/attn.py
index 1111111..2222222 100644
--- a/model/attn.py
+++ b/model/attn.py
@@ -1 +1 @@
-x = 1
+x = 2
)";

absl::Status Scope(const std::string& diff) {
  auto files = ParsePatchedFiles(diff);
  if (!files.ok()) return files.status();
  return CheckPatchScope("p", *files, {"model/**", "train.py"},
                         {"infrarsi_harness.py", "data.py"});
}

TEST(PatchScopeTest, InScopePatchPasses) {
  auto files = ParsePatchedFiles(kEditModel);
  ASSERT_TRUE(files.ok());
  ASSERT_EQ(files->size(), 1u);
  EXPECT_EQ((*files)[0].path, "model/attn.py");
  EXPECT_TRUE(Scope(kEditModel).ok());
}

TEST(PatchScopeTest, CorpusIsRefusedNamingThePath) {
  struct Case {
    std::string diff, expect;
  };
  const std::vector<Case> cases = {
      // touches the protected harness
      {"--- a/infrarsi_harness.py\n+++ b/infrarsi_harness.py\n@@ -1 +1 @@\n-a\n+b\n",
       "'infrarsi_harness.py' is a protected file"},
      // changes the data seed in the (protected) data pipeline
      {"--- a/data.py\n+++ b/data.py\n@@ -1 +1 @@\n-SEED = 1234\n+SEED = 99\n",
       "'data.py' is a protected file"},
      // escapes through ..
      {"--- a/model/../../etc/passwd\n+++ b/model/../../etc/passwd\n@@ -1 +1 @@\n-a\n+b\n",
       "escapes the editable scope ('..' in the path)"},
      // escapes through an absolute path
      {"--- /etc/hosts\n+++ /etc/hosts\n@@ -1 +1 @@\n-a\n+b\n",
       "escapes the editable scope (absolute path)"},
      // a symlink inside the scope pointing anywhere
      {"diff --git a/model/link b/model/link\nnew file mode 120000\nindex 0000000..1111111\n"
       "--- /dev/null\n+++ b/model/link\n@@ -0,0 +1 @@\n+/etc/shadow\n",
       "'model/link' is a symbolic link"},
      // outside every editable glob
      {"--- a/scripts/launch.sh\n+++ b/scripts/launch.sh\n@@ -1 +1 @@\n-a\n+b\n",
       "'scripts/launch.sh' is outside the editable scope"},
  };
  for (const Case& c : cases) {
    const absl::Status st = Scope(c.diff);
    ASSERT_FALSE(st.ok()) << c.expect;
    EXPECT_NE(st.message().find(c.expect), std::string::npos) << st.message();
    EXPECT_EQ(st.message().substr(0, 11), "patches[p]:") << st.message();
  }
  EXPECT_FALSE(ParsePatchedFiles("no headers here").ok());
}

TEST(PatchScopeTest, ControlBytesInPathsAreRefused) {
  // "data.py\0x" is not the protected "data.py" to a string compare, but is
  // to every C API after it: refused outright (found by fuzz_patch).
  const std::vector<PatchedFile> nul = {{std::string("data.py\0x", 9)}};
  const absl::Status st = CheckPatchScope("p", nul, {"**"}, {"data.py"});
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(st.message(), "patches[p]: a path holds a control character (byte 0)");
  EXPECT_TRUE(CheckPatchScope("p", {{"model/a..b.py"}}, {"model/**"}, {}).ok())
      << "'..' inside a name is not a parent directory";
}

TEST(PatchScopeTest, PlainDiffsGetGitHeaders) {
  EXPECT_EQ(GitStyleDiff("--- a/m.py\t2024-01-01\n+++ b/m.py\n@@ -1 +1 @@\n-a\n+b\n"),
            "diff --git a/m.py b/m.py\n--- a/m.py\n+++ b/m.py\n@@ -1 +1 @@\n-a\n+b\n");
  EXPECT_EQ(GitStyleDiff("--- /dev/null\n+++ b/new.py\n@@ -0,0 +1 @@\n+x\n"),
            "diff --git a/new.py b/new.py\nnew file mode 100644\n--- /dev/null\n+++ b/new.py\n"
            "@@ -0,0 +1 @@\n+x\n");
  const std::string git = "diff --git a/m.py b/m.py\nindex 1..2 100644\n--- a/m.py\n+++ b/m.py\n@@ -1 +1 @@\n-a\n+b\n";
  EXPECT_EQ(GitStyleDiff(git), git);
}

TEST(PatchScopeTest, Globs) {
  EXPECT_TRUE(GlobMatch("model/**", "model/a/b.py"));
  EXPECT_TRUE(GlobMatch("model/**", "model/x.py"));
  EXPECT_FALSE(GlobMatch("model/*", "model/a/b.py"));
  EXPECT_TRUE(GlobMatch("*.py", "train.py"));
  EXPECT_FALSE(GlobMatch("*.py", "sub/train.py"));
  EXPECT_TRUE(GlobMatch("**/*.py", "a/b/c.py"));
  EXPECT_TRUE(GlobMatch("tr?in.py", "train.py"));
}

// ---- the doctor's statistics

TEST(DoctorStatsTest, NoiseFloorFormula) {
  // t(0.975, 4) = 2.776; floor = t * cv * sqrt(2/3) for 3 runs per arm.
  EXPECT_NEAR(NoiseFloor(0.01, 3), 2.776 * 0.01 * std::sqrt(2.0 / 3.0), 1e-6);
  EXPECT_GT(NoiseFloor(0.05, 3), NoiseFloor(0.01, 3));
  EXPECT_LT(NoiseFloor(0.01, 10), NoiseFloor(0.01, 3));  // more runs, finer floor
}

TEST(DoctorStatsTest, ReportFindsDriftOutliersAndTheReference) {
  std::vector<DoctorRun> runs;
  for (int i = 0; i < 6; ++i) {
    DoctorRun r;
    r.agent = i < 4 ? "fast" : "slow";
    r.step_time_s = i < 4 ? 1.0 + 0.001 * i : 1.3;
    r.losses = {{0, 10.0}, {1, 9.5}, {2, 9.0 + 1e-4 * i}};
    r.phases = {{"fwd_bwd_s", 0.9}, {"optimizer_s", 0.01}};
    runs.push_back(r);
  }
  const v1::DoctorReport rep = BuildDoctorReport(runs, 3);
  EXPECT_EQ(rep.runs(), 6);
  EXPECT_GT(rep.drift(), 0.1);  // later runs (on the slow host) are slower
  ASSERT_EQ(rep.agents_size(), 2);
  for (const auto& a : rep.agents()) EXPECT_EQ(a.outlier(), a.agent() == "slow") << a.agent();
  ASSERT_EQ(rep.reference_losses_size(), 3);
  EXPECT_DOUBLE_EQ(rep.reference_losses(1), 9.5);
  EXPECT_DOUBLE_EQ(rep.phases_s().at("optimizer_s"), 0.01);
  EXPECT_NEAR(rep.noise_floor(), NoiseFloor(rep.cv(), 3), 1e-12);
}

TEST(DoctorStatsTest, PairedSpeedupInterval) {
  const PairedSpeedup p = EstimatePairedSpeedup({{1.0, 0.5}, {1.02, 0.5}, {0.98, 0.5}});
  EXPECT_EQ(p.pairs, 3);
  EXPECT_NEAR(p.speedup, 2.0, 0.01);
  EXPECT_LT(p.ci_low, p.speedup);
  EXPECT_GT(p.ci_high, p.speedup);
  EXPECT_GT(p.ci_low, 1.9);
  // A single pair has no spread: its interval cannot clear any floor.
  EXPECT_EQ(EstimatePairedSpeedup({{1.0, 0.5}}).ci_low, 0.0);
}

TEST(DoctorStatsTest, CandidatesMustClearTheFloorAndTheBestLowerBoundWins) {
  const std::vector<std::pair<double, double>> fast = {{1.0, 0.5}, {1.02, 0.5}, {0.98, 0.5}};
  const std::vector<std::pair<double, double>> modest = {{1.0, 0.9}, {1.01, 0.9}, {0.99, 0.9}};
  const std::vector<std::pair<double, double>> noisy = {{1.0, 0.7}, {1.0, 1.3}, {1.0, 0.95}};
  // A failed arm (-1) leaves its pair out.
  const std::vector<std::pair<double, double>> one_pair = {{1.0, 0.5}, {-1.0, 0.5}};
  std::vector<CandidateVerdict> v = {JudgeCandidate(modest, 0.05), JudgeCandidate(noisy, 0.05),
                                     JudgeCandidate(fast, 0.05), JudgeCandidate(one_pair, 0.05),
                                     JudgeCandidate(fast, 0.05, "a verification run broke the contract")};
  EXPECT_TRUE(v[0].cleared) << v[0].reason;
  EXPECT_FALSE(v[1].cleared) << v[1].reason;
  EXPECT_NE(v[1].reason.find("does not clear the noise floor 1.0500"), std::string::npos) << v[1].reason;
  EXPECT_TRUE(v[2].cleared);
  EXPECT_FALSE(v[3].cleared);
  EXPECT_EQ(v[3].estimate.pairs, 1);
  EXPECT_EQ(v[3].reason, "fewer than two complete A/B pairs");
  EXPECT_FALSE(v[4].cleared);
  EXPECT_EQ(v[4].reason, "a verification run broke the contract");
  EXPECT_EQ(PickPromoted(v), 2);
  // A floor above the modest one's interval leaves only the fast one.
  EXPECT_FALSE(JudgeCandidate(modest, 0.2).cleared);
  EXPECT_EQ(PickPromoted({v[1], v[3]}), -1);
}

}  // namespace
}  // namespace infrarsi
