// SessionManager: the server's facade and the stage machine of every
// session (init, doctor, run, verify, report, apply, cancel) and its
// events. It coordinates the owners of the server's state, each with its
// own lock and its own tests (ARCHITECTURE.md has the picture):
//   SessionTable (core/session_table)     which sessions are in memory, pinned
//   SessionState (core/session_state)     one session's data, under its lock
//   TrialScheduler (core/trial_scheduler) agents, liveness, the lease queue
//   SearchDriver (core/search_driver)     proposals, made outside every lock,
//                                         written back through SessionWriter
// and applies the pure decisions beside them: a trial's disposition
// (core/trial_rules), the doctor's verdict (core/doctor_verdict), the
// verification's plan and verdict (core/verification), a report
// (core/report), what an agent is told (core/assignment). The gRPC services
// are thin adapters over it.
//
// Durability: every state change is one storage transaction, so a server
// killed at any point restarts (Create on the same storage) with each
// session where it stopped and no finished trial lost or counted twice.
//
// Memory: only active sessions (initialized to verifying) live in memory,
// with a bounded cache of finished ones; start-up reads the active ones
// only, and a finished session is read back from storage when asked for.
//
// Thread safety: all public methods are thread-safe. Lock order: a
// session's lock (SessionState::sync.mu), then storage's writer (a
// Transaction holds it for its length), then any one leaf: the table's,
// the scheduler's or the driver's, each held for microseconds; leaves never
// nest and nothing takes a session's lock or calls storage under one. A call
// about one session never waits for another's. Nothing whose cost grows
// with history runs under any lock: bank reads go through Bank on a reader
// connection, a report is assembled from a snapshot after the session's
// lock is let go, and a proposal reads its session's trials on a second
// reader connection with no lock held. Private methods named ...Locked
// require their session's lock (annotated where clang can check it).
#ifndef INFRARSI_CORE_SESSION_MANAGER_H_
#define INFRARSI_CORE_SESSION_MANAGER_H_

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "base/clock.h"
#include "core/agent_report.h"
#include "core/auth.h"
#include "core/bank.h"
#include "core/contract.h"
#include "core/llm_patches.h"
#include "core/metrics.h"
#include "core/optimizer.h"
#include "core/priors.h"
#include "core/search_driver.h"
#include "core/session_state.h"
#include "core/session_table.h"
#include "core/source_repo.h"
#include "core/spec.h"
#include "core/stage.h"
#include "core/trial_rules.h"
#include "core/trial_status.h"
#include "core/trial_scheduler.h"
#include "infrarsi/v1/infrarsi.pb.h"
#include "storage/storage.h"

namespace infrarsi {

class SessionManager : private SessionWriter {
 public:
  struct Options {
    // Required; not owned; must outlive the manager.
    storage::Storage* storage = nullptr;
    // Not owned. Where bank reads and reports go. Null: a reader the
    // manager opens on `storage` (Storage::OpenReader), or `storage` itself
    // where it has none (an in-memory database).
    storage::Storage* reader = nullptr;
    // Finished sessions kept in memory after their last use (beyond that,
    // the least recently used leave memory; the server trims on its reaper
    // tick). Active sessions always stay.
    size_t finished_cache = 16;
    // Retention of per-step metrics: PruneSteps drops the steps of sessions
    // that finished longer ago than this (their trials, summaries, bank
    // entries and reports stay). Zero: kept forever.
    absl::Duration step_retention = absl::ZeroDuration();
    // Not owned. Default: the real clock.
    Clock* clock = Clock::Real();
    // Not owned. Null: a ModelOptimizer owned by the manager.
    Optimizer* optimizer = nullptr;
    // How long an agent holds a trial without reporting progress.
    absl::Duration lease_timeout = absl::Seconds(30);
    // Leases a trial may lose before it is recorded as failed.
    int max_attempts = 3;
    // An agent is counted live (for how many trials to keep in flight) if it
    // sent anything within this period.
    // Agents heartbeat this often (said in the registration's reply) and
    // count as dead after `heartbeat_misses` beats missed in a row.
    absl::Duration heartbeat_interval = absl::Seconds(5);
    int heartbeat_misses = 3;
    // The release that writes (infrarsi-server sets its version): named in
    // each frozen report.
    std::string release = "dev";
    // Git's blob id of a file's content, which locks protected files at
    // Init (the agents check the same). Null: hashes stay empty. The manager
    // reads no file: submitters send the files their specs name.
    std::function<std::string(const std::string&)> blob_hash;
    // Prior knob effects for a session's search, asked once when its run
    // starts (and again for running sessions after a restart), outside the
    // manager's lock: it may block on the network. Returns the priors (none:
    // a cold start) and a label for the report ("file", "file+llm", or why
    // the LLM's answer was not used). Null: every search starts cold.
    std::function<std::pair<std::optional<Priors>, std::string>(const SessionSpec&)> priors_for;
    // Not owned. Checks a session's patches against its repository at Init
    // (the server's is libgit2, on its mirror of the registered repository).
    // Null: patches are checked as text only.
    const SourceRepo* source_repo = nullptr;
    // Code patches from a language model: asked once per session when its
    // run starts (outside the lock: it may block on the network), shown the
    // doctor's profile, the editable files (read through `source_repo`), the
    // contract and what the bank knows; returns the model's response body.
    // Its proposals are admitted as a spec's patches are (core/
    // llm_patches.h). Null: no session asks.
    std::function<absl::StatusOr<std::string>(const LlmPatchContext&)> llm_patches;
  };

  // Loads every session from storage and resumes the active ones.
  static absl::StatusOr<std::unique_ptr<SessionManager>> Create(const Options& options);

  // ----- sessions
  // `who` (core/auth.h) is the caller: a session belongs to the team that
  // created it; others get PERMISSION_DENIED and nothing else. The default
  // is the open server (no tokens).
  absl::StatusOr<v1::SessionSummary> Init(const v1::InitRequest& request,
                                          const Principal& who = Principal::Open());
  absl::StatusOr<v1::SessionSummary> Doctor(const v1::DoctorRequest& request,
                                            const Principal& who = Principal::Open());
  absl::StatusOr<v1::SessionSummary> Run(const v1::RunRequest& request,
                                         const Principal& who = Principal::Open());
  absl::StatusOr<v1::SessionReport> Report(const std::string& session_id,
                                           const Principal& who = Principal::Open());
  absl::StatusOr<v1::ApplyResponse> Apply(const v1::ApplyRequest& request,
                                          const Principal& who = Principal::Open());
  // What one of the session's trials printed (the last MiB of a stream);
  // the report's team rules. NOT_FOUND for a trial of another session or
  // output retention removed.
  absl::StatusOr<v1::TrialLogResponse> GetTrialLog(const v1::GetTrialLogRequest& request,
                                                   const Principal& who = Principal::Open());
  absl::StatusOr<v1::SessionSummary> GetSession(const std::string& session_id,
                                                const Principal& who = Principal::Open());
  // The sessions `who` may see, newest first, a page at a time.
  absl::StatusOr<v1::ListSessionsResponse> ListSessions(
      const v1::ListSessionsRequest& request = {}, const Principal& who = Principal::Open());
  absl::StatusOr<v1::SessionSummary> Cancel(const std::string& session_id,
                                            const Principal& who = Principal::Open());

  // Events of a session with seq > after_seq, waiting up to `timeout` (real
  // time) for one. after_seq 0 (or one older than the retained backlog)
  // starts with a "snapshot". Returns an empty list on timeout, UNAVAILABLE
  // after Shutdown().
  absl::StatusOr<std::vector<v1::SessionEvent>> WaitEvents(const std::string& session_id,
                                                           int64_t after_seq,
                                                           absl::Duration timeout,
                                                           const Principal& who = Principal::Open());

  // ----- agents
  // `who` is the agent's token: an agent id is bound to the token that
  // registered it (another token gets PERMISSION_DENIED for it), a token
  // scoped to a team serves that team's sessions only, and a lease is bound
  // to the token that took it (no other may report on it or complete it).
  absl::StatusOr<v1::RegisterAgentResponse> RegisterAgent(const v1::RegisterAgentRequest& r,
                                                          const Principal& who = Principal::Open());
  absl::StatusOr<v1::HeartbeatResponse> Heartbeat(const v1::HeartbeatRequest& r,
                                                  const Principal& who = Principal::Open());
  // A clean exit: the agent is no longer live (doctor runs stop being
  // spread onto it) and trials it still holds go back to the queue without
  // an attempt counted.
  absl::StatusOr<v1::DeregisterAgentResponse> DeregisterAgent(
      const v1::DeregisterAgentRequest& r, const Principal& who = Principal::Open());
  // The agents `who` may see (an admin all, a team its own and the shared
  // pool), with what each ran.
  absl::StatusOr<v1::ListAgentsResponse> ListAgents(const v1::ListAgentsRequest& r,
                                                    const Principal& who = Principal::Open());
  // Admin only: "draining" (finishes what it holds, takes no more),
  // "quarantined" (takes nothing until resumed), "active" (resume).
  absl::StatusOr<v1::AgentInfo> SetAgentState(const v1::SetAgentStateRequest& r,
                                              const Principal& who = Principal::Open());
  // Leases the oldest queued trial this agent can run, if any (none for an
  // agent that is draining, quarantined or gone). Never blocks.
  absl::StatusOr<std::optional<v1::TrialAssignment>> TryLease(
      const std::string& agent_id, const Principal& who = Principal::Open());
  // A lease TryLease handed to a call whose caller had gone by the time it
  // was to be delivered: the trial goes straight back to the queue, its
  // attempt not counted. FAILED_PRECONDITION when the lease is no longer
  // that one (reported on, completed, expired).
  absl::Status ReturnUndelivered(int64_t trial_id, const std::string& lease_token,
                                 const Principal& who = Principal::Open());
  // Blocks up to `timeout` (real time) or until new work may be available.
  // Returns false once Shutdown() was called.
  bool WaitForWork(absl::Duration timeout);
  absl::StatusOr<v1::ReportProgressResponse> ReportProgress(
      const v1::ReportProgressRequest& r, const Principal& who = Principal::Open());
  // Records a trial's end; an outcome "refused" (the agent's policy) sends
  // it to another agent instead.
  absl::StatusOr<v1::CompleteTrialResponse> CompleteTrial(
      const v1::CompleteTrialRequest& r, const Principal& who = Principal::Open());
  // Retention (Options::step_retention): deletes up to `limit` per-step rows
  // of sessions that finished before the retention window; returns how many.
  // Runs on the writer connection without the manager's lock. The server
  // calls it every few minutes, repeating while a call fills its limit.
  absl::StatusOr<int64_t> PruneSteps(int32_t limit = 20000);

  // Re-queues (or fails, after max_attempts) trials whose lease expired,
  // and says on each waiting session's stream why no agent takes its work.
  // The server's reaper calls it periodically (not the lease path, which
  // every long-polling agent hits on each wake-up).
  absl::Status ExpireLeases();

  // ----- bank
  // Entries of `who`'s team's sessions and of sessions shared with every
  // team (`share_bank: true`).
  absl::StatusOr<v1::QueryExperienceResponse> QueryExperience(
      const v1::QueryExperienceRequest& request, const Principal& who = Principal::Open());

  // Wakes every waiter; later waits return at once.
  void Shutdown();

  // For operators and benchmarks: sessions held in memory, and queued
  // trials indexed for leasing.
  struct Stats {
    size_t resident_sessions = 0;
    size_t queued_trials = 0;
    int64_t leases_expired = 0;  // since start: leases that ran out (requeued or failed)
    std::map<std::string, int> agents_by_state;  // registered, not deregistered
    int agents_live = 0;                        // heard from and taking work
    int64_t search_trials_read = 0;  // since start: SearchDriver::TrialsRead
  };
  Stats GetStats() const;
  // How long proposals took (fitting the search's models), since start.
  Histogram::Snapshot ProposalLatency() const { return driver_->Latency(); }

 private:
  using SessionRef = SessionTable::Ref;

  explicit SessionManager(const Options& options);
  absl::Status Load();

  // The session, pinned, read back from storage if it is not in memory
  // (reading storage with no lock held).
  absl::StatusOr<SessionRef> Find(const std::string& id);
  // Find, after checking that `who` may do `action` to the session.
  absl::StatusOr<SessionRef> FindFor(const std::string& id, const Principal& who, Action action);
  // The session trial `t` belongs to (INTERNAL when there is none).
  absl::StatusOr<SessionRef> RecordedSession(const storage::TrialRecord& t);
  // A trial's session, pinned and locked, and the trial as read again under
  // that lock (a report, a completion or an expiry may have changed it
  // since it was first read): what it says then is what counts. The lock is
  // held while the LockedTrial lives (and let go before the pin).
  struct LockedTrial {
    SessionRef session;
    std::unique_ptr<absl::MutexLock> lock;
    storage::TrialRecord trial;
  };
  absl::StatusOr<LockedTrial> LockTrial(int64_t trial_id);
  // Leased and running trials that `pick` selects (read without any lock).
  absl::StatusOr<std::vector<storage::TrialRecord>> LeasedTrials(
      const std::function<bool(const storage::TrialRecord&)>& pick);

  // ----- one session's changes; each requires s.sync.mu
  // Writes trial `t` (inserting it when t.id is 0) and files it with the
  // scheduler as its status says.
  absl::Status WriteTrialLocked(const SessionState& s, storage::TrialRecord& t) ABSL_EXCLUSIVE_LOCKS_REQUIRED(s.sync.mu);
  // Tells the table and the scheduler what the session's stage means
  // (core/stage.h's traits).
  void PublishStageLocked(const SessionState& s) ABSL_EXCLUSIVE_LOCKS_REQUIRED(s.sync.mu);
  void EmitLocked(SessionState& s, const std::string& kind, const storage::TrialRecord* trial,
                  const std::string& message = "") ABSL_EXCLUSIVE_LOCKS_REQUIRED(s.sync.mu);
  // Runs `fn` as one storage transaction. If it fails, the session's
  // in-memory state is put back as it was and the events it emitted are
  // dropped, so memory never runs ahead of the database.
  absl::Status TransactLocked(SessionState& s, const std::function<absl::Status()>& fn) ABSL_EXCLUSIVE_LOCKS_REQUIRED(s.sync.mu);
  absl::Status SaveSessionLocked(SessionState& s, v1::Stage stage) ABSL_EXCLUSIVE_LOCKS_REQUIRED(s.sync.mu);
  // What `d` (core/trial_rules) decided for leased trial `t`: back in the
  // queue, or finished. Inside the caller's transaction.
  absl::Status DisposeLocked(SessionState& s, storage::TrialRecord& t, const Disposition& d) ABSL_EXCLUSIVE_LOCKS_REQUIRED(s.sync.mu);
  absl::Status RequeueLocked(SessionState& s, storage::TrialRecord& t, const Disposition& d)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(s.sync.mu);
  // Records a finished trial (bank entry included) and moves its session on.
  absl::Status FinishTrialLocked(SessionState& s, storage::TrialRecord& t) ABSL_EXCLUSIVE_LOCKS_REQUIRED(s.sync.mu);
  // The doctor's verdict once its runs are done (core/doctor_verdict).
  absl::Status AdvanceDoctorLocked(SessionState& s,
                                   const std::vector<storage::TrialRecord>& trials) ABSL_EXCLUSIVE_LOCKS_REQUIRED(s.sync.mu);
  // The verification's verdict once its runs are done, from the trials.
  absl::Status AdvanceVerificationLocked(SessionState& s,
                                         std::vector<storage::TrialRecord> trials) ABSL_EXCLUSIVE_LOCKS_REQUIRED(s.sync.mu);
  // Keeps the search's window full: where there is room, marks the session
  // pending with the search driver (which proposes outside the locks);
  // finishes the run when nothing is in flight or due.
  absl::Status FillWindowLocked(SessionState& s) ABSL_EXCLUSIVE_LOCKS_REQUIRED(s.sync.mu);
  // How many search trials the window has room for; sets s.stop_reason
  // when the trial budget is spent.
  int WindowRoomLocked(SessionState& s) ABSL_EXCLUSIVE_LOCKS_REQUIRED(s.sync.mu);
  // Queues what the window still has room for of proposal `p` (made while
  // no lock was held), or stops the search.
  absl::Status ApplyProposalLocked(SessionState& s, const Proposal& p) ABSL_EXCLUSIVE_LOCKS_REQUIRED(s.sync.mu);
  absl::Status FinishRunLocked(SessionState& s) ABSL_EXCLUSIVE_LOCKS_REQUIRED(s.sync.mu);
  // The LLM's patches for `s` (once per session): the spec with the
  // admitted ones and the round; none when already asked. Not under the
  // session's lock (it takes it briefly).
  std::optional<std::pair<SessionSpec, LlmPatchRound>> AskLlmPatches(SessionState& s,
                                                                     const Bank::Seeds& seeds);
  // How many timed steps trial `t` must report (0: not checked).
  // The trial's output as sent with its outcome, checked and cut to
  // kMaxTrialLogBytes a stream.
  static absl::StatusOr<std::vector<storage::TrialLogRecord>> TrialLogsOf(int64_t trial_id,
                                                                          const v1::TrialOutcome& o);
  static int ExpectedTimedSteps(const SessionState& s, const storage::TrialRecord& t);
  // What trial `t` is held to: the doctor's figures and the hardware's.
  static ContractReference ReferenceFor(const SessionState& s, const storage::TrialRecord& t);
  // Checks a finished trial against the contract; sets status "violation".
  void ApplyContractLocked(const SessionState& s, storage::TrialRecord& t,
                           const TrialEvidence& evidence) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(s.sync.mu);
  // What trial `t`'s reports are held to (core/agent_report.h).
  ReportLimits LimitsLocked(const SessionState& s, const storage::TrialRecord& t) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(s.sync.mu);
  // Sets s.notice (and says so on its stream when it changed): why no live
  // agent can take its work, or "" when one can or it has none.
  // The report of `s` as it stands (its trials read on the writer's
  // connection: inside a transaction, what it wrote so far), stored as the
  // session's frozen report. Called when it reaches a finished stage.
  absl::Status FreezeReportLocked(SessionState& s) ABSL_EXCLUSIVE_LOCKS_REQUIRED(s.sync.mu);
  void RefreshNoticeLocked(SessionState& s) ABSL_EXCLUSIVE_LOCKS_REQUIRED(s.sync.mu);
  // RefreshNoticeLocked for every session that leases, but busy ones.
  void RefreshNotices();
  // Quarantines agents whose trials in `s` failed where the same setting
  // succeeded on another agent (kQuarantineAfterFailures of them).
  absl::Status QuarantineBrokenHostsLocked(SessionState& s,
                                           const std::vector<storage::TrialRecord>& trials) ABSL_EXCLUSIVE_LOCKS_REQUIRED(s.sync.mu);

  // SessionWriter, for the search driver.
  absl::StatusOr<Window> OpenWindow(const std::string& session_id, bool wait) override;
  absl::StatusOr<std::vector<storage::TrialRecord>> ReadTrials(
      const std::string& session_id, int64_t after_rev) override;
  absl::Status Settle(const std::string& session_id, const Proposal* proposal,
                      const std::string& stop) override;

  // ReportProgress under the trial's lock; sets *finished_session when the
  // report ended the trial (pruned, or a violation its lines showed), whose
  // session then needs its follow-up proposal.
  absl::StatusOr<v1::ReportProgressResponse> RecordProgress(const v1::ReportProgressRequest& r,
                                                            const Principal& who,
                                                            std::string* finished_session);
  // CompleteTrial and ExpireLeases but the proposals that follow them.
  // Sets *session_id to the trial's session.
  absl::StatusOr<v1::CompleteTrialResponse> RecordCompletion(const v1::CompleteTrialRequest& r,
                                                             const Principal& who,
                                                             std::string* session_id);
  absl::Status RequeueExpired();
  // Lets finished sessions beyond the cache leave memory and trims the
  // event backlogs of those that stay.
  void Trim();
  // The trial a lease names, if `who` took it (and `agent_id`, when given,
  // holds it).
  static absl::Status CheckLeaseHolder(const storage::TrialRecord& t, const Principal& who,
                                       const std::string& agent_id);
  // Puts the trials agent `agent_id` holds back in the queue, noting `why`.
  // Returns how many.
  absl::StatusOr<int> RequeueLeasesOf(const std::string& agent_id, const std::string& why);
  // A fresh, unpredictable id ("ses-3f2a...").
  static std::string NewId(const std::string& prefix);
  int64_t NowMs() const;

  const Options options_;
  std::unique_ptr<Optimizer> owned_optimizer_;
  Optimizer* optimizer_;
  std::unique_ptr<storage::Storage> owned_reader_, owned_session_reader_;
  storage::Storage* reader_ = nullptr;          // the bank's reads
  storage::Storage* session_reader_ = nullptr;  // one session's reads outside the lock
  std::unique_ptr<Bank> bank_;

  // Event sequence numbers: global, so one number says "everything so far".
  std::atomic<int64_t> next_seq_{1};
  std::atomic<bool> shutdown_{false};

  SessionTable table_;
  TrialScheduler scheduler_;
  std::unique_ptr<SearchDriver> driver_;
};

}  // namespace infrarsi

#endif  // INFRARSI_CORE_SESSION_MANAGER_H_
