#include "core/trial_scheduler.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "base/status_macros.h"
#include "core/agent_policy.h"
#include "core/trial_status.h"

namespace infrarsi {

TrialScheduler::TrialScheduler(const Options& options)
    : clock_(options.clock != nullptr ? options.clock : Clock::Real()),
      heartbeat_interval_(options.heartbeat_interval),
      liveness_(options.heartbeat_interval * std::max(1, options.heartbeat_misses)),
      registry_(liveness_, absl::ToUnixMillis(clock_->Now())) {}

std::map<int64_t, std::string> TrialScheduler::PinnedToSilent(const std::string& session_id) const {
  std::map<int64_t, std::string> out;
  absl::MutexLock lock(&mu_);
  const int64_t now = NowMs();
  // One beat missed, with a quarter of an interval for the network.
  const int64_t late_ms = absl::ToInt64Milliseconds(heartbeat_interval_ * 1.25);
  queue_.ForEach([&](const storage::TrialRecord& t) {
    mu_.AssertHeld();
    if (t.session_id != session_id || t.pin_agent.empty()) return;
    const storage::AgentRecord* a = registry_.Find(t.pin_agent);
    if (a == nullptr || !registry_.Live(t.pin_agent, now)) return;  // dead: others take it
    if (now - a->last_heartbeat_ms > late_ms) out[t.id] = t.pin_agent;
  });
  return out;
}

void TrialScheduler::SetSession(const std::string& id, SessionWork work) {
  absl::MutexLock lock(&mu_);
  if (!work.leasing) queue_.RemoveSession(id);
  sessions_[id] = std::move(work);
}

void TrialScheduler::ForgetSession(const std::string& id) {
  absl::MutexLock lock(&mu_);
  queue_.RemoveSession(id);
  sessions_.erase(id);
}

void TrialScheduler::File(const storage::TrialRecord& t, const TrialQueue::Requirement& req) {
  absl::MutexLock lock(&mu_);
  if (t.status == trial_status::kQueued) {
    queue_.Put(t, req);
  } else {
    queue_.Remove(t.id);
  }
}

void TrialScheduler::RefileSession(const std::string& id,
                                   const std::vector<storage::TrialRecord>& trials) {
  absl::MutexLock lock(&mu_);
  queue_.RemoveSession(id);
  auto it = sessions_.find(id);
  if (it == sessions_.end() || !it->second.leasing) return;
  for (const auto& t : trials) {
    if (t.status == trial_status::kQueued) queue_.Put(t, it->second.req);
  }
}

void TrialScheduler::Rebuild(const std::vector<storage::TrialRecord>& queued) {
  absl::MutexLock lock(&mu_);
  queue_.Clear();
  for (const auto& t : queued) {
    auto it = sessions_.find(t.session_id);
    // A queued trial of a session that does not lease is of a finished one.
    if (it == sessions_.end() || !it->second.leasing) continue;
    queue_.Put(t, it->second.req);
  }
}

std::vector<std::string> TrialScheduler::LeasingSessions() const {
  std::vector<std::string> out;
  absl::MutexLock lock(&mu_);
  for (const auto& [id, w] : sessions_) {
    if (w.leasing) out.push_back(id);
  }
  return out;
}

std::vector<std::string> TrialScheduler::RunningSessions() const {
  std::vector<std::string> out;
  absl::MutexLock lock(&mu_);
  for (const auto& [id, w] : sessions_) {
    if (w.running) out.push_back(id);
  }
  return out;
}

absl::StatusOr<std::optional<TrialScheduler::Pick>> TrialScheduler::PickFor(
    const std::string& agent_id, const Principal& who, const std::set<std::string>& busy) {
  absl::MutexLock lock(&mu_);
  const int64_t now = NowMs();
  ASSIGN_OR_RETURN(storage::AgentRecord * bound, registry_.Bound(agent_id, who));
  bound->last_heartbeat_ms = now;
  Pick pick;
  pick.agent = *bound;
  const storage::AgentRecord& agent = pick.agent;
  // Draining, quarantined or gone: it finishes what it holds, takes no more.
  if (agent.state != kAgentActive) return std::optional<Pick>();
  // Only work this agent could run is looked at: the requirement
  // (hardware, executor, tenancy) first, then the trial (its stage,
  // refusals, command policy, pinning).
  auto runnable = [&](const storage::TrialRecord& t, bool skip_busy) {
    mu_.AssertHeld();  // called by Oldest below, under the lock
    auto sit = sessions_.find(t.session_id);
    if (sit == sessions_.end() || !sit->second.leasing || sit->second.spec == nullptr) return false;
    if (skip_busy && busy.count(t.session_id)) return false;
    if (!registry_.AllowsTrial(agent, *sit->second.spec, t)) return false;
    // A/B pairs run on one host; if that host is gone, any may take over.
    return t.pin_agent.empty() || t.pin_agent == agent.id || !registry_.Live(t.pin_agent, now);
  };
  auto fits = [&](const TrialQueue::Requirement& req) {
    mu_.AssertHeld();
    return registry_.Fits(agent, req);
  };
  std::optional<int64_t> id =
      queue_.Oldest(fits, [&](const storage::TrialRecord& t) { return runnable(t, true); });
  if (!id && !busy.empty()) {
    pick.waited = true;
    id = queue_.Oldest(fits, [&](const storage::TrialRecord& t) { return runnable(t, false); });
  }
  if (!id) return std::optional<Pick>();
  pick.trial_id = *id;
  pick.session_id = queue_.Find(*id)->session_id;
  return std::optional<Pick>(std::move(pick));
}

std::optional<storage::TrialRecord> TrialScheduler::StillQueued(
    int64_t trial_id, const std::string& session_id) const {
  absl::MutexLock lock(&mu_);
  const storage::TrialRecord* queued = queue_.Find(trial_id);
  auto sit = sessions_.find(session_id);
  if (queued == nullptr || queued->session_id != session_id || sit == sessions_.end() ||
      !sit->second.leasing) {
    return std::nullopt;
  }
  return *queued;
}

void TrialScheduler::CountExpiry() {
  absl::MutexLock lock(&mu_);
  ++leases_expired_;
}

absl::StatusOr<storage::AgentRecord> TrialScheduler::PlanRegistration(
    const v1::RegisterAgentRequest& r, const Principal& who, const std::string& new_id) {
  storage::AgentRecord a;
  {
    absl::MutexLock lock(&mu_);
    if (!r.agent_id().empty() && registry_.Contains(r.agent_id())) {
      // Keeping an id is for the agent that registered it: same token.
      ASSIGN_OR_RETURN(const storage::AgentRecord* old, registry_.Bound(r.agent_id(), who));
      a.id = old->id;
      // A drain or a quarantine outlives a reconnect; a deregistered agent
      // that comes back is active again.
      if (old->state != kAgentGone) {
        a.state = old->state;
        a.state_reason = old->state_reason;
      }
    } else {
      a.id = new_id;
    }
    // A quarantined host stays quarantined under a new id (an agent that is
    // restarted registers afresh) until an admin resumes it.
    if (a.state == kAgentActive) {
      for (const auto& [id, other] : registry_.All()) {
        if (other.state == kAgentQuarantined && other.host == r.host() &&
            other.token_id == who.token_id) {
          a.state = kAgentQuarantined;
          a.state_reason = absl::StrCat("host ", r.host(), " was quarantined as ", id, ": ",
                                        other.state_reason);
          break;
        }
      }
    }
  }
  a.host = r.host();
  a.gpu_model = r.gpu_model();
  a.gpu_count = r.gpu_count();
  a.memory_per_gpu_gib = r.memory_per_gpu_gib();
  a.executors = absl::StrJoin(r.executors(), ",");
  a.registered_ms = a.last_heartbeat_ms = NowMs();
  a.token_id = who.token_id;
  // An agent token scoped to a team serves that team only; an admin's (or
  // the open server's) and an unscoped agent token form the shared pool.
  a.team = who.role == Role::kAgent && !who.open ? who.team : "";
  a.serves = EncodeStringList({r.teams().begin(), r.teams().end()});
  a.commands = EncodeStringList({r.commands().begin(), r.commands().end()});
  return a;
}

void TrialScheduler::PutAgent(storage::AgentRecord a) {
  absl::MutexLock lock(&mu_);
  registry_.Put(std::move(a));
}

absl::StatusOr<storage::AgentRecord> TrialScheduler::Touch(const std::string& agent_id,
                                                           const Principal& who, bool* revived) {
  absl::MutexLock lock(&mu_);
  ASSIGN_OR_RETURN(storage::AgentRecord * agent, registry_.Bound(agent_id, who));
  const int64_t now = NowMs();
  if (revived != nullptr) *revived = !registry_.Live(agent_id, now);
  agent->last_heartbeat_ms = now;
  return *agent;
}

void TrialScheduler::Heard(const std::string& agent_id) {
  absl::MutexLock lock(&mu_);
  if (storage::AgentRecord* a = registry_.Find(agent_id)) a->last_heartbeat_ms = NowMs();
}

absl::StatusOr<storage::AgentRecord> TrialScheduler::MarkGone(const std::string& agent_id,
                                                              const Principal& who) {
  absl::MutexLock lock(&mu_);
  ASSIGN_OR_RETURN(storage::AgentRecord * agent, registry_.Bound(agent_id, who));
  agent->state = kAgentGone;
  agent->state_reason = "deregistered";
  return *agent;
}

absl::StatusOr<std::pair<storage::AgentRecord, v1::AgentInfo>> TrialScheduler::SetState(
    const std::string& agent_id, const std::string& state, const std::string& reason) {
  if (state != kAgentActive && state != kAgentDraining && state != kAgentQuarantined) {
    return absl::InvalidArgumentError(absl::StrCat(
        "state: must be draining, quarantined or active (resume); got '", state, "'"));
  }
  if (reason.size() > 1024) return absl::InvalidArgumentError("reason: at most 1024 bytes");
  absl::MutexLock lock(&mu_);
  storage::AgentRecord* a = registry_.Find(agent_id);
  if (a == nullptr) {
    return absl::NotFoundError(absl::StrCat("agent_id: no agent '", agent_id, "'"));
  }
  if (a->state == kAgentGone) {
    return absl::FailedPreconditionError(
        absl::StrCat("agent_id: agent ", a->id, " deregistered; it registers again to serve"));
  }
  a->state = state;
  a->state_reason = state == kAgentActive
                        ? ""
                        : (reason.empty() ? absl::StrCat(state, " by an admin") : reason);
  return std::make_pair(*a, InfoOf(*a));
}

std::optional<storage::AgentRecord> TrialScheduler::Quarantine(const std::string& agent_id,
                                                               const std::string& reason) {
  absl::MutexLock lock(&mu_);
  storage::AgentRecord* a = registry_.Find(agent_id);
  if (a == nullptr || a->state != kAgentActive) return std::nullopt;
  a->state = kAgentQuarantined;
  a->state_reason = reason;
  return *a;
}

v1::AgentInfo TrialScheduler::InfoOf(const storage::AgentRecord& a) const {
  v1::AgentInfo out;
  out.set_agent_id(a.id);
  out.set_host(a.host);
  out.set_gpu_model(a.gpu_model);
  out.set_gpu_count(a.gpu_count);
  for (absl::string_view e : absl::StrSplit(a.executors, ',', absl::SkipEmpty())) {
    out.add_executors(std::string(e));
  }
  out.set_team(a.team);
  out.set_last_seen_unix_ms(a.last_heartbeat_ms);
  out.set_live(registry_.Heard(a.id, NowMs()));
  out.set_state(a.state);
  out.set_state_reason(a.state_reason);
  return out;
}

std::vector<v1::AgentInfo> TrialScheduler::ListAgents(const Principal& who,
                                                      bool include_gone) const {
  std::vector<v1::AgentInfo> out;
  absl::MutexLock lock(&mu_);
  for (const auto& [id, a] : registry_.All()) {
    if (a.state == kAgentGone && !include_gone) continue;
    // A team sees the shared pool and its own agents.
    if (!who.open && who.role != Role::kAdmin && !a.team.empty() && a.team != who.team) continue;
    out.push_back(InfoOf(a));
  }
  return out;
}

std::string TrialScheduler::WhyNoneCanHold(const TrialQueue::Requirement& req) const {
  absl::MutexLock lock(&mu_);
  return registry_.WhyNoneCanHold(req);
}

std::string TrialScheduler::WhyNoneFits(const TrialQueue::Requirement& req) const {
  absl::MutexLock lock(&mu_);
  return registry_.WhyNoneFits(req, NowMs());
}

std::vector<std::string> TrialScheduler::LiveFitting(const TrialQueue::Requirement& req) const {
  absl::MutexLock lock(&mu_);
  return registry_.LiveFitting(req, NowMs());
}

bool TrialScheduler::AnotherMayRun(const TrialQueue::Requirement& req, const SessionSpec& spec,
                                   const storage::TrialRecord& t) const {
  absl::MutexLock lock(&mu_);
  return registry_.AnotherMayRun(req, spec, t, NowMs());
}

double TrialScheduler::MemoryPerGpuGib(const std::string& agent_id) const {
  absl::MutexLock lock(&mu_);
  const storage::AgentRecord* a = registry_.Find(agent_id);
  return a == nullptr ? 0 : a->memory_per_gpu_gib;
}

void TrialScheduler::Signal() {
  absl::MutexLock lock(&mu_);
  work_cv_.SignalAll();
}

bool TrialScheduler::WaitForWork(absl::Duration timeout) {
  absl::MutexLock lock(&mu_);
  if (shutdown_) return false;
  work_cv_.WaitWithTimeout(&mu_, timeout);
  return !shutdown_;
}

void TrialScheduler::Shutdown() {
  absl::MutexLock lock(&mu_);
  shutdown_ = true;
  work_cv_.SignalAll();
}

TrialScheduler::Stats TrialScheduler::GetStats() const {
  absl::MutexLock lock(&mu_);
  Stats st;
  st.queued_trials = queue_.size();
  st.leases_expired = leases_expired_;
  const int64_t now = NowMs();
  for (const auto& [id, a] : registry_.All()) {
    if (a.state == kAgentGone) continue;
    ++st.agents_by_state[a.state];
    st.agents_live += registry_.Live(id, now);
  }
  return st;
}

}  // namespace infrarsi
