// TrialScheduler: who may lease which queued trial, on hand-built agents
// and trials, with a fake clock (no storage anywhere).
#include "core/trial_scheduler.h"

#include <gtest/gtest.h>

#include "core/trial_status.h"

namespace infrarsi {
namespace {

namespace ts = trial_status;

class TrialSchedulerTest : public ::testing::Test {
 protected:
  TrialSchedulerTest() : scheduler_(Options()) {}
  TrialScheduler::Options Options() {
    TrialScheduler::Options o;
    o.agent_liveness = absl::Seconds(90);
    o.clock = &clock_;
    return o;
  }
  std::string Register(const std::string& id_hint, const std::string& host) {
    v1::RegisterAgentRequest r;
    r.set_host(host);
    r.set_gpu_model("H200");
    r.set_gpu_count(1);
    r.add_executors("replay");
    auto a = scheduler_.PlanRegistration(r, Principal::Open(), id_hint);
    EXPECT_TRUE(a.ok()) << a.status();
    scheduler_.PutAgent(*a);
    return a->id;
  }
  TrialQueue::Requirement Req() {
    TrialQueue::Requirement r;
    r.gpu_model = "h200";
    r.gpu_count = 1;
    r.executor = "replay";
    return r;
  }
  void Lease(const std::string& session, bool leasing = true) {
    TrialScheduler::SessionWork w;
    w.leasing = leasing;
    w.req = Req();
    w.spec = spec_;
    scheduler_.SetSession(session, w);
  }
  storage::TrialRecord Queued(int64_t id, const std::string& session) {
    storage::TrialRecord t;
    t.id = id;
    t.session_id = session;
    t.status = ts::kQueued;
    t.config = "{}";
    return t;
  }

  FakeClock clock_;
  std::shared_ptr<const SessionSpec> spec_ = std::make_shared<SessionSpec>();
  TrialScheduler scheduler_;
};

TEST_F(TrialSchedulerTest, PicksTheOldestTrialOfALeasingSession) {
  const std::string agent = Register("agt-1", "node-1");
  Lease("a");
  Lease("b");
  scheduler_.File(Queued(9, "a"), Req());
  scheduler_.File(Queued(4, "b"), Req());
  auto pick = scheduler_.PickFor(agent, Principal::Open(), {});
  ASSERT_TRUE(pick.ok()) << pick.status();
  ASSERT_TRUE(pick->has_value());
  EXPECT_EQ((*pick)->trial_id, 4);
  EXPECT_EQ((*pick)->session_id, "b");
  EXPECT_FALSE((*pick)->waited);
  // A session that stops leasing takes its work out.
  Lease("b", /*leasing=*/false);
  EXPECT_EQ((*scheduler_.PickFor(agent, Principal::Open(), {}))->trial_id, 9);
  EXPECT_FALSE(scheduler_.StillQueued(4, "b").has_value());
  EXPECT_TRUE(scheduler_.StillQueued(9, "a").has_value());
  EXPECT_FALSE(scheduler_.StillQueued(9, "b").has_value()) << "another session's trial";
}

TEST_F(TrialSchedulerTest, ABusySessionIsPassedOverThenWaitedFor) {
  const std::string agent = Register("agt-1", "node-1");
  Lease("a");
  Lease("b");
  scheduler_.File(Queued(1, "a"), Req());
  scheduler_.File(Queued(2, "b"), Req());
  auto pick = *scheduler_.PickFor(agent, Principal::Open(), {"a"});
  EXPECT_EQ(pick->trial_id, 2);
  EXPECT_FALSE(pick->waited);
  pick = *scheduler_.PickFor(agent, Principal::Open(), {"a", "b"});
  EXPECT_EQ(pick->trial_id, 1);
  EXPECT_TRUE(pick->waited) << "nothing else is left: the caller waits for the busy one";
}

TEST_F(TrialSchedulerTest, OnlyAnActiveBoundAgentLeases) {
  const std::string agent = Register("agt-1", "node-1");
  Lease("a");
  scheduler_.File(Queued(1, "a"), Req());
  Principal other = Principal::Open();
  other.token_id = "someone-else";
  EXPECT_EQ(scheduler_.PickFor(agent, other, {}).status().code(),
            absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(scheduler_.PickFor("agt-none", Principal::Open(), {}).status().code(),
            absl::StatusCode::kNotFound);
  ASSERT_TRUE(scheduler_.SetState(agent, kAgentDraining, "").ok());
  EXPECT_FALSE(scheduler_.PickFor(agent, Principal::Open(), {})->has_value());
  EXPECT_EQ(scheduler_.SetState(agent, "asleep", "").status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST_F(TrialSchedulerTest, AQuarantinedHostStaysQuarantinedUnderANewId) {
  const std::string first = Register("agt-1", "node-1");
  ASSERT_TRUE(scheduler_.Quarantine(first, "broke 3 trials").has_value());
  EXPECT_FALSE(scheduler_.Quarantine(first, "again").has_value()) << "only an active agent";
  const std::string second = Register("agt-2", "node-1");
  const auto agents = scheduler_.ListAgents(Principal::Open(), false);
  ASSERT_EQ(agents.size(), 2u);
  for (const v1::AgentInfo& a : agents) {
    EXPECT_EQ(a.state(), kAgentQuarantined) << a.agent_id();
  }
  EXPECT_NE(agents[1].state_reason().find("was quarantined as agt-1"), std::string::npos);
}

TEST_F(TrialSchedulerTest, LivenessFollowsTheClockAndPinsFallBack) {
  const std::string a1 = Register("agt-1", "node-1");
  Lease("s");
  storage::TrialRecord pinned = Queued(1, "s");
  pinned.pin_agent = "agt-2";
  scheduler_.File(pinned, Req());
  const std::string a2 = Register("agt-2", "node-2");
  EXPECT_FALSE(scheduler_.PickFor(a1, Principal::Open(), {})->has_value())
      << "pinned to a live host";
  EXPECT_EQ(scheduler_.LiveFitting(Req()).size(), 2u);
  clock_.Advance(absl::Seconds(91));
  ASSERT_TRUE(scheduler_.Touch(a1, Principal::Open()).ok());
  EXPECT_EQ(scheduler_.LiveFitting(Req()), std::vector<std::string>{a1});
  EXPECT_EQ((*scheduler_.PickFor(a1, Principal::Open(), {}))->trial_id, 1)
      << "its pinned host is gone: any may take it";
  const TrialScheduler::Stats st = scheduler_.GetStats();
  EXPECT_EQ(st.agents_live, 1);
  EXPECT_EQ(st.queued_trials, 1u);
}

TEST_F(TrialSchedulerTest, RebuildFilesOnlyLeasingSessionsWork) {
  Lease("a");
  Lease("b", /*leasing=*/false);
  scheduler_.Rebuild({Queued(1, "a"), Queued(2, "b"), Queued(3, "unknown")});
  EXPECT_EQ(scheduler_.GetStats().queued_trials, 1u);
  storage::TrialRecord done = Queued(1, "a");
  done.status = ts::kLeased;
  scheduler_.RefileSession("a", {done, Queued(5, "a")});
  EXPECT_FALSE(scheduler_.StillQueued(1, "a").has_value());
  EXPECT_TRUE(scheduler_.StillQueued(5, "a").has_value());
  scheduler_.ForgetSession("a");
  EXPECT_EQ(scheduler_.GetStats().queued_trials, 0u);
}

TEST_F(TrialSchedulerTest, WaitForWorkEndsAtShutdown) {
  scheduler_.Signal();  // nobody waits: nothing happens
  scheduler_.Shutdown();
  EXPECT_FALSE(scheduler_.WaitForWork(absl::Hours(1)));
}

}  // namespace
}  // namespace infrarsi
