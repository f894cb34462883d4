// The pure rules for leased trials that end without a result, and for how
// a reported finish is judged, on hand-built records.
#include "core/trial_rules.h"

#include <cmath>

#include <gtest/gtest.h>

#include "core/report.h"
#include "core/trial_status.h"

namespace infrarsi {
namespace {

namespace ts = trial_status;

storage::TrialRecord Leased(int attempts) {
  storage::TrialRecord t;
  t.id = 7;
  t.status = ts::kLeased;
  t.attempts = attempts;
  t.lease_agent = "agt-1";
  t.pin_agent = "agt-1";
  return t;
}

TEST(TrialRulesTest, RefusalGoesToAnotherAgentOrFails) {
  Disposition d = DecideRefusal(Leased(1), "not on my list", /*another_may_run=*/true, 3);
  EXPECT_EQ(d.kind, Disposition::Kind::kRequeue);
  EXPECT_TRUE(d.unpin);
  EXPECT_FALSE(d.refund_attempt);
  EXPECT_EQ(d.note, "agent agt-1 refused it: not on my list");
  d = DecideRefusal(Leased(1), "", /*another_may_run=*/false, 3);
  EXPECT_EQ(d.kind, Disposition::Kind::kFinish);
  EXPECT_EQ(d.status, ts::kFailed);
  EXPECT_NE(d.error.find("its policy; no other live agent may run it"), std::string::npos) << d.error;
  d = DecideRefusal(Leased(3), "x", /*another_may_run=*/true, 3);
  EXPECT_EQ(d.kind, Disposition::Kind::kFinish) << "attempts spent";
}

TEST(TrialRulesTest, InfrastructureFailureIsBoundedByTheServersClock) {
  storage::TrialRecord t = Leased(1);
  t.leased_ms = 1'000'000;
  // The agent claims a day; the server saw 10 s since the lease.
  Disposition d = DecideInfraFailure(t, "node lost", 86400, 1'010'000, 3);
  EXPECT_EQ(d.kind, Disposition::Kind::kRequeue);
  EXPECT_NEAR(d.lost_s, 1.02 * 10 + 5, 1e-9);
  EXPECT_EQ(d.note, "infrastructure: node lost; re-queued");
  d = DecideInfraFailure(t, "", std::nan(""), 1'010'000, 3);
  EXPECT_EQ(d.lost_s, 0) << "a NaN costs nothing";
  t.attempts = 3;
  d = DecideInfraFailure(t, "", 4, 1'010'000, 3);
  EXPECT_EQ(d.kind, Disposition::Kind::kFinish);
  EXPECT_EQ(d.error, "infrastructure: the agent's infrastructure failed it (3 attempts)");
  EXPECT_EQ(d.cost_s, 4);
}

TEST(TrialRulesTest, ExpiryAbandonAndUndelivered) {
  Disposition d = DecideExpiry(Leased(2), 3);
  EXPECT_EQ(d.kind, Disposition::Kind::kRequeue);
  EXPECT_TRUE(d.unpin) << "the pinned host just failed it";
  d = DecideExpiry(Leased(3), 3);
  EXPECT_EQ(d.kind, Disposition::Kind::kFinish);
  EXPECT_EQ(d.error, "lease expired 3 times (last agent agt-1 stopped reporting)");

  storage::TrialRecord running = Leased(1);
  running.status = ts::kRunning;
  EXPECT_FALSE(DecideAbandoned(running, "deregistered").refund_attempt)
      << "abandoned mid-run costs its attempt";
  EXPECT_TRUE(DecideAbandoned(Leased(1), "deregistered").refund_attempt);

  d = DecideUndelivered(Leased(1));
  EXPECT_TRUE(d.refund_attempt);
  EXPECT_FALSE(d.unpin) << "an A/B arm stays on its host";
}

storage::StepRecord Step(int64_t step, double secs, bool warmup = false, double mem = 1) {
  storage::StepRecord s;
  s.step = step;
  s.step_time_s = secs;
  s.warmup = warmup;
  s.peak_mem_gib = mem;
  return s;
}

TEST(TrialRulesTest, AReportedFinishIsJudgedOnItsSteps) {
  ReportedFinish f = JudgeReportedFinish(
      ts::kOk, {Step(0, 9, true), Step(1, 1.0), Step(2, 3.0), Step(3, 2.0, false, 7)}, 2, 3);
  EXPECT_EQ(f.status, ts::kOk);
  EXPECT_DOUBLE_EQ(f.step_time_s, 2.0) << "the median of the timed steps, warm-up left out";
  EXPECT_DOUBLE_EQ(f.peak_mem_gib, 7);
  f = JudgeReportedFinish(ts::kOk, {Step(0, 9, true)}, 0, 3);
  EXPECT_EQ(f.status, ts::kViolation);
  EXPECT_EQ(f.violation, "timed_steps");
  f = JudgeReportedFinish(ts::kOk, {}, 0, 0);
  EXPECT_EQ(f.status, ts::kFailed);
  f = JudgeReportedFinish(ts::kOom, {Step(1, 1.0)}, 80, 3);
  EXPECT_EQ(f.status, ts::kOom);
  EXPECT_EQ(f.step_time_s, 0);
  EXPECT_DOUBLE_EQ(f.peak_mem_gib, 80);
}

// Issue 33: a search trial that cannot win is stopped on what its steps
// showed, and only then: enough timed steps, its fastest one past twice the
// noise floor, not yet finished, and warm-up never counted.
TEST(TrialRulesTest, PruningNeedsEnoughStepsAllSlowerThanTheBestByTwiceTheFloor) {
  // Best known 1.0 s, floor 2%: a step must be slower than 1.04 s.
  const std::vector<storage::StepRecord> slow = {Step(0, 0.5, true), Step(1, 1.30), Step(2, 1.20),
                                                 Step(3, 1.25)};
  PruneVerdict v = JudgePrune(slow, 1.0, 0.02, 10);
  EXPECT_TRUE(v.prune);
  EXPECT_DOUBLE_EQ(v.step_time_s, 1.25) << "the median of the timed steps";
  EXPECT_NE(v.reason.find("pruned after 3 of 10 timed steps"), std::string::npos) << v.reason;
  // Two timed steps are not enough evidence.
  EXPECT_FALSE(JudgePrune({Step(1, 1.3), Step(2, 1.3)}, 1.0, 0.02, 10).prune);
  // One fast step (within twice the floor) keeps it running.
  EXPECT_FALSE(JudgePrune({Step(1, 1.3), Step(2, 1.03), Step(3, 1.3)}, 1.0, 0.02, 10).prune);
  // A noisy host: twice a 10% floor is 20%.
  EXPECT_FALSE(JudgePrune(slow, 1.0, 0.10, 10).prune);
  EXPECT_TRUE(JudgePrune(slow, 1.0, 0.05, 10).prune);
  // Done already: nothing left to save.
  EXPECT_FALSE(JudgePrune(slow, 1.0, 0.02, 3).prune);
  // No incumbent: nothing to compare with.
  EXPECT_FALSE(JudgePrune(slow, 0, 0.02, 10).prune);
  // The floor never counts below 1%: 1.015 s is within twice that.
  EXPECT_FALSE(JudgePrune({Step(1, 1.015), Step(2, 1.015), Step(3, 1.015)}, 1.0, 0.0, 10).prune);
}

TEST(JudgePruneTest, MemoryPastTheDeclaredCapacityPrunesAtOnceAsOutOfMemory) {
  // A fast trial whose first (warm-up) step already holds more than the
  // device: pruned without waiting for three timed steps or an incumbent.
  storage::StepRecord warm = Step(0, 0.5);
  warm.warmup = true;
  warm.peak_mem_gib = 81.5;
  PruneVerdict v = JudgePrune({warm}, 0, 0.02, 10, 80.0);
  EXPECT_TRUE(v.prune);
  EXPECT_TRUE(v.memory);
  EXPECT_DOUBLE_EQ(v.peak_mem_gib, 81.5);
  EXPECT_NE(v.reason.find("81.50 GiB) is past the device's 80.00 GiB"), std::string::npos) << v.reason;
  // At the capacity, or without one declared (a real process), it runs on.
  warm.peak_mem_gib = 80.0;
  EXPECT_FALSE(JudgePrune({warm}, 0, 0.02, 10, 80.0).prune);
  warm.peak_mem_gib = 81.5;
  EXPECT_FALSE(JudgePrune({warm}, 0, 0.02, 10, 0).prune);
  // A NaN peak never prunes.
  warm.peak_mem_gib = std::nan("");
  EXPECT_FALSE(JudgePrune({warm}, 0, 0.02, 10, 80.0).prune);
}

TEST(JudgePruneTest, TheSearchLearnsAMemoryPruneAsAnOomAndATimePruneAsARun) {
  SessionSpec spec;
  spec.executor_kind = SessionSpec::ExecutorKind::kSim;
  spec.sim.cluster.gpu.memory_gib = 80;
  spec.gpu_count = 8;
  spec.knobs = {{"tp", {"1", "2"}}};
  spec.baseline = {{"tp", "1"}};
  storage::TrialRecord memory, slow;
  memory.purpose = slow.purpose = trial_purpose::kSearch;
  memory.config = R"({"tp":"2"})";
  slow.config = R"({"tp":"1"})";
  memory.status = slow.status = ts::kPruned;
  memory.peak_mem_gib = 85;
  slow.peak_mem_gib = 60;
  memory.step_time_s = slow.step_time_s = 1.5;
  double gpu_s = 0;
  auto history = SearchHistoryOf(spec, {memory, slow}, &gpu_s);
  ASSERT_TRUE(history.ok()) << history.status();
  ASSERT_EQ(history->size(), 2u);
  EXPECT_EQ((*history)[0].status, ts::kOom);
  EXPECT_EQ((*history)[1].status, ts::kOk);
  EXPECT_DOUBLE_EQ((*history)[1].step_time_s, 1.5);
}

TEST(JudgePruneTest, TheDeclaredCapacityIsTheReplaysOrTheSimulatedGpusOnly) {
  SessionSpec spec;
  spec.executor_kind = SessionSpec::ExecutorKind::kReplay;
  spec.replay.capacity_gib = 40;
  EXPECT_DOUBLE_EQ(DeclaredCapacityGib(spec), 40);
  spec.executor_kind = SessionSpec::ExecutorKind::kSim;
  spec.sim.cluster.gpu.memory_gib = 80;
  EXPECT_DOUBLE_EQ(DeclaredCapacityGib(spec), 80);
  spec.executor_kind = SessionSpec::ExecutorKind::kProcess;
  spec.gpu = "H100";
  EXPECT_DOUBLE_EQ(DeclaredCapacityGib(spec), 0);
}

}  // namespace
}  // namespace infrarsi
