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
    o.heartbeat_interval = absl::Seconds(30);  // dead after 90 s
    o.heartbeat_misses = 3;
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

// Liveness means heartbeats: 5 s beats, dead after three missed (15 s); a
// run pinned to a silent agent is said to wait for it, then moves on.
// Before: an agent counted live for 90 s after it was last heard from.
TEST_F(TrialSchedulerTest, ThreeMissedHeartbeatsAndAPinnedRunMovesOn) {
  TrialScheduler::Options o;
  o.clock = &clock_;  // the defaults: 5 s, three misses
  TrialScheduler sched(o);
  EXPECT_EQ(sched.liveness(), absl::Seconds(15));
  auto reg = [&](const std::string& host) {
    v1::RegisterAgentRequest r;
    r.set_host(host);
    r.set_gpu_model("H200");
    r.set_gpu_count(1);
    r.add_executors("replay");
    auto a = sched.PlanRegistration(r, Principal::Open(), "agt-" + host);
    EXPECT_TRUE(a.ok());
    sched.PutAgent(*a);
    return a->id;
  };
  const std::string dead = reg("a");
  const std::string alive = reg("b");
  TrialScheduler::SessionWork w;
  w.leasing = true;
  w.req = Req();
  w.spec = spec_;
  sched.SetSession("s", w);
  storage::TrialRecord pinned = Queued(7, "s");
  pinned.pin_agent = dead;
  sched.File(pinned, Req());
  EXPECT_TRUE(sched.PinnedToSilent("s").empty()) << "just heard from";
  clock_.Advance(absl::Seconds(7));  // one beat missed
  ASSERT_TRUE(sched.Touch(alive, Principal::Open()).ok());
  EXPECT_EQ(sched.PinnedToSilent("s"), (std::map<int64_t, std::string>{{7, dead}}));
  EXPECT_FALSE(sched.PickFor(alive, Principal::Open(), {})->has_value())
      << "late, not yet dead: still its run";
  clock_.Advance(absl::Seconds(8) + absl::Milliseconds(1));  // 15 s silent
  ASSERT_TRUE(sched.Touch(alive, Principal::Open()).ok());
  EXPECT_TRUE(sched.PinnedToSilent("s").empty()) << "dead: nothing to wait for";
  auto pick = sched.PickFor(alive, Principal::Open(), {});
  ASSERT_TRUE(pick.ok() && pick->has_value());
  EXPECT_EQ((*pick)->trial_id, 7);
}

// A restart does not revive: an agent read back from storage counts live
// only once this process hears from it, however recent its stored
// heartbeat. Before: live for 90 s after a restart, on its stored time.
TEST_F(TrialSchedulerTest, AnAgentReadBackAtARestartIsNotLiveUntilHeard) {
  clock_.Advance(absl::Seconds(100));
  TrialScheduler::Options o;
  o.clock = &clock_;
  TrialScheduler restarted(o);
  storage::AgentRecord a;
  a.id = "agt-old";
  a.host = "node-1";
  a.gpu_model = "H200";
  a.gpu_count = 1;
  a.executors = "replay";
  a.state = kAgentActive;
  a.last_heartbeat_ms = absl::ToUnixMillis(clock_.Now()) - 1000;  // 1 s before the restart
  restarted.PutAgent(a);
  EXPECT_TRUE(restarted.LiveFitting(Req()).empty());
  EXPECT_EQ(restarted.GetStats().agents_live, 0);
  clock_.Advance(absl::Seconds(1));
  bool revived = false;
  ASSERT_TRUE(restarted.Touch("agt-old", Principal::Open(), &revived).ok());
  EXPECT_TRUE(revived) << "its first beat after the restart: windows may widen";
  EXPECT_EQ(restarted.LiveFitting(Req()), std::vector<std::string>{"agt-old"});
  ASSERT_TRUE(restarted.Touch("agt-old", Principal::Open(), &revived).ok());
  EXPECT_FALSE(revived);
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
