// The session manager's agents' side: registration, heartbeats, leases,
// progress reports, completions, refusals, infrastructure failures, expiry,
// and the agents' states. Who may lease what is the trial scheduler's
// (core/trial_scheduler); what becomes of a trial that is not a result is
// core/trial_rules'; this file writes what they decide, one transaction per
// change, under the trial's session's lock.
#include <algorithm>
#include <cmath>
#include <set>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/random.h"
#include "base/held_lock.h"
#include "base/status_macros.h"
#include "core/agent_health.h"
#include "core/assignment.h"
#include "core/session_manager.h"
#include "core/slurm_job.h"
#include "models/cluster_sim.h"

namespace infrarsi {

namespace ts = trial_status;

// ------------------------------------------------------------------ agents

absl::StatusOr<v1::RegisterAgentResponse> SessionManager::RegisterAgent(
    const v1::RegisterAgentRequest& r, const Principal& who) {
  RETURN_IF_ERROR(AgentRegistry::Validate(r));
  ASSIGN_OR_RETURN(storage::AgentRecord a, scheduler_.PlanRegistration(r, who, NewId("agt")));
  RETURN_IF_ERROR(options_.storage->PutAgent(a));
  scheduler_.PutAgent(a);
  // A new agent widens running sessions' windows.
  for (SessionRef& s : table_.PinAll(scheduler_.RunningSessions())) {
    absl::MutexLock lock(&s->sync.mu);
    if (StageFromName(s->rec.stage) != v1::STAGE_RUNNING) continue;
    RETURN_IF_ERROR(TransactLocked(*s, [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(s->sync.mu) { return FillWindowLocked(*s); }));
  }
  scheduler_.Signal();
  // The agent is registered; a failed refill, or one of a busy session,
  // stays pending.
  driver_->ProposePending("", /*wait_for_busy=*/false).IgnoreError();
  v1::RegisterAgentResponse resp;
  resp.set_agent_id(a.id);
  resp.set_lease_timeout_ms(absl::ToInt64Milliseconds(options_.lease_timeout));
  resp.set_heartbeat_interval_ms(absl::ToInt64Milliseconds(options_.heartbeat_interval));
  return resp;
}

absl::StatusOr<v1::HeartbeatResponse> SessionManager::Heartbeat(const v1::HeartbeatRequest& r,
                                                                 const Principal& who) {
  bool revived = false;
  ASSIGN_OR_RETURN(storage::AgentRecord copy, scheduler_.Touch(r.agent_id(), who, &revived));
  RETURN_IF_ERROR(options_.storage->PutAgent(copy));
  if (revived && copy.state == kAgentActive) {
    // Live again (after a server restart every agent is, at its first
    // beat): running sessions' windows widen as for a new registration.
    for (SessionRef& s : table_.PinAll(scheduler_.RunningSessions())) {
      absl::MutexLock lock(&s->sync.mu);
      if (StageFromName(s->rec.stage) != v1::STAGE_RUNNING) continue;
      RETURN_IF_ERROR(TransactLocked(*s, [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(s->sync.mu) {
        return FillWindowLocked(*s);
      }));
    }
    scheduler_.Signal();
    driver_->ProposePending("", /*wait_for_busy=*/false).IgnoreError();
  }
  v1::HeartbeatResponse resp;
  resp.set_server_unix_ms(NowMs());
  return resp;
}

absl::StatusOr<v1::DeregisterAgentResponse> SessionManager::DeregisterAgent(
    const v1::DeregisterAgentRequest& r, const Principal& who) {
  ASSIGN_OR_RETURN(storage::AgentRecord copy, scheduler_.MarkGone(r.agent_id(), who));
  RETURN_IF_ERROR(options_.storage->PutAgent(copy));
  ASSIGN_OR_RETURN(int requeued, RequeueLeasesOf(copy.id, "deregistered"));
  v1::DeregisterAgentResponse resp;
  resp.set_requeued(requeued);
  return resp;
}

absl::StatusOr<v1::ListAgentsResponse> SessionManager::ListAgents(const v1::ListAgentsRequest& r,
                                                                  const Principal& who) {
  RETURN_IF_ERROR(Authorize(who, Action::kRead));
  v1::ListAgentsResponse resp;
  for (v1::AgentInfo& info : scheduler_.ListAgents(who, r.include_gone())) {
    *resp.add_agents() = std::move(info);
  }
  // What each ran, from an index on the reader, without any lock.
  for (v1::AgentInfo& info : *resp.mutable_agents()) {
    ASSIGN_OR_RETURN(auto counts, reader_->CountAgentTrials(info.agent_id()));
    for (const auto& [status, n] : counts) {
      if (status == ts::kOk) {
        info.set_trials_ok(info.trials_ok() + n);
      } else if (IsHostFailureStatus(status)) {
        info.set_trials_failed(info.trials_failed() + n);
      } else if (!IsInFlightStatus(status)) {
        info.set_trials_other(info.trials_other() + n);
      }
    }
  }
  return resp;
}

absl::StatusOr<v1::AgentInfo> SessionManager::SetAgentState(const v1::SetAgentStateRequest& r,
                                                             const Principal& who) {
  if (!who.open && who.role != Role::kAdmin) {
    return absl::PermissionDeniedError(absl::StrCat(
        "permission denied: role ", RoleName(who.role),
        " may not drain, quarantine or resume agents (an admin's)"));
  }
  ASSIGN_OR_RETURN(auto changed, scheduler_.SetState(r.agent_id(), r.state(), r.reason()));
  RETURN_IF_ERROR(options_.storage->PutAgent(changed.first));
  scheduler_.Signal();  // a resumed agent may take work now
  return changed.second;
}

bool SessionManager::WaitForWork(absl::Duration timeout) {
  return scheduler_.WaitForWork(timeout);
}

void SessionManager::RefreshNoticeLocked(SessionState& s) {
  std::string notice;
  if (!s.write_error.empty()) {
    notice = absl::StrCat(
        "the server cannot write its database (", s.write_error,
        "): finished trials wait on their agents, which retry, and nothing is lost; free space "
        "on the volume of the server's --db (or raise its quota) and the session goes on");
  }
  if (notice.empty() && TraitsOf(s.rec.stage).leasing) notice = scheduler_.WhyNoneFits(s.Requirement());
  if (notice.empty() && TraitsOf(s.rec.stage).leasing) {
    // Runs pinned to one agent (the doctor spreads them over hosts; an A/B
    // pair shares one) wait for it while it is silent but not yet dead.
    std::map<std::string, std::vector<int64_t>> waiting;
    for (const auto& [trial, agent] : scheduler_.PinnedToSilent(s.rec.id)) waiting[agent].push_back(trial);
    for (const auto& [agent, trials] : waiting) {
      absl::StrAppend(&notice, notice.empty() ? "" : "; ", trials.size() == 1 ? "trial " : "trials ",
                      absl::StrJoin(trials, ", "), trials.size() == 1 ? " waits" : " wait",
                      " for agent ", agent, ", pinned to it, which missed its heartbeat; ",
                      "another agent takes ", trials.size() == 1 ? "it" : "them",
                      " once it has been silent ",
                      absl::FormatDuration(scheduler_.liveness()));
    }
  }
  if (notice == s.notice) return;
  s.notice = notice;
  EmitLocked(s, "notice", nullptr,
             notice.empty() ? "an agent can take this session's work again" : notice);
}

void SessionManager::RefreshNotices() {
  for (SessionRef& s : table_.PinAll(scheduler_.LeasingSessions())) {
    if (!s->sync.mu.TryLock()) continue;  // busy: the next tick
    HeldLock lock(&s->sync.mu);
    RefreshNoticeLocked(*s);
  }
}

absl::Status SessionManager::QuarantineBrokenHostsLocked(
    SessionState& s, const std::vector<storage::TrialRecord>& trials) {
  for (const BrokenHost& h : FindBrokenHosts(trials, kQuarantineAfterFailures)) {
    std::optional<storage::AgentRecord> q = scheduler_.Quarantine(
        h.agent_id, absl::StrCat(h.trial_ids.size(), " trials of session ", s.rec.id,
                                 " failed here that succeeded on other agents (first: ",
                                 h.first_error.substr(0, 300), ")"));
    if (!q) continue;
    const storage::AgentRecord& copy = *q;
    RETURN_IF_ERROR(options_.storage->PutAgent(copy));
    EmitLocked(s, "agent_quarantined", nullptr,
               absl::StrCat("agent ", copy.id, " on ", copy.host, " quarantined: ",
                            copy.state_reason, "; an admin resumes it with `infrarsi agents "
                            "resume ", copy.id, "`"));
  }
  return absl::OkStatus();
}

// ------------------------------------------------------------------ leases

absl::StatusOr<std::optional<v1::TrialAssignment>> SessionManager::TryLease(
    const std::string& agent_id, const Principal& who) {
  // Sessions whose lock was busy when their trial came up: their work is
  // passed over for other sessions' (a lease never waits behind another
  // session's work while there is other work), and waited for only when
  // nothing else is left.
  std::set<std::string> busy;
  for (int round = 0; round < 64; ++round) {
    ASSIGN_OR_RETURN(std::optional<TrialScheduler::Pick> pick,
                     scheduler_.PickFor(agent_id, who, busy));
    if (!pick) return std::optional<v1::TrialAssignment>();
    SessionRef s = table_.Pin(pick->session_id);
    if (!s) continue;  // left memory meanwhile: it no longer leases
    // The session's lock after the scheduler's is let go (the lock order).
    if (pick->waited) {
      s->sync.mu.Lock();  // nothing else is left: wait for it
    } else if (!s->sync.mu.TryLock()) {
      busy.insert(s->rec.id);
      continue;
    }
    HeldLock session_lock(&s->sync.mu);
    // The queue as the session's committed state has it (the pick may have
    // come from a transaction of this session that was still open).
    std::optional<storage::TrialRecord> queued = scheduler_.StillQueued(pick->trial_id, s->rec.id);
    if (!queued) continue;  // taken or withdrawn meanwhile: look again
    storage::TrialRecord t = *std::move(queued);
    t.status = ts::kLeased;
    t.attempts += 1;
    t.lease_agent = pick->agent.id;
    // A credential: 192 bits from the kernel's generator, bound to the
    // token that took it.
    t.lease_token = SecureRandomHex(24);
    t.lease_token_id = who.token_id;
    t.lease_deadline_ms = NowMs() + absl::ToInt64Milliseconds(options_.lease_timeout);
    t.leased_ms = NowMs();
    // Built before the lease is written: a trial that cannot be described
    // is not handed out.
    if (s->spec.slurm.enabled && s->spec.slurm.exclude_failed_nodes && !s->failing_nodes) {
      ASSIGN_OR_RETURN(auto trials, options_.storage->ListTrials(s->rec.id));
      s->failing_nodes.emplace();
      for (const FailingNode& n : FindFailingNodes(trials)) s->failing_nodes->push_back(n.node);
    }
    ASSIGN_OR_RETURN(v1::TrialAssignment a,
                     AssignmentFor(s->rec, s->spec, t, options_.lease_timeout,
                                   s->failing_nodes.value_or(std::vector<std::string>())));
    RETURN_IF_ERROR(options_.storage->Transaction([&]() -> absl::Status {
      RETURN_IF_ERROR(options_.storage->DeleteSteps(t.id));  // a fresh attempt
      return options_.storage->UpdateTrial(t);
    }));
    scheduler_.File(t, s->Requirement());  // out of the queue
    EmitLocked(*s, "trial_leased", &t);
    return std::optional<v1::TrialAssignment>(std::move(a));
  }
  return std::optional<v1::TrialAssignment>();  // raced 64 times: the agent asks again
}

absl::Status SessionManager::ReturnUndelivered(int64_t trial_id, const std::string& lease_token,
                                               const Principal& who) {
  ASSIGN_OR_RETURN(LockedTrial lt, LockTrial(trial_id));
  SessionState& s = *lt.session;
  s.sync.mu.AssertHeld();  // held by lt (LockTrial)
  storage::TrialRecord& t = lt.trial;
  if (lease_token.empty() || t.lease_token != lease_token || t.status != ts::kLeased) {
    return absl::FailedPreconditionError(
        absl::StrCat("lease_token: not the undelivered lease of trial ", trial_id));
  }
  RETURN_IF_ERROR(CheckLeaseHolder(t, who, ""));
  RETURN_IF_ERROR(TransactLocked(s, [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(s.sync.mu) { return DisposeLocked(s, t, DecideUndelivered(t)); }));
  scheduler_.Signal();
  return absl::OkStatus();
}

absl::Status SessionManager::CheckLeaseHolder(const storage::TrialRecord& t,
                                              const Principal& who,
                                              const std::string& agent_id) {
  if (t.lease_token_id != who.token_id || (!agent_id.empty() && agent_id != t.lease_agent)) {
    return absl::PermissionDeniedError(absl::StrCat(
        "lease_token: trial ", t.id, " is leased to another agent; a lease is bound to the "
        "agent and the token that took it"));
  }
  return absl::OkStatus();
}

absl::StatusOr<SessionManager::LockedTrial> SessionManager::LockTrial(int64_t trial_id) {
  ASSIGN_OR_RETURN(storage::TrialRecord first, options_.storage->GetTrial(trial_id));
  LockedTrial lt;
  ASSIGN_OR_RETURN(lt.session, RecordedSession(first));
  lt.lock = std::make_unique<absl::MutexLock>(&lt.session->sync.mu);
  // Read again under the session's lock: what it says now is what counts.
  ASSIGN_OR_RETURN(lt.trial, options_.storage->GetTrial(trial_id));
  return lt;
}

absl::StatusOr<std::vector<storage::TrialRecord>> SessionManager::LeasedTrials(
    const std::function<bool(const storage::TrialRecord&)>& pick) {
  std::vector<storage::TrialRecord> out;
  for (const char* status : {ts::kLeased, ts::kRunning}) {
    ASSIGN_OR_RETURN(auto trials, options_.storage->ListTrialsByStatus(status, 100000));
    for (auto& t : trials) {
      if (pick(t)) out.push_back(std::move(t));
    }
  }
  return out;
}

absl::Status SessionManager::DisposeLocked(SessionState& s, storage::TrialRecord& t,
                                           const Disposition& d) {
  if (d.kind == Disposition::Kind::kRequeue) {
    t.lost_s += d.lost_s;
    s.cost_s += d.lost_s;  // spent all the same: the session's cost, not the trial's
    return RequeueLocked(s, t, d);
  }
  t.status = d.status;
  t.error = d.error;
  t.cost_s = d.cost_s;
  t.agent = t.lease_agent;
  t.finished_ms = NowMs();
  return FinishTrialLocked(s, t);
}

absl::Status SessionManager::RequeueLocked(SessionState& s, storage::TrialRecord& t,
                                           const Disposition& d) {
  if (d.refund_attempt) t.attempts = std::max(0, t.attempts - 1);
  t.status = ts::kQueued;
  t.lease_deadline_ms = 0;
  if (d.unpin) t.pin_agent.clear();
  t.note = d.note;
  // The lease token is kept: a late report or completion of the old lease is
  // recognised and refused once the trial is leased again. Its steps go
  // when it is (a fresh attempt).
  RETURN_IF_ERROR(WriteTrialLocked(s, t));
  EmitLocked(s, "trial_requeued", &t);
  return absl::OkStatus();
}

absl::StatusOr<int> SessionManager::RequeueLeasesOf(const std::string& agent_id,
                                                    const std::string& why) {
  ASSIGN_OR_RETURN(auto held, LeasedTrials([&](const storage::TrialRecord& t) {
                     return t.lease_agent == agent_id;
                   }));
  int requeued = 0;
  for (const storage::TrialRecord& seen : held) {
    ASSIGN_OR_RETURN(LockedTrial lt, LockTrial(seen.id));
    SessionState& s = *lt.session;
    s.sync.mu.AssertHeld();  // held by lt (LockTrial)
  s.sync.mu.AssertHeld();  // held by lt (LockTrial)
    storage::TrialRecord& t = lt.trial;
    if (!IsLeasedStatus(t.status) || t.lease_token != seen.lease_token) continue;
    RETURN_IF_ERROR(TransactLocked(s, [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(s.sync.mu) { return DisposeLocked(s, t, DecideAbandoned(t, why)); }));
    ++requeued;
  }
  if (requeued > 0) scheduler_.Signal();
  return requeued;
}

absl::Status SessionManager::ExpireLeases() {
  RETURN_IF_ERROR(RequeueExpired());
  RefreshNotices();
  // Also retries refills a storage error or a busy session left pending.
  return driver_->ProposePending("", /*wait_for_busy=*/true);
}

absl::Status SessionManager::RequeueExpired() {
  Trim();  // the reaper's tick bounds how long finished sessions stay
  const int64_t now = NowMs();
  ASSIGN_OR_RETURN(auto expired, LeasedTrials([&](const storage::TrialRecord& t) {
                     return t.lease_deadline_ms < now;
                   }));
  bool requeued = false;
  for (const storage::TrialRecord& seen : expired) {
    // A report or a completion may have come in since the list was read.
    ASSIGN_OR_RETURN(LockedTrial lt, LockTrial(seen.id));
    SessionState& s = *lt.session;
    s.sync.mu.AssertHeld();  // held by lt (LockTrial)
  s.sync.mu.AssertHeld();  // held by lt (LockTrial)
    storage::TrialRecord& t = lt.trial;
    if (!IsLeasedStatus(t.status) || t.lease_token != seen.lease_token ||
        t.lease_deadline_ms >= now) {
      continue;
    }
    scheduler_.CountExpiry();
    RETURN_IF_ERROR(TransactLocked(
        s, [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(s.sync.mu) { return DisposeLocked(s, t, DecideExpiry(t, options_.max_attempts)); }));
    requeued = true;
  }
  if (requeued) scheduler_.Signal();
  return absl::OkStatus();
}

// ------------------------------------------------------------------ reports, completions

ReportLimits SessionManager::LimitsLocked(const SessionState& s,
                                         const storage::TrialRecord& t) const {
  ReportLimits l;
  // Memory: the GPU's capacity with a margin. The catalog's for a GPU it
  // knows: what an agent registered is the agent's word, and a rogue one
  // would raise its own bound. Otherwise the agent's, within the cap for a
  // device nobody knows.
  constexpr double kUnknownDeviceGib = 16384;
  double capacity = 0;
  if (const models::sim::GpuSpec* g = models::sim::FindGpu(s.spec.gpu)) {
    capacity = g->memory_gib;
  } else {
    capacity = scheduler_.MemoryPerGpuGib(t.lease_agent);
  }
  l.max_peak_mem_gib = capacity > 0 ? std::min(capacity * 1.1 + 1, kUnknownDeviceGib) : kUnknownDeviceGib;
  l.max_steps = MaxStepsPerTrial(s.doctor.steps_per_run(), s.spec.contract.timed_steps);
  l.agent_clock = s.spec.Executor().agent_clock;
  if (l.agent_clock && t.leased_ms > 0) {
    // The server's own clock bounds how long the trial can have run.
    l.max_wall_s = 1.02 * static_cast<double>(NowMs() - t.leased_ms) / 1000.0 + 5.0;
  }
  return l;
}

absl::StatusOr<v1::ReportProgressResponse> SessionManager::ReportProgress(
    const v1::ReportProgressRequest& r, const Principal& who) {
  std::string finished;
  auto resp = RecordProgress(r, who, &finished);
  // A trial the report stopped frees its place in the window: the session's
  // follow-up proposal now, outside the lock, not at the reaper's next tick.
  if (resp.ok() && !finished.empty()) driver_->ProposePending(finished, /*wait_for_busy=*/true).IgnoreError();
  return resp;
}

absl::StatusOr<v1::ReportProgressResponse> SessionManager::RecordProgress(
    const v1::ReportProgressRequest& r, const Principal& who, std::string* finished_session) {
  ASSIGN_OR_RETURN(LockedTrial lt, LockTrial(r.trial_id()));
  SessionState& s = *lt.session;
  s.sync.mu.AssertHeld();  // held by lt (LockTrial)
  storage::TrialRecord& t = lt.trial;
  if (r.lease_token().empty() || r.lease_token() != t.lease_token) {
    return absl::FailedPreconditionError(
        absl::StrCat("lease_token: not the current lease of trial ", t.id));
  }
  RETURN_IF_ERROR(CheckLeaseHolder(t, who, r.agent_id()));
  v1::ReportProgressResponse resp;
  if (t.status == ts::kCancelled || t.status == ts::kPruned) {
    resp.set_cancelled(true);
    if (t.status == ts::kPruned) resp.set_pruned(t.note);
    return resp;
  }
  if (!IsLeasedStatus(t.status)) {
    return absl::FailedPreconditionError(
        absl::StrCat("lease_token: trial ", t.id, " is ", t.status, ", not leased"));
  }
  // Every number is checked before anything is stored, against the steps
  // this report may resend and the last one (not the whole trial: a long
  // trial reports thousands of times).
  ASSIGN_OR_RETURN(auto stored, options_.storage->ListStepTail(t.id, FirstStepOf(r.steps())));
  ASSIGN_OR_RETURN(std::vector<storage::StepRecord> steps,
                   ValidateStepsOnTail(t.id, r.steps(), stored, LimitsLocked(s, t), "steps"));
  if (r.has_slurm()) {
    RETURN_IF_ERROR(ValidateSlurmJob(r.slurm(), "slurm"));
    t.slurm = MergeSlurmJob(t.slurm, r.slurm());
  }
  scheduler_.Heard(t.lease_agent);
  // Pending in Slurm's queue is not running: the lease is renewed, the
  // trial shows as leased with its job pending.
  const bool queued_in_slurm = steps.empty() && r.has_slurm() &&
                               (r.slurm().state() == "PENDING" || r.slurm().state() == "CONFIGURING");
  if (!queued_in_slurm) t.status = ts::kRunning;
  t.lease_deadline_ms = NowMs() + absl::ToInt64Milliseconds(options_.lease_timeout);
  // A search trial that cannot win is stopped here, on what it has shown
  // (doctor and verification runs never are: they are the measurements).
  // Read back only when this report brings a timed step that could make the
  // third (a report of warm-up lines, or of the first steps, cannot prune):
  // the steps are read per report, on the progress path.
  const double capacity = DeclaredCapacityGib(s.spec);
  const bool may_prune =
      std::any_of(steps.begin(), steps.end(), [&](const storage::StepRecord& st) {
        return (!st.warmup && st.step + 1 >= kMinPruneSteps) || (capacity > 0 && st.peak_mem_gib > capacity);
      });
  if (t.purpose == trial_purpose::kSearch && StageFromName(s.rec.stage) == v1::STAGE_RUNNING &&
      may_prune) {
    const double incumbent = s.best_trial_id != 0 ? s.best_step_time_s : s.rec.baseline_step_time_s;
    ASSIGN_OR_RETURN(std::vector<storage::StepRecord> all, options_.storage->ListSteps(t.id));
    std::map<int64_t, storage::StepRecord> by_step;
    for (auto& st : all) by_step[st.step] = std::move(st);
    for (const auto& st : steps) by_step[st.step] = st;
    all.clear();
    for (auto& [n, st] : by_step) all.push_back(std::move(st));
    const PruneVerdict v =
        JudgePrune(all, incumbent, s.doctor.noise_floor(), ExpectedTimedSteps(s, t), capacity);
    if (v.prune) {
      t.status = ts::kPruned;
      t.step_time_s = v.step_time_s;
      t.note = v.reason;
      // A trial whose lines so far already break the contract is stopped as
      // the violation it is, not as merely slow: violations inform the
      // search (and the report prices them) as a slow setting does not.
      if (auto violation = CheckContractSoFar(s.spec.contract, ReferenceFor(s, t),
                                              EvidenceOfTrial(all, 0, false, 0))) {
        t.status = ts::kViolation;
        t.violation = violation->kind;
        t.error = absl::StrCat(violation->kind, ": ", violation->reason, " (seen on its first ",
                               all.size(), " lines; stopped)")
                      .substr(0, kMaxReportTextBytes);
        t.note.clear();
      }
      t.agent = t.lease_agent;
      t.finished_ms = NowMs();
      // The server's clock from the lease: the agent's wall time never comes.
      t.cost_s = t.leased_ms > 0 ? static_cast<double>(t.finished_ms - t.leased_ms) / 1000.0 : 0;
      for (const auto& st : all) t.peak_mem_gib = std::max(t.peak_mem_gib, st.peak_mem_gib);
      RETURN_IF_ERROR(TransactLocked(s, [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(s.sync.mu) -> absl::Status {
        RETURN_IF_ERROR(options_.storage->PutSteps(steps));
        return FinishTrialLocked(s, t);
      }));
      resp.set_cancelled(true);
      resp.set_pruned(t.status == ts::kViolation ? t.error : v.reason);
      *finished_session = s.rec.id;
      return resp;
    }
  }
  RETURN_IF_ERROR(options_.storage->Transaction([&]() -> absl::Status {
    RETURN_IF_ERROR(options_.storage->PutSteps(steps));
    return options_.storage->UpdateTrial(t);
  }));
  resp.set_lease_deadline_unix_ms(t.lease_deadline_ms);
  return resp;
}

absl::StatusOr<v1::CompleteTrialResponse> SessionManager::CompleteTrial(
    const v1::CompleteTrialRequest& r, const Principal& who) {
  std::string session_id;
  auto resp = RecordCompletion(r, who, &session_id);
  // The follow-up proposal for its session, outside the lock. The
  // completion is recorded whatever happens to it; a failed one stays
  // pending for the reaper.
  if (resp.ok()) driver_->ProposePending(session_id, /*wait_for_busy=*/true).IgnoreError();
  return resp;
}

absl::StatusOr<v1::CompleteTrialResponse> SessionManager::RecordCompletion(
    const v1::CompleteTrialRequest& r, const Principal& who, std::string* session_id) {
  const v1::TrialOutcome& o = r.outcome();
  const std::string& status = o.status();
  if (!IsAgentOutcome(status)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "outcome.status: must be one of ok, oom, failed, timeout, refused, infra; got '", status,
        "'"));
  }
  if (o.has_slurm()) RETURN_IF_ERROR(ValidateSlurmJob(o.slurm(), "outcome.slurm"));
  ASSIGN_OR_RETURN(LockedTrial lt, LockTrial(r.trial_id()));
  SessionRef& s = lt.session;
  s->sync.mu.AssertHeld();  // held by lt (LockTrial)
  storage::TrialRecord& t = lt.trial;
  *session_id = t.session_id;
  v1::CompleteTrialResponse resp;
  const bool token_ok = !r.lease_token().empty() && r.lease_token() == t.lease_token;
  if (token_ok) RETURN_IF_ERROR(CheckLeaseHolder(t, who, r.agent_id()));
  if (!IsInFlightStatus(t.status)) {
    if (token_ok) {
      // A retried completion (the reply was lost): harmless.
      resp.set_accepted(t.status != ts::kCancelled);
      resp.set_duplicate(t.status != ts::kCancelled);
      return resp;
    }
    return absl::FailedPreconditionError(
        absl::StrCat("lease_token: trial ", t.id, " is already ", t.status,
                     " and this lease is not the one that finished it"));
  }
  if (!token_ok || !IsLeasedStatus(t.status)) {
    return absl::FailedPreconditionError(
        absl::StrCat("lease_token: stale or unknown lease for trial ", t.id));
  }
  if (o.has_slurm()) {
    t.slurm = MergeSlurmJob(t.slurm, o.slurm());
    s->failing_nodes.reset();  // read again by the next lease
  }
  if (status == ts::kRefused || status == ts::kInfra) {
    // Not a result: the rules say where it goes (another agent, again, or
    // failed once its attempts are spent).
    if (status == ts::kRefused) {
      // Before asking who else may run it: not this agent.
      t.refused_by =
          t.refused_by.empty() ? t.lease_agent : absl::StrCat(t.refused_by, ",", t.lease_agent);
    }
    const Disposition d =
        status == ts::kRefused
            ? DecideRefusal(t, o.error(),
                            scheduler_.AnotherMayRun(s->Requirement(), s->spec, t),
                            options_.max_attempts)
            : DecideInfraFailure(t, o.error(), o.wall_s(), NowMs(), options_.max_attempts);
    RETURN_IF_ERROR(TransactLocked(*s, [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(s->sync.mu) { return DisposeLocked(*s, t, d); }));
    scheduler_.Signal();
    resp.set_accepted(true);
    return resp;
  }

  // Every number is checked before anything is stored: a bad report is
  // refused whole, and the trial stays the agent's to finish (or expires).
  const ReportLimits limits = LimitsLocked(*s, t);
  ASSIGN_OR_RETURN(auto stored, options_.storage->ListSteps(t.id));
  ASSIGN_OR_RETURN(std::vector<storage::StepRecord> new_steps,
                   ValidateSteps(t.id, o.steps(), stored, limits, "outcome.steps"));
  std::vector<storage::StepRecord> steps = stored;
  steps.insert(steps.end(), new_steps.begin(), new_steps.end());
  RETURN_IF_ERROR(ValidateOutcome(o, steps, limits));
  ASSIGN_OR_RETURN(std::vector<storage::TrialLogRecord> logs, TrialLogsOf(t.id, o));
  const std::vector<std::string> changed(o.protected_changed().begin(),
                                         o.protected_changed().end());
  RETURN_IF_ERROR(TransactLocked(*s, [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(s->sync.mu) -> absl::Status {
    RETURN_IF_ERROR(options_.storage->PutSteps(new_steps));
    for (const storage::TrialLogRecord& log : logs) RETURN_IF_ERROR(options_.storage->PutTrialLog(log));
    const ReportedFinish f =
        JudgeReportedFinish(status, steps, o.peak_mem_gib(), ExpectedTimedSteps(*s, t));
    t.status = f.status;
    t.error = o.error().substr(0, kMaxReportTextBytes);
    if (!f.error.empty()) t.error = f.error;
    if (!f.violation.empty()) t.violation = f.violation;
    if (f.step_time_s > 0) t.step_time_s = f.step_time_s;
    t.note = o.note().substr(0, kMaxReportTextBytes);
    t.isolation = o.isolation().substr(0, kMaxReportTextBytes);
    t.peak_mem_gib = f.peak_mem_gib;
    t.cost_s = o.wall_s();
    t.agent = t.lease_agent;
    t.finished_ms = NowMs();
    TrialEvidence e =
        EvidenceOfTrial(steps, t.cost_s, limits.agent_clock, limits.agent_clock ? o.poll_interval_s() : 0);
    e.protected_changed = changed;
    if (limits.agent_clock) {
      // What the agent's clock saw of the timed window, for the doctor and
      // the verification.
      const AgentClockTiming timing = TimeOnAgentClock(e);
      t.observed_window_s = timing.valid ? timing.observed_s : 0;
      t.observed_steps = timing.valid ? timing.window_steps : 0;
      t.clock_slack_s = timing.valid ? timing.slack_s : 0;
      t.wall_resolution_s = o.wall_resolution_s();
    }
    ApplyContractLocked(*s, t, e);
    return FinishTrialLocked(*s, t);
  }));
  resp.set_accepted(true);
  return resp;
}

absl::StatusOr<std::vector<storage::TrialLogRecord>> SessionManager::TrialLogsOf(
    int64_t trial_id, const v1::TrialOutcome& o) {
  std::vector<storage::TrialLogRecord> out;
  for (const auto& [stream, log] : {std::pair<const char*, const v1::TrialLog*>{"stdout", &o.stdout_log()},
                                    {"stderr", &o.stderr_log()}}) {
    if (log->dropped_bytes() < 0 || log->dropped_bytes() > (int64_t{1} << 50)) {
      return absl::InvalidArgumentError(
          absl::StrCat("outcome.", stream, "_log.dropped_bytes: must be in [0, 2^50], got ",
                       log->dropped_bytes()));
    }
    if (log->content().empty() && log->dropped_bytes() == 0) continue;
    storage::TrialLogRecord r;
    r.trial_id = trial_id;
    r.stream = stream;
    // An agent sends at most the last MiB; more is cut here, from the front.
    const std::string& c = log->content();
    const size_t keep = std::min(c.size(), kMaxTrialLogBytes);
    r.content = c.substr(c.size() - keep);
    r.dropped_bytes = log->dropped_bytes() + static_cast<int64_t>(c.size() - keep);
    out.push_back(std::move(r));
  }
  return out;
}

absl::StatusOr<v1::TrialLogResponse> SessionManager::GetTrialLog(const v1::GetTrialLogRequest& request,
                                                                 const Principal& who) {
  const std::string stream = request.stream().empty() ? "stdout" : request.stream();
  if (stream != "stdout" && stream != "stderr") {
    return absl::InvalidArgumentError(
        absl::StrCat("stream: '", request.stream(), "' must be stdout or stderr"));
  }
  std::string id;
  {
    ASSIGN_OR_RETURN(SessionRef s, FindFor(request.session_id(), who, Action::kRead));
    absl::MutexLock lock(&s->sync.mu);
    id = s->rec.id;
  }
  auto t = session_reader_->GetTrial(request.trial_id());
  if (!t.ok() || t->session_id != id) {
    return absl::NotFoundError(
        absl::StrCat("trial_id: session ", id, " has no trial ", request.trial_id()));
  }
  ASSIGN_OR_RETURN(storage::TrialLogRecord log, session_reader_->GetTrialLog(t->id, stream));
  v1::TrialLogResponse out;
  out.set_trial_id(t->id);
  out.set_stream(stream);
  out.set_content(std::move(log.content));
  out.set_dropped_bytes(log.dropped_bytes);
  return out;
}

int SessionManager::ExpectedTimedSteps(const SessionState& s, const storage::TrialRecord& t) {
  // As many as the contract says; else, after the doctor, as many as the
  // baseline reported (the doctor's own runs set that figure).
  const int n = s.spec.contract.timed_steps;
  return n == 0 && t.purpose != trial_purpose::kDoctor ? s.doctor.timed_steps() : n;
}

ContractReference SessionManager::ReferenceFor(const SessionState& s,
                                               const storage::TrialRecord& t) {
  // The doctor's own runs build the reference; later trials are held to it.
  ContractReference ref;
  ref.expected_timed_steps = ExpectedTimedSteps(s, t);
  ref.flops_per_step = SpecFlopsPerStep(s.spec);
  ref.peak_flops = SpecPeakFlops(s.spec);
  if (t.purpose != trial_purpose::kDoctor) {
    ref.losses.assign(s.doctor.reference_losses().begin(), s.doctor.reference_losses().end());
    // Only a doctor that ran on the agent's clock measured the tail.
    ref.tail_s = s.doctor.clock() == "agent" ? s.doctor.tail_s() : -1;
  }
  return ref;
}

void SessionManager::ApplyContractLocked(const SessionState& s, storage::TrialRecord& t,
                                         const TrialEvidence& e) const {
  // Only a trial that produced numbers (or touched protected files) has
  // anything to check; a crash is already not a result.
  if (t.status != ts::kOk && e.protected_changed.empty()) return;
  const ContractReference ref = ReferenceFor(s, t);
  if (auto v = CheckContract(s.spec.contract, ref, e)) {
    t.status = ts::kViolation;
    t.violation = v->kind;
    t.error = absl::StrCat(v->kind, ": ", v->reason);
    return;
  }
  if (t.status != ts::kOk || !e.agent_clock) return;
  // Time it ran after its last line beyond the baseline's is charged to
  // its steps: no accusation (a checkpoint write varies), and no gain
  // from work moved past the last line either.
  const TailCharge charge = ChargeForTail(TimeOnAgentClock(e), ref);
  if (charge.extra_s > 0 && charge.step_time_s > t.step_time_s) {
    t.step_time_s = charge.step_time_s;
    t.note = (t.note.empty() ? charge.note : absl::StrCat(t.note, "; ", charge.note))
                 .substr(0, kMaxReportTextBytes);
  }
}

absl::Status SessionManager::FinishTrialLocked(SessionState& s, storage::TrialRecord& t) {
  RETURN_IF_ERROR(WriteTrialLocked(s, t));
  RETURN_IF_ERROR(
      options_.storage->AddBankEntry(Bank::EntryFor(s.rec, s.spec, t, NowMs())).status());
  s.cost_s += t.cost_s;
  if (IsHostFailureStatus(t.status)) ++s.host_failures;
  const v1::Stage stage = StageFromName(s.rec.stage);
  // The session's trials (this one written), read once for what needs them:
  // the broken-host check once any trial of the session has failed, and
  // the doctor's or the verification's verdict.
  const bool check_hosts = s.host_failures > 0 && !t.agent.empty();
  // A trial of the kind its stage waits for may end that stage.
  const bool advance = t.purpose == TraitsOf(stage).awaits_purpose &&
                       t.purpose != trial_purpose::kSearch;
  std::vector<storage::TrialRecord> trials;
  if (check_hosts || advance) {
    ASSIGN_OR_RETURN(trials, options_.storage->ListTrials(s.rec.id));
  }
  if (check_hosts) RETURN_IF_ERROR(QuarantineBrokenHostsLocked(s, trials));

  if (t.purpose != trial_purpose::kSearch) {
    EmitLocked(s, "trial_finished", &t);
    if (!advance) return absl::OkStatus();
    return t.purpose == trial_purpose::kDoctor ? AdvanceDoctorLocked(s, trials)
                                               : AdvanceVerificationLocked(s, std::move(trials));
  }
  --s.search_in_flight;
  ++s.search_done;
  RETURN_IF_ERROR(s.ConsiderBest(t));
  EmitLocked(s, "trial_finished", &t);  // after the counters: it carries them
  if (stage == v1::STAGE_RUNNING) return FillWindowLocked(s);
  return absl::OkStatus();
}

}  // namespace infrarsi
