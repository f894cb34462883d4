// The session manager's facade and stage machine: creation and restart,
// finding sessions, one session's transactions and events, the five stages
// and cancel, the search window (the SessionWriter the search driver writes
// through), and the read side. The agents' side (registration, leases,
// reports, completions, expiry) is in session_manager_trials.cc.
#include "core/session_manager.h"

#include <algorithm>
#include <cmath>
#include <set>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "base/proto_util.h"
#include "base/random.h"
#include "base/held_lock.h"
#include "base/status_macros.h"
#include "core/apply_plan.h"
#include "core/doctor_verdict.h"
#include "core/model_optimizer.h"
#include "core/report.h"
#include "core/verification.h"

namespace infrarsi {
namespace {

namespace ts = trial_status;

constexpr size_t kMaxEventBacklog = 2000;
constexpr size_t kFinishedEventBacklog = 64;
constexpr int kMaxInFlightPerSession = 16;

absl::Status StageError(const std::string& id, const std::string& stage, absl::string_view need) {
  return absl::FailedPreconditionError(
      absl::StrCat("session_id: session ", id, " is in stage ", stage, "; ", need));
}

}  // namespace

SessionManager::SessionManager(const Options& options)
    : options_(options),
      table_(options.finished_cache),
      scheduler_(TrialScheduler::Options{options.heartbeat_interval, options.heartbeat_misses,
                                         options.clock}) {
  if (options_.optimizer) {
    optimizer_ = options_.optimizer;
  } else {
    owned_optimizer_ = std::make_unique<ModelOptimizer>();
    optimizer_ = owned_optimizer_.get();
  }
  driver_ = std::make_unique<SearchDriver>(SearchDriver::Options{this, optimizer_});
}

absl::StatusOr<std::unique_ptr<SessionManager>> SessionManager::Create(const Options& options) {
  if (options.storage == nullptr) return absl::InvalidArgumentError("storage: required");
  if (options.clock == nullptr) return absl::InvalidArgumentError("clock: required");
  if (options.lease_timeout <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError("lease_timeout: must be positive");
  }
  if (options.max_attempts < 1) return absl::InvalidArgumentError("max_attempts: must be >= 1");
  std::unique_ptr<SessionManager> m(new SessionManager(options));
  // The bank's reader and a second one for one session's reads (a
  // proposal's history, a report, a page of sessions), so that they never
  // queue behind a client looping on the bank. An injected reader serves
  // both.
  m->reader_ = m->session_reader_ = options.reader;
  if (options.reader == nullptr) {
    ASSIGN_OR_RETURN(m->reader_, storage::ReaderOf(options.storage, &m->owned_reader_));
    ASSIGN_OR_RETURN(m->session_reader_,
                     storage::ReaderOf(options.storage, &m->owned_session_reader_));
  }
  Bank::Options bo;
  bo.reader = m->reader_;
  ASSIGN_OR_RETURN(m->bank_, Bank::Create(bo));
  RETURN_IF_ERROR(m->Load());
  // Resumed sessions' windows.
  RETURN_IF_ERROR(m->driver_->ProposePending("", /*wait_for_busy=*/true));
  return m;
}

int64_t SessionManager::NowMs() const { return absl::ToUnixMillis(options_.clock->Now()); }

std::string SessionManager::NewId(const std::string& prefix) {
  return absl::StrCat(prefix, "-", SecureRandomHex(6));
}

absl::Status SessionManager::Load() {
  // Sequence numbers start from the clock so a watcher that reconnects after
  // a restart never waits for numbers the new process already used.
  next_seq_ = std::max<int64_t>(1, absl::ToUnixMicros(options_.clock->Now()));
  ASSIGN_OR_RETURN(auto agents, options_.storage->ListAgents());
  for (auto& a : agents) scheduler_.PutAgent(std::move(a));
  // Active sessions only: finished ones are read back when asked for.
  storage::SessionQuery q;
  q.stages = StageNamesWhere(&StageTraits::active);
  ASSIGN_OR_RETURN(auto records, options_.storage->ListSessionsPage(q));
  std::vector<SessionRef> loaded;
  for (auto& rec : records) {
    ASSIGN_OR_RETURN(std::shared_ptr<SessionState> s,
                     SessionState::Restore(std::move(rec), options_.storage));
    // The events of the process before are gone: a watcher that reconnects
    // with one of its numbers gets a snapshot (and reads what it missed),
    // never a silent gap.
    s->dropped_through_seq = next_seq_.load() - 1;
    loaded.push_back(table_.Insert(std::move(s), /*active=*/true));
  }
  for (const SessionRef& s : loaded) {
    absl::MutexLock lock(&s->sync.mu);
    PublishStageLocked(*s);
  }
  ASSIGN_OR_RETURN(auto queued, options_.storage->ListTrialsByStatus(
                                    ts::kQueued, std::numeric_limits<int32_t>::max()));
  scheduler_.Rebuild(queued);
  // Resume what each stage left open (core/stage.h: StageResume): a running
  // session whose window is short (the server died between a completion and
  // its follow-up) is refilled; a doctor's or a verification's verdict whose
  // runs all finished is made.
  for (const SessionRef& s : loaded) {
    absl::MutexLock lock(&s->sync.mu);
    switch (TraitsOf(s->rec.stage).resume) {
      case StageResume::kNone:
        break;
      case StageResume::kSearch: {
        std::pair<std::optional<Priors>, std::string> priors{std::nullopt, "none"};
        if (options_.priors_for) priors = options_.priors_for(s->spec);
        ASSIGN_OR_RETURN(Bank::Seeds seeds, bank_->SeedsFor(s->spec, s->rec.id, s->rec.team));
        s->StartSearch(std::move(priors), std::move(seeds));
        RETURN_IF_ERROR(TransactLocked(*s, [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(s->sync.mu) { return FillWindowLocked(*s); }));
        break;
      }
      case StageResume::kDoctor:
      case StageResume::kVerification: {
        ASSIGN_OR_RETURN(auto trials, options_.storage->ListTrials(s->rec.id));
        const bool doctor = TraitsOf(s->rec.stage).resume == StageResume::kDoctor;
        RETURN_IF_ERROR(TransactLocked(*s, [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(s->sync.mu) {
          return doctor ? AdvanceDoctorLocked(*s, trials) : AdvanceVerificationLocked(*s, trials);
        }));
        break;
      }
    }
  }
  return absl::OkStatus();
}

void SessionManager::Trim() {
  SessionTable::Trimmed t = table_.Trim();
  for (const std::string& id : t.dropped) scheduler_.ForgetSession(id);
  // A finished session's backlog: the newest events (a watcher further
  // behind starts again from a snapshot). Under each one's own lock.
  for (const auto& s : t.kept) {
    absl::MutexLock lock(&s->sync.mu);
    s->TrimBacklog(kFinishedEventBacklog);
  }
}

absl::Status SessionManager::WriteTrialLocked(const SessionState& s, storage::TrialRecord& t) {
  t.executor = s.spec.ExecutorName();
  if (t.id == 0) {
    ASSIGN_OR_RETURN(t.id, options_.storage->InsertTrial(t));
  } else {
    RETURN_IF_ERROR(options_.storage->UpdateTrial(t));
  }
  // Filed whatever the stage (a doctor queues its runs before it moves to
  // doctoring); a lease checks the stage, and a session that stops leasing
  // takes its work out (PublishStageLocked). A lease that sees this entry
  // before the transaction commits waits for the session's lock and looks
  // again.
  scheduler_.File(t, s.Requirement());
  return absl::OkStatus();
}

void SessionManager::PublishStageLocked(const SessionState& s) {
  const StageTraits& traits = TraitsOf(s.rec.stage);
  table_.SetActive(s.rec.id, &s, traits.active);
  TrialScheduler::SessionWork work;
  work.leasing = traits.leasing;
  work.running = traits.stage == v1::STAGE_RUNNING;
  work.req = s.Requirement();
  if (work.leasing) {
    // The table holds the state while it is active; the spec is read only
    // while the session leases (it changes in stage doctored alone).
    work.spec = std::shared_ptr<const SessionSpec>(std::shared_ptr<const SessionSpec>(), &s.spec);
  }
  scheduler_.SetSession(s.rec.id, std::move(work));
}

absl::StatusOr<SessionManager::SessionRef> SessionManager::Find(const std::string& id) {
  if (id.empty()) return absl::InvalidArgumentError("session_id: required");
  if (SessionRef s = table_.Pin(id)) return s;
  // A finished session that left memory: read it back (its own record and
  // trials, whatever the history's size) without any lock. Nothing changes
  // it meanwhile: a session changes only while pinned, and a pinned one is
  // never let go.
  auto rec = options_.storage->GetSession(id);
  if (absl::IsNotFound(rec.status())) return NoSuchSession(id);
  if (!rec.ok()) return rec.status();
  ASSIGN_OR_RETURN(std::shared_ptr<SessionState> s,
                   SessionState::Restore(*std::move(rec), options_.storage));
  // Its event backlog did not come back with it: a watcher from before
  // starts again from a snapshot (which shows where the session is now),
  // never waits for events that were let go.
  s->dropped_through_seq = next_seq_.load() - 1;
  const bool active = TraitsOf(s->rec.stage).active;
  // Another call may have read it back meanwhile: then theirs is used.
  return table_.Insert(std::move(s), active);
}

absl::StatusOr<SessionManager::SessionRef> SessionManager::FindFor(const std::string& id,
                                                                   const Principal& who,
                                                                   Action action) {
  RETURN_IF_ERROR(Authorize(who, action));
  ASSIGN_OR_RETURN(SessionRef s, Find(id));
  if (!who.SeesTeam(s->rec.team)) return NoSuchSession(id);
  return s;
}

absl::StatusOr<SessionManager::SessionRef> SessionManager::RecordedSession(
    const storage::TrialRecord& t) {
  auto s = Find(t.session_id);
  if (absl::IsNotFound(s.status())) {
    return absl::InternalError(absl::StrCat("trial ", t.id, " has no session"));
  }
  return s;
}

void SessionManager::EmitLocked(SessionState& s, const std::string& kind,
                                const storage::TrialRecord* trial, const std::string& message) {
  v1::SessionEvent ev;
  ev.set_seq(next_seq_.fetch_add(1));
  ev.set_kind(kind);
  ev.set_message(message);
  if (trial) *ev.mutable_trial() = TrialViewOf(*trial);
  *ev.mutable_session() = s.Summary();
  s.AddEvent(std::move(ev), kMaxEventBacklog);
}

absl::Status SessionManager::TransactLocked(SessionState& s,
                                            const std::function<absl::Status()>& fn) {
  // Snapshot everything but the event backlog, which can be long.
  std::vector<v1::SessionEvent> events = std::move(s.events);
  SessionState saved = s;
  s.events = std::move(events);
  const int64_t last_seq = next_seq_.load() - 1;
  absl::Status st = options_.storage->Transaction(fn);
  if (st.ok() && !s.write_error.empty()) {
    s.write_error.clear();
    RefreshNoticeLocked(s);
  }
  if (!st.ok()) {
    events = std::move(s.events);
    events.erase(std::remove_if(events.begin(), events.end(),
                                [&](const v1::SessionEvent& e) { return e.seq() > last_seq; }),
                 events.end());
    s = std::move(saved);
    s.events = std::move(events);
    // The table and the queue followed writes storage just rolled back.
    PublishStageLocked(s);
    auto trials = options_.storage->ListTrials(s.rec.id);
    if (!trials.ok()) {
      return absl::Status(st.code(), absl::StrCat(st.message(), "; and the lease queue could not "
                                                                "be re-read: ",
                                                  trials.status().message()));
    }
    scheduler_.RefileSession(s.rec.id, *trials);
    if (absl::IsResourceExhausted(st) && s.write_error.empty()) {
      s.write_error = std::string(st.message());
      RefreshNoticeLocked(s);
    }
  }
  return st;
}

absl::Status SessionManager::SaveSessionLocked(SessionState& s, v1::Stage stage) {
  const std::string old = s.rec.stage;
  s.rec.stage = StageName(stage);
  s.rec.updated_ms = NowMs();
  RETURN_IF_ERROR(options_.storage->UpdateSession(s.rec));
  // What a report says of a finished session is what was true when it
  // finished: made now, in the same transaction, and served from then on.
  if (TraitsOf(stage).finished) RETURN_IF_ERROR(FreezeReportLocked(s));
  PublishStageLocked(s);
  if (!TraitsOf(stage).leasing) s.notice.clear();  // nothing waits any more
  // A search that ended lets go of its inputs (the spec's copy, the bank's
  // seeds and related trials), keeping what the report shows.
  if (stage != v1::STAGE_RUNNING &&
      (!s.search->related.empty() || !s.search->warm_starts.empty())) {
    s.search = LightSearch(*s.search);
  }
  if (stage != v1::STAGE_RUNNING) {  // and its proposals' memo and history
    s.proposal_memo.reset();
    s.search_history.reset();
  }
  if (old != s.rec.stage) EmitLocked(s, "stage_changed", nullptr);
  return absl::OkStatus();
}

// ------------------------------------------------------------------ Init

absl::StatusOr<v1::SessionSummary> SessionManager::Init(const v1::InitRequest& request,
                                                        const Principal& who) {
  RETURN_IF_ERROR(Authorize(who, Action::kSubmit));
  if (request.spec_yaml().empty()) return absl::InvalidArgumentError("spec_yaml: required");
  // The files the spec names, as sent: the manager reads no path.
  std::map<std::string, std::string> files;
  size_t total = 0;
  for (int i = 0; i < request.files_size(); ++i) {
    const v1::SpecFile& f = request.files(i);
    const std::string field = absl::StrCat("files[", i, "]");
    if (f.field().empty()) return absl::InvalidArgumentError(field + ".field: required");
    if (f.content().size() > kMaxSpecFileBytes) {
      return absl::InvalidArgumentError(absl::StrCat(field, ".content: ", f.field(), " is ",
                                                     f.content().size(), " bytes, more than ",
                                                     kMaxSpecFileBytes));
    }
    total += f.content().size();
    if (!files.emplace(f.field(), f.content()).second) {
      return absl::InvalidArgumentError(absl::StrCat(field, ".field: '", f.field(), "' sent twice"));
    }
  }
  if (total > kMaxSpecFilesBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("files: ", total, " bytes in all, more than ", kMaxSpecFilesBytes));
  }
  std::set<std::string> used;
  SpecParseOptions po;
  po.spec_dir = request.spec_dir();
  po.files = &files;
  po.files_used = &used;
  po.blob_hash = options_.blob_hash;
  po.source_repo = options_.source_repo;
  po.team_known = !who.team.empty();
  // Naming a URL makes the server read it: an admin's (and the open
  // server's) privilege; teams name what an admin registered for them.
  po.may_name_urls = who.open || who.role == Role::kAdmin;
  po.repository_url = [&](const std::string& name) -> absl::StatusOr<std::string> {
    auto repo = options_.storage->GetRepository(name);
    // Another team's repository answers as a missing one does.
    if (!repo.ok() || !(who.SeesTeam(repo->team))) {
      if (repo.ok() || absl::IsNotFound(repo.status())) {
        return absl::NotFoundError(absl::StrCat("no repository '", name,
                                                "' is registered for your team (an admin "
                                                "registers them: infrarsi-server repo add)"));
      }
      return repo.status();
    }
    return repo->url;
  };
  ASSIGN_OR_RETURN(SessionSpec spec, ParseSpec(request.spec_yaml(), po));
  for (const auto& [field, content] : files) {
    if (!used.count(field)) {
      return absl::InvalidArgumentError(
          absl::StrCat("files: '", field, "' is not a file this spec names"));
    }
  }

  auto s = std::make_shared<SessionState>();
  s->spec = std::move(spec);
  storage::SessionRecord& rec = s->rec;
  rec.id = NewId("ses");
  rec.name = s->spec.name;
  rec.spec_yaml = request.spec_yaml();
  rec.spec_dir = request.spec_dir();
  rec.stage = StageName(v1::STAGE_INITIALIZED);
  // The contract: what no trial may change. Frozen here; nothing else in the
  // API can edit it.
  rec.contract_hash = StableHash(ContractText(s->spec));
  rec.contract = ToJson(ContractProtoOf(s->spec, rec.contract_hash));
  rec.workload_signature = s->spec.WorkloadSignature();
  rec.gpu_model = s->spec.gpu;
  rec.created_ms = rec.updated_ms = NowMs();
  rec.doctor_repeats = s->spec.doctor_repeats;
  rec.max_trials = s->spec.max_trials;
  rec.team = who.team;
  rec.share_bank = s->spec.share_bank;
  rec.landscape = s->spec.replay.landscape_content;
  RETURN_IF_ERROR(options_.storage->InsertSession(rec));
  v1::SessionSummary out;
  {
    // Nobody else sees it before it is in the table; the lock is for form.
    absl::MutexLock lock(&s->sync.mu);
    EmitLocked(*s, "stage_changed", nullptr);
    out = s->Summary();
  }
  table_.Insert(std::move(s), /*active=*/true);
  return out;
}

// ------------------------------------------------------------------ Doctor

absl::StatusOr<v1::SessionSummary> SessionManager::Doctor(const v1::DoctorRequest& request,
                                                          const Principal& who) {
  if (request.repeats() < 0 || request.repeats() > 100) {
    return absl::InvalidArgumentError(
        absl::StrCat("repeats: must be in [0, 100], got ", request.repeats()));
  }
  ASSIGN_OR_RETURN(SessionRef s, FindFor(request.session_id(), who, Action::kSubmit));
  absl::MutexLock lock(&s->sync.mu);
  if (StageFromName(s->rec.stage) != v1::STAGE_INITIALIZED) {
    return StageError(s->rec.id, s->rec.stage, "doctor runs once, right after init");
  }
  const int repeats = request.repeats() > 0 ? request.repeats() : s->spec.doctor_repeats;
  // Refused up front when it can never run (more GPUs than any agent
  // holds), rather than queued to wait forever.
  if (std::string why = scheduler_.WhyNoneCanHold(s->Requirement()); !why.empty()) {
    return absl::FailedPreconditionError(why);
  }
  // Spread the baseline runs over the live agents that can run them, so a
  // slow host shows up; a pinned agent that dies hands its runs to others.
  const std::vector<std::string> hosts = scheduler_.LiveFitting(s->Requirement());
  // A watch from here sees the whole stage: its start, why it waits, every run.
  const int64_t watch_from = s->LastEventSeq();
  RETURN_IF_ERROR(TransactLocked(*s, [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(s->sync.mu) -> absl::Status {
    for (int i = 0; i < repeats; ++i) {
      storage::TrialRecord t;
      t.session_id = s->rec.id;
      t.purpose = trial_purpose::kDoctor;
      if (hosts.size() > 1) t.pin_agent = hosts[static_cast<size_t>(i) % hosts.size()];
      t.config = EncodeConfigJson(s->spec.baseline);
      t.status = ts::kQueued;
      t.created_ms = NowMs();
      RETURN_IF_ERROR(WriteTrialLocked(*s, t));
    }
    s->rec.doctor_repeats = repeats;
    return SaveSessionLocked(*s, v1::STAGE_DOCTORING);
  }));
  RefreshNoticeLocked(*s);  // said at once when no agent can run it
  scheduler_.Signal();
  v1::SessionSummary out = s->Summary();
  out.set_last_event_seq(watch_from);
  return out;
}

absl::Status SessionManager::AdvanceDoctorLocked(SessionState& s,
                                                 const std::vector<storage::TrialRecord>& trials) {
  // Two baseline runs that failed alike: the rest would too.
  if (std::string stop = RepeatedDoctorFailure(trials); !stop.empty()) {
    std::vector<storage::TrialRecord> ended = trials;
    for (storage::TrialRecord& t : ended) {
      if (t.purpose != trial_purpose::kDoctor || !IsInFlightStatus(t.status)) continue;
      t.status = ts::kCancelled;
      t.finished_ms = NowMs();
      RETURN_IF_ERROR(WriteTrialLocked(s, t));
    }
    // The verdict on what ran (it quotes the whole error), and why it
    // stopped there.
    const DoctorVerdict v = JudgeDoctor(s.spec, ended, {});
    s.rec.error = absl::StrCat(v.failure.empty() ? "doctor: no baseline run succeeded" : v.failure,
                               " (", stop, ")");
    return SaveSessionLocked(s, v1::STAGE_FAILED);
  }
  bool done = false;
  const std::vector<int64_t> ok_runs = DoctorRunsToRead(trials, &done);
  if (!done) return absl::OkStatus();
  std::map<int64_t, std::vector<storage::StepRecord>> steps;
  for (int64_t id : ok_runs) {
    ASSIGN_OR_RETURN(steps[id], options_.storage->ListSteps(id));
  }
  DoctorVerdict v = JudgeDoctor(s.spec, trials, steps);
  if (!v.failure.empty()) {
    s.rec.error = std::move(v.failure);
    return SaveSessionLocked(s, v1::STAGE_FAILED);
  }
  s.doctor = std::move(v.report);
  s.rec.doctor_report = ToJson(s.doctor);
  s.rec.baseline_step_time_s = s.doctor.median_step_time_s();
  s.rec.baseline_cv = s.doctor.cv();
  s.rec.baseline_runs = s.doctor.runs();
  return SaveSessionLocked(s, v1::STAGE_DOCTORED);
}

// ------------------------------------------------------------------ Run

absl::StatusOr<v1::SessionSummary> SessionManager::Run(const v1::RunRequest& request,
                                                       const Principal& who) {
  if (request.max_trials() < 0 || request.max_trials() > 100000) {
    return absl::InvalidArgumentError(
        absl::StrCat("max_trials: must be in [0, 100000], got ", request.max_trials()));
  }
  // Priors may come over the network and the bank's seeds grow with
  // history: both are read before taking the lock.
  std::pair<std::optional<Priors>, std::string> priors{std::nullopt, "none"};
  Bank::Seeds seeds;
  ASSIGN_OR_RETURN(SessionRef s, FindFor(request.session_id(), who, Action::kSubmit));
  {
    absl::MutexLock lock(&s->sync.mu);
    if (StageFromName(s->rec.stage) != v1::STAGE_DOCTORED) {
      return StageError(s->rec.id, s->rec.stage, "run needs a finished doctor (stage doctored)");
    }
  }
  // The spec and the team are fixed: read without the lock.
  if (options_.priors_for) priors = options_.priors_for(s->spec);
  ASSIGN_OR_RETURN(seeds, bank_->SeedsFor(s->spec, s->rec.id, s->rec.team));
  // The LLM's patches, once, before the search: admitted onto a copy of the
  // spec outside the lock (git checks each), swapped in under it.
  std::optional<std::pair<SessionSpec, LlmPatchRound>> llm;
  if (options_.llm_patches) llm = AskLlmPatches(*s, seeds);
  absl::ReleasableMutexLock lock(&s->sync.mu);
  // Looked at again: another call may have started it meanwhile.
  if (StageFromName(s->rec.stage) != v1::STAGE_DOCTORED) {
    return StageError(s->rec.id, s->rec.stage, "run needs a finished doctor (stage doctored)");
  }
  if (std::string why = scheduler_.WhyNoneCanHold(s->Requirement()); !why.empty()) {
    return absl::FailedPreconditionError(why);
  }
  if (llm) {
    s->spec = std::move(llm->first);
    s->llm_round = std::move(llm->second);
  }
  s->StartSearch(std::move(priors), std::move(seeds));
  s->stop_reason.clear();
  // A watch from here sees the whole run: its start, why it waits, every trial.
  const int64_t watch_from = s->LastEventSeq();
  RETURN_IF_ERROR(TransactLocked(*s, [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(s->sync.mu) -> absl::Status {
    if (request.max_trials() > 0) s->rec.max_trials = request.max_trials();
    RETURN_IF_ERROR(SaveSessionLocked(*s, v1::STAGE_RUNNING));
    return FillWindowLocked(*s);
  }));
  RefreshNoticeLocked(*s);
  // The first proposals, outside the lock; the summary shows them queued.
  lock.Release();
  RETURN_IF_ERROR(driver_->ProposePending(s->rec.id, /*wait_for_busy=*/true));
  scheduler_.Signal();
  absl::MutexLock again(&s->sync.mu);
  v1::SessionSummary out = s->Summary();
  out.set_last_event_seq(watch_from);
  return out;
}

std::optional<std::pair<SessionSpec, LlmPatchRound>> SessionManager::AskLlmPatches(
    SessionState& s, const Bank::Seeds& seeds) {
  v1::DoctorReport doctor;
  {
    absl::MutexLock lock(&s.sync.mu);
    if (s.llm_round.asked) return std::nullopt;  // once per session
    doctor = s.doctor;
  }
  std::pair<SessionSpec, LlmPatchRound> out{s.spec, LlmPatchRound()};
  LlmPatchRound& round = out.second;
  round.asked = true;  // whatever comes of it, this was the session's one ask
  if (s.spec.repository.url.empty() || s.spec.contract.editable.empty()) {
    round.note = "not asked: the session has no repository or no editable scope";
    return out;
  }
  LlmPatchContext ctx;
  ctx.spec = &s.spec;
  ctx.doctor = &doctor;
  ctx.files = EditableFilesForLlm(s.spec, options_.source_repo);
  ctx.bank = absl::StrCat(seeds.related.size(), " trials of this workload from other sessions, ",
                          seeds.warm_starts.size(), " of their best settings");
  auto body = options_.llm_patches(ctx);
  if (!body.ok()) {
    round.note = absl::StrCat("not used: ", body.status().message());
    return out;
  }
  auto admitted = AdmitLlmPatches(*body, options_.source_repo, &out.first);
  if (!admitted.ok()) {
    round.note = absl::StrCat("not used: ", admitted.status().message());
    return out;
  }
  round = *std::move(admitted);
  return out;
}

// ------------------------------------------------------------------ the search window

int SessionManager::WindowRoomLocked(SessionState& s) {
  // Keep one trial in flight per live agent: enough to use the cluster, few
  // enough that every proposal sees nearly all results.
  const int live = static_cast<int>(scheduler_.LiveFitting(s.Requirement()).size());
  const int window = std::clamp(live, 1, kMaxInFlightPerSession);
  const int budget_left = s.rec.max_trials - s.search_total;
  if (budget_left <= 0 && s.stop_reason.empty()) {
    s.stop_reason = absl::StrCat("trial budget spent (", s.rec.max_trials, " search trials)");
  }
  return std::min(window - s.search_in_flight, budget_left);
}

absl::Status SessionManager::FillWindowLocked(SessionState& s) {
  if (StageFromName(s.rec.stage) != v1::STAGE_RUNNING) return absl::OkStatus();
  if (WindowRoomLocked(s) > 0 && s.stop_reason.empty()) {
    driver_->MarkPending(s.rec.id);
    return absl::OkStatus();
  }
  // A proposal being made finishes the run itself if it queues nothing.
  if (s.search_in_flight == 0 && !driver_->IsProposing(s.rec.id)) return FinishRunLocked(s);
  return absl::OkStatus();
}

absl::StatusOr<SessionWriter::Window> SessionManager::OpenWindow(const std::string& session_id,
                                                                 bool wait) {
  Window w;
  SessionRef s = table_.Pin(session_id);
  if (!s) {
    driver_->EndProposal(session_id);
    return w;  // left memory: it no longer runs
  }
  if (wait) {
    s->sync.mu.Lock();
  } else if (!s->sync.mu.TryLock()) {
    w.state = Window::State::kBusy;
    return w;
  }
  HeldLock lock(&s->sync.mu);
  if (StageFromName(s->rec.stage) != v1::STAGE_RUNNING) {
    driver_->EndProposal(session_id);
    return w;
  }
  w.room = s->stop_reason.empty() ? WindowRoomLocked(*s) : 0;
  if (w.room <= 0) {
    driver_->EndProposal(session_id);
    RETURN_IF_ERROR(TransactLocked(*s, [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(s->sync.mu) { return FillWindowLocked(*s); }));
    return w;
  }
  w.state = Window::State::kOpen;
  w.inputs = s->search;
  w.stop_below = SearchStopBelow(s->spec, s->doctor.noise_floor());
  if (!s->proposal_memo) s->proposal_memo = std::make_shared<ProposalMemo>();
  w.memo = s->proposal_memo;
  if (!s->search_history) s->search_history = std::make_shared<SearchHistory>();
  w.history = s->search_history;
  return w;
}

absl::StatusOr<std::vector<storage::TrialRecord>> SessionManager::ReadTrials(
    const std::string& session_id, int64_t after_rev) {
  // Committed before the session's lock was let go, on the session reader.
  return session_reader_->ListTrialsChangedSince(session_id, after_rev);
}

absl::Status SessionManager::Settle(const std::string& session_id, const Proposal* proposal,
                                    const std::string& stop) {
  SessionRef s = table_.Pin(session_id);
  if (!s) {
    driver_->EndProposal(session_id);
    return absl::OkStatus();
  }
  {
    absl::MutexLock lock(&s->sync.mu);
    driver_->EndProposal(session_id);
    if (!stop.empty()) s->stop_reason = stop;
    RETURN_IF_ERROR(TransactLocked(*s, [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(s->sync.mu) {
      return proposal != nullptr ? ApplyProposalLocked(*s, *proposal) : FillWindowLocked(*s);
    }));
  }
  scheduler_.Signal();
  return absl::OkStatus();
}

absl::Status SessionManager::ApplyProposalLocked(SessionState& s, const Proposal& p) {
  // The session may have moved on while the proposal was made (cancelled,
  // trials finished, agents gone): queue what there is still room for.
  if (StageFromName(s.rec.stage) != v1::STAGE_RUNNING) return absl::OkStatus();
  const int room = s.stop_reason.empty() ? WindowRoomLocked(s) : 0;
  // Stop: nothing left to try, or nothing expected to beat the best by
  // more than the noise (checked only once min_trials ran).
  if (room <= 0) {
    // Nothing to queue (the budget went meanwhile).
  } else if (std::string stop = SearchStopReason(s.spec, s.search_done, p, s.doctor.noise_floor());
             !stop.empty()) {
    s.stop_reason = std::move(stop);
  } else {
    for (size_t i = 0; i < p.configs.size() && static_cast<int>(i) < room; ++i) {
      storage::TrialRecord t;
      t.session_id = s.rec.id;
      t.purpose = trial_purpose::kSearch;
      t.config = EncodeConfigJson(p.configs[i]);
      t.tag = p.reasons[i];
      t.status = ts::kQueued;
      t.created_ms = NowMs();
      RETURN_IF_ERROR(WriteTrialLocked(s, t));
      ++s.search_total;
      ++s.search_in_flight;
    }
  }
  return FillWindowLocked(s);
}

absl::Status SessionManager::FinishRunLocked(SessionState& s) {
  ASSIGN_OR_RETURN(auto trials, options_.storage->ListTrials(s.rec.id));
  ASSIGN_OR_RETURN(VerificationPlan plan,
                   PlanVerification(s.spec, s.rec.id, s.rec.baseline_step_time_s, s.doctor,
                                    s.stop_reason, trials, NowMs()));
  s.verification = std::move(plan.verification);
  s.rec.verification = ToJson(s.verification);
  if (plan.runs.empty()) {
    s.rec.best_trial_id = 0;
    return SaveSessionLocked(s, v1::STAGE_SEARCHED);
  }
  for (storage::TrialRecord& t : plan.runs) RETURN_IF_ERROR(WriteTrialLocked(s, t));
  scheduler_.Signal();
  return SaveSessionLocked(s, v1::STAGE_VERIFYING);
}

absl::Status SessionManager::AdvanceVerificationLocked(SessionState& s,
                                                       std::vector<storage::TrialRecord> trials) {
  VerificationDecision d = DecideVerification(s.spec, s.doctor, s.verification, trials, NowMs());
  if (!d.done) return absl::OkStatus();
  for (const VerificationDecision::Implausible& bad : d.implausible) {
    for (auto& t : trials) {
      if (t.id != bad.trial_id) continue;
      t.status = ts::kViolation;
      t.violation = "implausible";
      t.error = bad.error;
      RETURN_IF_ERROR(WriteTrialLocked(s, t));
      if (absl::Status b = options_.storage->SetBankStatus(t.id, t.status);
          !b.ok() && !absl::IsNotFound(b)) {
        return b;
      }
      if (t.id == s.best_trial_id) s.best_trial_id = 0;
    }
  }
  for (const int64_t id : d.unconfirmed) {
    if (absl::Status b = options_.storage->SetBankStatus(id, ts::kUnconfirmed);
        !b.ok() && !absl::IsNotFound(b)) {
      return b;
    }
  }
  if (s.best_trial_id == 0) {
    // The best search trial, now that some may have been disqualified.
    for (const auto& t : trials) RETURN_IF_ERROR(s.ConsiderBest(t));
  }
  if (!d.retry_runs.empty()) {
    // The host got busier than the doctor found it: another round of
    // fresh pairs, in the same transaction as the plan that names them.
    for (storage::TrialRecord& t : d.retry_runs) RETURN_IF_ERROR(WriteTrialLocked(s, t));
    s.verification = std::move(d.verification);
    s.rec.verification = ToJson(s.verification);
    scheduler_.Signal();
    return SaveSessionLocked(s, v1::STAGE_VERIFYING);
  }
  s.verification = std::move(d.verification);
  s.rec.best_trial_id = d.promoted_trial_id;
  s.rec.verification = ToJson(s.verification);
  return SaveSessionLocked(s, v1::STAGE_SEARCHED);
}

// ------------------------------------------------------------------ Cancel

absl::StatusOr<v1::SessionSummary> SessionManager::Cancel(const std::string& session_id,
                                                          const Principal& who) {
  ASSIGN_OR_RETURN(SessionRef s, FindFor(session_id, who, Action::kSubmit));
  absl::MutexLock lock(&s->sync.mu);
  // A searched session has finished too: cancelling it would only take
  // away its result (apply needs the searched stage).
  if (IsTerminalStage(StageFromName(s->rec.stage)) ||
      StageFromName(s->rec.stage) == v1::STAGE_SEARCHED) {
    return StageError(s->rec.id, s->rec.stage, "it has already ended; cancel stops an unfinished one");
  }
  ASSIGN_OR_RETURN(auto trials, options_.storage->ListTrials(s->rec.id));
  RETURN_IF_ERROR(TransactLocked(*s, [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(s->sync.mu) -> absl::Status {
    for (auto& t : trials) {
      if (!IsInFlightStatus(t.status)) continue;
      t.status = ts::kCancelled;
      t.finished_ms = NowMs();
      RETURN_IF_ERROR(WriteTrialLocked(*s, t));
    }
    s->search_in_flight = 0;
    return SaveSessionLocked(*s, v1::STAGE_CANCELLED);
  }));
  return s->Summary();
}

// ------------------------------------------------------------------ Apply

absl::StatusOr<v1::ApplyResponse> SessionManager::Apply(const v1::ApplyRequest& request,
                                                        const Principal& who) {
  if (!request.repo_path().empty()) {
    return absl::InvalidArgumentError(
        "repo_path: the server commits into no repository; `infrarsi apply --repo PATH` commits "
        "into your own clone");
  }
  if (request.branch().empty()) return absl::InvalidArgumentError("branch: required");
  if (!request.commit().empty() &&
      (request.commit().size() != 40 ||
       request.commit().find_first_not_of("0123456789abcdef") != std::string::npos)) {
    return absl::InvalidArgumentError("commit: a full SHA-1 in lower-case hex");
  }
  ASSIGN_OR_RETURN(SessionRef s, FindFor(request.session_id(), who, Action::kSubmit));
  absl::MutexLock lock(&s->sync.mu);
  const v1::Stage stage = StageFromName(s->rec.stage);
  if (stage != v1::STAGE_SEARCHED && stage != v1::STAGE_APPLIED) {
    return StageError(s->rec.id, s->rec.stage, "apply needs a finished run (stage searched)");
  }
  const int rank = s->verification.promoted_rank();
  if (s->rec.best_trial_id == 0 || rank <= 0 || rank > s->verification.candidates_size()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "session_id: session ", s->rec.id, " promoted no setting (",
        s->verification.summary().empty() ? "no setting beat the baseline"
                                          : s->verification.summary(),
        "); nothing to apply"));
  }
  ApplyInputs in;
  in.spec = &s->spec;
  in.session_id = s->rec.id;
  in.session_name = s->rec.name;
  in.workload_signature = s->rec.workload_signature;
  in.contract_hash = s->rec.contract_hash;
  in.baseline_step_time_s = s->rec.baseline_step_time_s;
  in.baseline_cv = s->rec.baseline_cv;
  in.baseline_runs = s->rec.baseline_runs;
  in.noise_floor = s->doctor.noise_floor();
  in.promoted = s->verification.candidates(rank - 1);
  in.trial_id = s->rec.best_trial_id;
  in.config = Config(in.promoted.config().begin(), in.promoted.config().end());
  in.contract = FromJson<v1::Contract>(s->rec.contract);
  // The same plan every time, author time included: a retried commit is
  // the same commit.
  in.decided_unix_s = (s->verification.decided_unix_ms() > 0 ? s->verification.decided_unix_ms()
                                                             : s->rec.created_ms) / 1000;
  v1::ApplyResponse resp;
  BuildApplyPlan(in, &resp);
  resp.set_branch(request.branch());
  resp.set_dry_run(request.dry_run());
  resp.set_commit(s->rec.applied_commit);
  if (request.commit().empty() || request.dry_run()) return resp;
  // The second call: record the commit the caller made from this plan.
  if (stage == v1::STAGE_APPLIED) {
    if (request.commit() == s->rec.applied_commit) return resp;  // a retry
    return absl::FailedPreconditionError(absl::StrCat("session_id: session ", s->rec.id,
                                                      " was already applied as commit ",
                                                      s->rec.applied_commit));
  }
  RETURN_IF_ERROR(TransactLocked(*s, [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(s->sync.mu) {
    s->rec.applied_commit = request.commit();
    return SaveSessionLocked(*s, v1::STAGE_APPLIED);
  }));
  resp.set_commit(request.commit());
  return resp;
}

}  // namespace infrarsi
