// Verification: which re-runs a finished search queues, and what they decide.
#include "core/verification.h"

#include <gtest/gtest.h>

namespace infrarsi {
namespace {

SessionSpec Spec() {
  SessionSpec s;
  s.knobs = {{"mbs", {"1", "2", "4"}}};
  s.baseline = {{"mbs", "1"}};
  s.verify.candidates = 2;
  s.verify.runs = 3;
  s.seed = 5;
  return s;
}

storage::TrialRecord Trial(int64_t id, const std::string& purpose, const std::string& mbs,
                           const std::string& status, double t, const std::string& agent = "a1") {
  storage::TrialRecord r;
  r.id = id;
  r.purpose = purpose;
  r.config = EncodeConfigJson({{"mbs", mbs}});
  r.status = status;
  r.step_time_s = t;
  r.agent = agent;
  return r;
}

TEST(VerificationTest, PlansPinnedInterleavedPairsForTheFastestCandidates) {
  const std::vector<storage::TrialRecord> trials = {
      Trial(1, "doctor", "1", "ok", 1.0), Trial(2, "search", "2", "ok", 0.8, "a2"),
      Trial(3, "search", "4", "ok", 0.5, "a3"), Trial(4, "search", "4", "oom", 0),
      Trial(5, "search", "2", "ok", 1.2)};  // slower than the baseline: not a candidate
  v1::DoctorReport doctor;
  doctor.set_noise_floor(0.01);
  auto plan = PlanVerification(Spec(), "ses-1", 1.0, doctor, "budget", trials, 77);
  ASSERT_TRUE(plan.ok()) << plan.status();
  ASSERT_EQ(plan->verification.candidates_size(), 2);
  EXPECT_EQ(plan->verification.candidates(0).trial_id(), 3);  // fastest first
  EXPECT_EQ(plan->verification.candidates(1).trial_id(), 2);
  EXPECT_EQ(plan->verification.search_stop(), "budget");
  ASSERT_EQ(plan->runs.size(), 2u * 3u * 2u);
  int base = 0;
  for (const auto& t : plan->runs) {
    EXPECT_EQ(t.status, "queued");
    EXPECT_EQ(t.purpose, "verify");
    EXPECT_EQ(t.session_id, "ses-1");
    const bool first = t.tag.rfind("c1/", 0) == 0;
    EXPECT_EQ(t.pin_agent, first ? "a3" : "a2");  // both arms on the candidate's host
    base += t.tag.find("/base") != std::string::npos;
  }
  EXPECT_EQ(base, 6);
}

TEST(VerificationTest, NothingToVerifySaysWhy) {
  auto plan = PlanVerification(Spec(), "s", 1.0, v1::DoctorReport(), "",
                               {Trial(1, "search", "2", "ok", 1.5)}, 0);
  ASSERT_TRUE(plan.ok());
  EXPECT_TRUE(plan->runs.empty());
  EXPECT_EQ(plan->verification.summary(), "no setting beat the baseline");
}

TEST(VerificationTest, DecidesOnlyOnceEveryRunHasFinished) {
  SessionSpec spec = Spec();
  spec.verify.candidates = 1;
  spec.verify.runs = 2;
  std::vector<storage::TrialRecord> trials = {Trial(1, "search", "4", "ok", 0.5, "a1")};
  v1::DoctorReport doctor;
  doctor.set_noise_floor(0.01);
  auto plan = PlanVerification(spec, "s", 1.0, doctor, "", trials, 0);
  ASSERT_TRUE(plan.ok());
  int64_t id = 10;
  for (auto t : plan->runs) {
    t.id = id++;
    const bool is_base = t.tag.find("/base") != std::string::npos;
    t.status = "ok";
    // Honest timers never agree to the last digit.
    t.step_time_s = (is_base ? 1.0 : 0.5) * (1 + 1e-4 * static_cast<double>(id % 3));
    trials.push_back(t);
  }
  trials.back().status = "running";
  EXPECT_FALSE(DecideVerification(spec, doctor, plan->verification, trials, 1).done);
  trials.back().status = "ok";
  VerificationDecision d = DecideVerification(spec, doctor, plan->verification, trials, 1);
  ASSERT_TRUE(d.done);
  EXPECT_EQ(d.verification.promoted_rank(), 1) << d.verification.summary();
  EXPECT_EQ(d.promoted_trial_id, 1);
  EXPECT_NEAR(d.verification.candidates(0).speedup(), 2.0, 0.01);
  EXPECT_TRUE(d.implausible.empty());
}

}  // namespace
}  // namespace infrarsi
