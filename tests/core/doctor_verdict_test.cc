// The doctor's verdict on hand-built baseline runs: no storage.
#include "core/doctor_verdict.h"

#include <gtest/gtest.h>

#include "core/trial_status.h"

namespace infrarsi {
namespace {

namespace ts = trial_status;

storage::TrialRecord DoctorRunOf(int64_t id, const std::string& status, double step_time = 1.0) {
  storage::TrialRecord t;
  t.id = id;
  t.purpose = trial_purpose::kDoctor;
  t.status = status;
  t.agent = "agt-" + std::to_string(id);
  t.step_time_s = step_time;
  return t;
}

std::vector<storage::StepRecord> Steps(int64_t trial, double secs, double loss_shift = 0) {
  std::vector<storage::StepRecord> out;
  for (int i = 0; i < 6; ++i) {
    storage::StepRecord s;
    s.trial_id = trial;
    s.step = i;
    s.loss = 5.0 - 0.1 * i + loss_shift;
    s.step_time_s = secs * (1 + 0.01 * (i % 3));
    s.warmup = i == 0;
    out.push_back(s);
  }
  return out;
}

class DoctorVerdictTest : public ::testing::Test {
 protected:
  DoctorVerdictTest() {
    spec_.contract.loss_abs_tol = 1e-3;
    spec_.contract.loss_rel_tol = 0;
    spec_.verify.runs = 3;
  }
  SessionSpec spec_;
};

// A missing data file fails every repeat: after the first two fail alike
// the doctor stops, with the whole message (it was cut mid-path).
TEST_F(DoctorVerdictTest, TwoBaselineRunsFailingAlikeStopTheDoctorWithTheWholeError) {
  const std::string error =
      "exit code 1: Traceback (most recent call last):\n  File \"train.py\", line 120, in <module>\n"
      "FileNotFoundError: [Errno 2] No such file or directory: 'data/shakespeare_char/train.bin' "
      "(scratch /var/lib/infrarsi/trial-";
  std::vector<storage::TrialRecord> trials = {DoctorRunOf(1, ts::kFailed), DoctorRunOf(2, ts::kQueued),
                                              DoctorRunOf(3, ts::kQueued), DoctorRunOf(4, ts::kRunning)};
  trials[0].error = error + "1-1)";
  EXPECT_EQ(RepeatedDoctorFailure(trials), "");  // one failure says nothing yet
  trials[1].status = ts::kFailed;
  trials[1].error = error + "2-1)";  // another trial's path: the same failure
  const std::string stop = RepeatedDoctorFailure(trials);
  EXPECT_NE(stop.find("first two baseline runs failed the same way (trials 1 and 2, failed); 2 more not run"),
            std::string::npos) << stop;
  // The verdict over them, the rest cancelled, quotes the error whole.
  std::vector<storage::TrialRecord> ended = trials;
  for (auto& t : ended) {
    if (t.status != ts::kFailed) t.status = ts::kCancelled;
  }
  const std::string failure = JudgeDoctor(spec_, ended, {}).failure;
  EXPECT_NE(failure.find("'data/shakespeare_char/train.bin' (scratch /var/lib/infrarsi/trial-1-1)"),
            std::string::npos) << failure;
  // Different failures, or a run that succeeded, and the doctor goes on.
  trials[1].error = "exit code 1: CUDA error: an illegal memory access";
  EXPECT_EQ(RepeatedDoctorFailure(trials), "");
  trials[1].error = trials[0].error;
  trials[2].status = ts::kOk;
  EXPECT_EQ(RepeatedDoctorFailure(trials), "");
  // A verdict over lost runs quotes the error whole, too.
  std::vector<storage::TrialRecord> lost = {DoctorRunOf(1, ts::kFailed), DoctorRunOf(2, ts::kTimeout)};
  lost[0].error = std::string(600, 'x') + " train.bin'";
  EXPECT_NE(JudgeDoctor(spec_, lost, {}).failure.find("train.bin'"), std::string::npos);
}

TEST_F(DoctorVerdictTest, NoVerdictWhileARunIsInFlight) {
  std::vector<storage::TrialRecord> trials = {DoctorRunOf(1, ts::kOk), DoctorRunOf(2, ts::kRunning)};
  bool done = true;
  EXPECT_TRUE(DoctorRunsToRead(trials, &done).empty());
  EXPECT_FALSE(done);
  EXPECT_FALSE(JudgeDoctor(spec_, trials, {}).done);
  trials[1].status = ts::kFailed;
  EXPECT_EQ(DoctorRunsToRead(trials, &done), std::vector<int64_t>{1});
  EXPECT_TRUE(done);
}

TEST_F(DoctorVerdictTest, HonestRunsMakeAReportAndALostOneAWarning) {
  std::vector<storage::TrialRecord> trials = {DoctorRunOf(1, ts::kOk), DoctorRunOf(2, ts::kOk), DoctorRunOf(3, ts::kOk),
                                              DoctorRunOf(4, ts::kFailed)};
  trials[3].error = "CUDA error: an illegal memory access";
  const DoctorVerdict v =
      JudgeDoctor(spec_, trials, {{1, Steps(1, 1.0)}, {2, Steps(2, 1.01)}, {3, Steps(3, 0.99)}});
  ASSERT_TRUE(v.done);
  EXPECT_EQ(v.failure, "");
  EXPECT_EQ(v.report.runs(), 3);
  EXPECT_EQ(v.report.timed_steps(), 5);
  EXPECT_GT(v.report.median_step_time_s(), 0.9);
  EXPECT_NE(v.report.warning().find("1 of 4 baseline runs were lost (failed=1, ok=3); the first, "
                                    "trial 4 on agent agt-4: CUDA error"),
            std::string::npos)
      << v.report.warning();
}

TEST_F(DoctorVerdictTest, RunsThatDisagreeOnTheLossFailTheSession) {
  std::vector<storage::TrialRecord> trials = {DoctorRunOf(1, ts::kOk), DoctorRunOf(2, ts::kOk)};
  const DoctorVerdict v =
      JudgeDoctor(spec_, trials, {{1, Steps(1, 1.0)}, {2, Steps(2, 1.0, /*loss_shift=*/0.05)}});
  ASSERT_TRUE(v.done);
  EXPECT_NE(v.failure.find("baseline runs disagree on the loss"), std::string::npos) << v.failure;
}

TEST_F(DoctorVerdictTest, ABaselineThatBreaksTheContractOrNeverSucceedsFails) {
  std::vector<storage::TrialRecord> trials = {DoctorRunOf(1, ts::kOk), DoctorRunOf(2, ts::kViolation)};
  trials[1].violation = "loss";
  trials[1].error = "loss: step 3 off";
  DoctorVerdict v = JudgeDoctor(spec_, trials, {{1, Steps(1, 1.0)}});
  EXPECT_EQ(v.failure, "doctor: the baseline itself breaks the contract (loss): loss: step 3 off");
  trials = {DoctorRunOf(1, ts::kFailed), DoctorRunOf(2, ts::kTimeout)};
  trials[0].error = "exit 1";
  v = JudgeDoctor(spec_, trials, {});
  EXPECT_EQ(v.failure,
            "doctor: no baseline run succeeded (failed=1, timeout=1); the first, trial 1 on "
            "agent agt-1: exit 1");
}

TEST_F(DoctorVerdictTest, MissingInstrumentationIsNamed) {
  spec_.contract.optimizer_in_window = true;
  std::vector<storage::TrialRecord> trials = {DoctorRunOf(1, ts::kOk)};
  const DoctorVerdict v = JudgeDoctor(spec_, trials, {{1, Steps(1, 1.0)}});
  EXPECT_NE(v.failure.find("lack optimizer_steps, which the contract needs"), std::string::npos)
      << v.failure;
}

}  // namespace
}  // namespace infrarsi
