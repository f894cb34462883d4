// The session manager's read side: a session's summary, a page of the
// session list, a report, the event stream, the bank, and shutdown,
// retention and statistics. Reads take a session's lock only for a
// snapshot (never waiting on a busy one for a list); what grows with
// history is read on the reader connections with no lock held.
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "base/held_lock.h"
#include "base/status_macros.h"
#include "core/report.h"
#include "core/session_manager.h"

namespace infrarsi {

// ------------------------------------------------------------------ read side

absl::StatusOr<v1::SessionSummary> SessionManager::GetSession(const std::string& session_id,
                                                              const Principal& who) {
  ASSIGN_OR_RETURN(SessionRef s, FindFor(session_id, who, Action::kRead));
  absl::MutexLock lock(&s->sync.mu);
  return s->Summary();
}

absl::StatusOr<v1::ListSessionsResponse> SessionManager::ListSessions(
    const v1::ListSessionsRequest& request, const Principal& who) {
  RETURN_IF_ERROR(Authorize(who, Action::kRead));
  if (request.page_size() < 0 || request.page_size() > 1000) {
    return absl::InvalidArgumentError(
        absl::StrCat("page_size: must be in [0, 1000], got ", request.page_size()));
  }
  storage::SessionQuery q;
  if (!who.open && who.role != Role::kAdmin) {
    q.any_team = false;
    q.team = who.team;
  }
  if (!request.page_token().empty() &&
      (!absl::SimpleAtoi(request.page_token(), &q.before_seq) || q.before_seq <= 0)) {
    return absl::InvalidArgumentError("page_token: not a token this server issued");
  }
  const int32_t page = request.page_size() > 0 ? request.page_size() : 100;
  q.limit = page + 1;
  // The page's records come from the reader, without the lock.
  ASSIGN_OR_RETURN(auto records, session_reader_->ListSessionsPage(q));
  const bool more = records.size() > static_cast<size_t>(page);
  if (more) records.resize(static_cast<size_t>(page));
  // Sessions in memory are summarised under their own locks; the others
  // are read back without any (a page of finished sessions costs ~0.3 ms
  // each) and without entering memory: a listing must not fill the cache.
  std::vector<std::string> ids;
  for (const auto& r : records) ids.push_back(r.id);
  const std::vector<std::shared_ptr<SessionState>> resident = table_.Peek(ids);
  // A session busy with its own work is read as storage has it (its last
  // committed state) rather than waited for.
  std::vector<std::optional<v1::SessionSummary>> summaries(records.size());
  for (size_t i = 0; i < records.size(); ++i) {
    if (resident[i] == nullptr || !resident[i]->sync.mu.TryLock()) continue;
    HeldLock lock(&resident[i]->sync.mu);
    summaries[i] = resident[i]->Summary();
  }
  v1::ListSessionsResponse resp;
  if (more) resp.set_next_page_token(absl::StrCat(records.back().seq));
  for (size_t i = 0; i < records.size(); ++i) {
    if (!summaries[i]) {
      ASSIGN_OR_RETURN(auto state, SessionState::Restore(std::move(records[i]), session_reader_));
      summaries[i] = state->Summary();
    }
    *resp.add_sessions() = *std::move(summaries[i]);
  }
  return resp;
}

namespace {

// What Report reads of a session under its lock.
ReportInputs SnapshotForReport(const SessionState& s, std::shared_ptr<const SearchInputs>* search) {
  ReportInputs in;
  in.summary = s.Summary();
  in.rec = s.rec;
  in.spec = s.spec;
  in.doctor = s.doctor;
  in.verification = s.verification;
  in.best_trial_id = s.best_trial_id;
  in.best_config = s.best_config;
  *search = s.search;
  in.stop_reason = s.stop_reason;
  in.llm_round = s.llm_round;
  in.priors = (*search)->priors ? &*(*search)->priors : nullptr;
  in.priors_label = (*search)->priors_label;
  in.warm_starts = (*search)->warm_start_count;
  in.related_trials = (*search)->related_count;
  return in;
}

}  // namespace

absl::Status SessionManager::FreezeReportLocked(SessionState& s) {
  std::shared_ptr<const SearchInputs> search;  // keeps in.priors alive
  const ReportInputs in = SnapshotForReport(s, &search);
  ASSIGN_OR_RETURN(auto trials, options_.storage->ListTrials(s.rec.id));
  ASSIGN_OR_RETURN(v1::SessionReport rep, BuildReport(in, trials, *optimizer_));
  storage::FrozenReportRecord f;
  f.session_id = s.rec.id;
  f.release = options_.release;
  f.frozen_ms = NowMs();
  rep.set_recorded(absl::StrCat("frozen when the session finished (stage ", s.rec.stage,
                                "), by infrarsi ", f.release));
  f.report = rep.SerializeAsString();
  return options_.storage->PutFrozenReport(f);
}

absl::StatusOr<v1::SessionReport> SessionManager::Report(const std::string& session_id,
                                                        const Principal& who) {
  // A snapshot under the lock; the trials are read and the models fitted
  // without it (a report of a long session costs what the session holds).
  ReportInputs in;
  std::shared_ptr<const SearchInputs> search;  // keeps in.priors alive
  {
    ASSIGN_OR_RETURN(SessionRef s, FindFor(session_id, who, Action::kRead));
    absl::MutexLock lock(&s->sync.mu);
    in = SnapshotForReport(*s, &search);
  }
  const bool finished = TraitsOf(in.rec.stage).finished;
  if (finished) {
    // Finished: the report made then, never refitted by today's models.
    auto frozen = session_reader_->GetFrozenReport(in.rec.id);
    if (frozen.ok()) {
      v1::SessionReport rep;
      if (!rep.ParseFromString(frozen->report)) {
        return absl::DataLossError(absl::StrCat("session ", in.rec.id,
                                                ": its stored report does not parse (damaged)"));
      }
      return rep;
    }
    if (!absl::IsNotFound(frozen.status())) return frozen.status();
  }
  ASSIGN_OR_RETURN(auto trials, session_reader_->ListTrials(in.rec.id));
  ASSIGN_OR_RETURN(v1::SessionReport rep, BuildReport(in, trials, *optimizer_));
  if (finished) {
    MarkRecordedBeforeFreezing(&rep, options_.release);
  } else {
    rep.set_recorded(absl::StrCat("as the session stands now, by infrarsi ", options_.release));
  }
  return rep;
}

// ------------------------------------------------------------------ events, bank

absl::StatusOr<std::vector<v1::SessionEvent>> SessionManager::WaitEvents(
    const std::string& session_id, int64_t after_seq, absl::Duration timeout,
    const Principal& who) {
  // Pinned: it stays in memory while the lock is let go.
  ASSIGN_OR_RETURN(SessionRef s, FindFor(session_id, who, Action::kRead));
  absl::MutexLock lock(&s->sync.mu);
  if (shutdown_) return absl::UnavailableError("server is shutting down");
  std::vector<v1::SessionEvent> out;
  if (after_seq <= 0 || after_seq < s->dropped_through_seq) {
    // Sequence numbers are global, so "now" covers everything seen so far.
    v1::SessionEvent snap;
    snap.set_seq(next_seq_.load() - 1);
    snap.set_kind("snapshot");
    *snap.mutable_session() = s->Summary();
    out.push_back(std::move(snap));
    return out;
  }
  const absl::Time deadline = absl::Now() + timeout;
  while (!shutdown_ && (s->events.empty() || s->events.back().seq() <= after_seq)) {
    if (s->sync.events.WaitWithDeadline(&s->sync.mu, deadline)) break;
  }
  for (const auto& ev : s->events) {
    if (ev.seq() > after_seq) out.push_back(ev);
  }
  return out;
}

absl::StatusOr<v1::QueryExperienceResponse> SessionManager::QueryExperience(
    const v1::QueryExperienceRequest& request, const Principal& who) {
  return bank_->Query(request, who);  // no lock of ours: the bank reads on its own connection
}

void SessionManager::Shutdown() {
  shutdown_ = true;
  scheduler_.Shutdown();
  // A watcher checks the flag under its session's lock before it waits, so
  // a signal sent under that lock reaches it.
  for (const auto& s : table_.All()) {
    absl::MutexLock lock(&s->sync.mu);
    s->sync.events.SignalAll();
  }
}

absl::StatusOr<int64_t> SessionManager::PruneSteps(int32_t limit) {
  if (options_.step_retention <= absl::ZeroDuration()) return 0;
  const int64_t before = absl::ToUnixMillis(options_.clock->Now() - options_.step_retention);
  return options_.storage->PruneSteps(StageNamesWhere(&StageTraits::finished), before, limit);
}

SessionManager::Stats SessionManager::GetStats() const {
  const TrialScheduler::Stats sched = scheduler_.GetStats();
  Stats st;
  st.resident_sessions = table_.size();
  st.queued_trials = sched.queued_trials;
  st.leases_expired = sched.leases_expired;
  st.agents_by_state = sched.agents_by_state;
  st.agents_live = sched.agents_live;
  st.search_trials_read = driver_->TrialsRead();
  return st;
}

}  // namespace infrarsi
