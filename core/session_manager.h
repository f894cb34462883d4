// SessionManager: the server's core. It owns the stage machine of every
// session and its events, and drives the parts beside it: the trial
// scheduler (TrialQueue, AgentRegistry, AssignmentFor), verification
// (PlanVerification, DecideVerification), report assembly (BuildReport) and
// the bank (Bank reads; entries written with each finished trial). The gRPC
// services are thin adapters over it.
//
// Durability: every state change is one storage transaction, so a server
// killed at any point restarts (Create on the same storage) with each
// session where it stopped and no finished trial lost or counted twice.
//
// Memory: only active sessions (initialized to verifying) live in memory,
// with a bounded cache of finished ones; start-up reads the active ones
// only, and a finished session is read back from storage when asked for.
//
// Thread safety: all public methods are thread-safe. Each session has its
// own lock, held for its state changes (one storage transaction each) and
// its reads; a call never waits for another session's work. The manager's
// own mutex (mu_) guards only what sessions share: the session table, the
// agents, the lease queue and the proposal marks. It is a leaf, held for
// microseconds: nothing takes a session's lock or calls storage while
// holding it. Lock order: a session's lock, then storage (whose
// Transaction holds the single writer for its length), then mu_. A lease
// takes the oldest runnable trial whose session is not busy. Nothing whose
// cost grows with history runs under any of them: bank reads go through
// Bank on a reader connection, a report is assembled from a snapshot after
// the session's lock is let go, and a proposal (fitting the search's
// models: up to tens of milliseconds) reads its session's trials on a
// second reader connection with no lock held, at most one per session at a
// time, by the thread whose call made room in the window; that call returns
// once they are queued.
#ifndef INFRARSI_CORE_SESSION_MANAGER_H_
#define INFRARSI_CORE_SESSION_MANAGER_H_

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "base/clock.h"
#include "core/agent_policy.h"
#include "core/agent_registry.h"
#include "core/agent_report.h"
#include "core/auth.h"
#include "core/bank.h"
#include "core/contract.h"
#include "core/metrics.h"
#include "core/source_repo.h"
#include "core/optimizer.h"
#include "core/priors.h"
#include "core/spec.h"
#include "core/llm_patches.h"
#include "core/stage.h"
#include "core/trial_queue.h"
#include "core/trial_status.h"
#include "infrarsi/v1/infrarsi.pb.h"
#include "storage/storage.h"

namespace infrarsi {

class SessionManager {
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
    absl::Duration agent_liveness = absl::Seconds(90);
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
  };
  Stats GetStats() const;
  // How long proposals took (fitting the search's models), since start.
  Histogram::Snapshot ProposalLatency() const { return proposal_latency_.Take(); }

 private:
  struct SearchInputs {
    // The session's spec (fixed at Init), shared so a proposal need not
    // copy it (patches alone may be megabytes).
    SessionSpec spec;
    std::optional<Priors> priors;
    std::string priors_label = "none";
    std::vector<Config> warm_starts;
    // The bank's trials of the same workload (any GPU) the models learn from.
    std::vector<SearchContext::Related> related;
    // How many of each there were: what the report shows once the vectors
    // are let go (a session that stopped searching keeps only these, its
    // priors and their label).
    int warm_start_count = 0;
    int related_count = 0;
  };
  // One session's state. `spec`, `rec.id` and `rec.team` are fixed once the
  // state is in the session table and may be read without a lock; the rest
  // is guarded by sync.mu. Methods named ...Locked that take a SessionState
  // require its sync.mu.
  struct SessionState {
    storage::SessionRecord rec;
    SessionSpec spec;
    // Derived from trials, kept incrementally.
    int search_in_flight = 0;
    int search_total = 0;  // search trials ever created
    int search_done = 0;   // finished search trials
    // Wall seconds its trials took (and attempts the infrastructure failed
    // lost): the report's total_cost_s, kept for the session list.
    double cost_s = 0;
    double best_step_time_s = 0;  // best ok trial (doctor or search), 0: none
    int64_t best_trial_id = 0;
    Config best_config;
    v1::DoctorReport doctor;          // decoded rec.doctor_report
    v1::Verification verification;    // decoded rec.verification
    std::vector<v1::SessionEvent> events;  // bounded backlog
    int64_t dropped_through_seq = 0;       // newest seq dropped from it
    // The search's inputs besides trials, set when the run starts and never
    // changed after: a proposal made outside the lock holds them.
    std::shared_ptr<const SearchInputs> search = std::make_shared<const SearchInputs>();
    std::string stop_reason;  // set when the search stops early
    // The LLM's patch proposals, asked once when the run starts (stored in
    // rec.search; its admitted patches are in `spec`).
    LlmPatchRound llm_round;
    // Why its work waits (SessionSummary.notice); not stored: the reaper
    // says it again after a restart.
    std::string notice;
    // Its trials that failed or timed out: while there are none, no host
    // can be broken by its evidence (the check is skipped).
    int host_failures = 0;
    // A Slurm session's nodes noted as failing its trials (its jobs'
    // --exclude): read from its trials by the first lease after a
    // completion that carried a job, not by every lease.
    std::optional<std::vector<std::string>> failing_nodes;

    // The session's lock and the signal of its events. A copy of the state
    // (TransactLocked's snapshot) copies the data only: the copy gets a
    // lock of its own, and assigning a state back keeps the target's.
    struct Sync {
      Sync() = default;
      Sync(const Sync&) {}
      Sync& operator=(const Sync&) { return *this; }
      absl::Mutex mu;
      absl::CondVar events;
    };
    mutable Sync sync;
  };
  // A session's place in the table, guarded by mu_: what the scheduler and
  // the cache need to know of it without taking its lock.
  struct Entry {
    std::shared_ptr<SessionState> state;
    uint64_t touched = 0;  // when it was last found (for the cache)
    int pins = 0;          // SessionRefs held: it stays in memory
    bool active = true;    // initialized..verifying: never leaves memory
    bool leasing = false;  // its queued trials may be leased
    bool running = false;  // searching: a new agent widens its window
    // A proposal for it is being made outside the locks; at most one at a
    // time, so two never propose the same setting.
    bool proposing = false;
  };
  // A session found in the table, pinned there (not trimmed from memory)
  // while the reference lives. Move-only. Dropping one takes mu_ briefly:
  // never drop one while holding mu_.
  class SessionRef {
   public:
    SessionRef() = default;
    SessionRef(SessionManager* m, std::shared_ptr<SessionState> s);
    SessionRef(SessionRef&& o) noexcept;
    SessionRef& operator=(SessionRef&& o) noexcept;
    ~SessionRef();
    SessionState& operator*() const { return *state_; }
    SessionState* operator->() const { return state_.get(); }
    SessionState* get() const { return state_.get(); }

   private:
    void Release();
    SessionManager* m_ = nullptr;
    std::shared_ptr<SessionState> state_;
  };

  // The stored record of what a search started from (the session record's
  // `search`), and the same inputs without what only proposals use.
  // `llm` (optional) receives the LLM's patch round stored with it.
  static std::shared_ptr<const SearchInputs> DecodeSearchRecord(const std::string& json,
                                                                LlmPatchRound* llm = nullptr);
  static std::shared_ptr<const SearchInputs> LightSearch(const SearchInputs& in);

  explicit SessionManager(const Options& options);
  absl::Status Load();

  // The session, pinned, read back from storage if it is not in memory.
  // Takes mu_ briefly; reads storage without it.
  absl::StatusOr<SessionRef> Find(const std::string& id) ABSL_LOCKS_EXCLUDED(mu_);
  // Find, after checking that `who` may do `action` to the session.
  absl::StatusOr<SessionRef> FindFor(const std::string& id, const Principal& who, Action action)
      ABSL_LOCKS_EXCLUDED(mu_);
  // The session trial `t` belongs to (INTERNAL when there is none).
  absl::StatusOr<SessionRef> RecordedSession(const storage::TrialRecord& t)
      ABSL_LOCKS_EXCLUDED(mu_);
  // A trial's session, pinned and locked, and the trial as read again under
  // that lock (a report, a completion or an expiry may have changed it
  // since it was first read): what it says then is what counts. The lock is
  // held while the LockedTrial lives (and let go before the pin).
  struct LockedTrial {
    SessionRef session;
    std::unique_ptr<absl::MutexLock> lock;
    storage::TrialRecord trial;
  };
  absl::StatusOr<LockedTrial> LockTrial(int64_t trial_id) ABSL_LOCKS_EXCLUDED(mu_);
  // Leased and running trials that `pick` selects (read without any lock).
  absl::StatusOr<std::vector<storage::TrialRecord>> LeasedTrials(
      const std::function<bool(const storage::TrialRecord&)>& pick);
  // Puts leased trial `t` back in the queue, saying why in its note;
  // `refund_attempt` gives back the attempt its lease counted, `unpin` lets
  // any host take it. Inside the caller's transaction.
  absl::Status RequeueLocked(SessionState& s, storage::TrialRecord& t, std::string note,
                             bool refund_attempt, bool unpin);
  // Pins `e` (its reference count) and returns a reference to it.
  SessionRef PinLocked(Entry& e) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Unpin(const std::string& id, const SessionState* s) ABSL_LOCKS_EXCLUDED(mu_);
  // A session's state rebuilt from its record and its trials, read from
  // `storage` (no lock needed: the state is the caller's).
  static absl::StatusOr<std::unique_ptr<SessionState>> Restore(storage::SessionRecord rec,
                                                               storage::Storage* storage);
  // Lets the least recently used finished sessions beyond the cache leave
  // memory and trims the event backlogs of those that stay.
  void Trim() ABSL_LOCKS_EXCLUDED(mu_);
  // Writes trial `t` (inserting it when t.id is 0) and keeps the lease
  // queue in step with its status.
  absl::Status WriteTrialLocked(const SessionState& s, storage::TrialRecord& t);
  TrialQueue::Requirement RequirementOf(const SessionState& s) const;
  // The queue as storage has it (start-up).
  absl::Status RebuildQueue() ABSL_LOCKS_EXCLUDED(mu_);
  // One session's part of the queue as storage has it (after a rolled-back
  // transaction, whose queue changes storage never saw).
  absl::Status RebuildSessionQueueLocked(const SessionState& s) ABSL_LOCKS_EXCLUDED(mu_);
  // Tells the table what the session's stage means for leasing and memory.
  void PublishStageLocked(const SessionState& s) ABSL_LOCKS_EXCLUDED(mu_);
  // A session's summary, from its state alone (the caller keeps `s` from
  // changing: its lock, or a state of its own).
  static v1::SessionSummary SummaryOf(const SessionState& s);
  // The seq of the session's newest event (kept or dropped).
  static int64_t LastEventSeq(const SessionState& s);
  void EmitLocked(SessionState& s, const std::string& kind, const storage::TrialRecord* trial,
                  const std::string& message = "");
  // Runs `fn` as one storage transaction. If it fails, the session's
  // in-memory state is put back as it was and the events it emitted are
  // dropped, so memory never runs ahead of the database.
  absl::Status TransactLocked(SessionState& s, const std::function<absl::Status()>& fn);
  absl::Status SaveSessionLocked(SessionState& s, const std::string& stage);
  // Records a finished trial (bank entry included) and moves its session on.
  absl::Status FinishTrialLocked(SessionState& s, storage::TrialRecord& t);
  // The doctor's verdict once its runs are done, from the session's trials.
  absl::Status AdvanceDoctorLocked(SessionState& s,
                                   const std::vector<storage::TrialRecord>& trials);
  // Keeps the search's window full: where there is room, marks the session
  // in refill_pending_ (the proposal itself is made by ProposePending,
  // outside the locks, since fitting the models takes milliseconds to tens
  // of them); finishes the run when nothing is in flight or due.
  absl::Status FillWindowLocked(SessionState& s);
  // How many search trials the window has room for; sets s.stop_reason
  // when the trial budget is spent.
  int WindowRoomLocked(SessionState& s);
  // Makes the proposals of sessions in refill_pending_, each computed
  // without holding a lock, and queues them (or stops the search): only
  // session `only` when it is given (the caller's own, whose lock it
  // waits for), else every one. A call for every one waits for a busy
  // session's lock only when `wait_for_busy`; otherwise it leaves that
  // session pending for its lock's holder (a method that may mark its
  // session calls this for it after releasing the lock) or the reaper.
  // On a storage error the session stays pending, for the next call (the
  // server's reaper calls ExpireLeases, which calls this, periodically).
  absl::Status ProposePending(const std::string& only, bool wait_for_busy)
      ABSL_LOCKS_EXCLUDED(mu_);
  void SetProposing(const std::string& id, bool proposing) ABSL_LOCKS_EXCLUDED(mu_);
  void MarkPending(const std::string& id) ABSL_LOCKS_EXCLUDED(mu_);
  // Queues what the window still has room for of proposal `p` (made while
  // no lock was held), or stops the search.
  absl::Status ApplyProposalLocked(SessionState& s, const Proposal& p);
  // Sets s.search: the priors, the bank's best settings of workloads like
  // this session's (in its space) and the bank's trials of the same
  // workload on any GPU (in its space), what the session's team may read.
  // The LLM's patches for `s` (once per session): the spec with the
  // admitted ones and the round; none when already asked. Not under the
  // session's lock (it takes it briefly).
  std::optional<std::pair<SessionSpec, LlmPatchRound>> AskLlmPatches(SessionState& s,
                                                                     const Bank::Seeds& seeds)
      ABSL_LOCKS_EXCLUDED(s.sync.mu);
  absl::Status StartSearchLocked(SessionState& s,
                                 std::pair<std::optional<Priors>, std::string> priors,
                                 Bank::Seeds seeds);

  // CompleteTrial and ExpireLeases but the proposals that follow them.
  // Sets *session_id to the trial's session.
  absl::StatusOr<v1::CompleteTrialResponse> RecordCompletion(const v1::CompleteTrialRequest& r,
                                                             const Principal& who,
                                                             std::string* session_id);
  absl::Status RequeueExpired();
  absl::Status FinishRunLocked(SessionState& s);
  // The verification's verdict once its runs are done, from the trials.
  absl::Status AdvanceVerificationLocked(SessionState& s,
                                         std::vector<storage::TrialRecord> trials);
  // How many timed steps trial `t` must report (0: not checked).
  static int ExpectedTimedSteps(const SessionState& s, const storage::TrialRecord& t);
  // Checks a finished trial against the contract; sets status "violation".
  void ApplyContractLocked(const SessionState& s, storage::TrialRecord& t,
                           const TrialEvidence& evidence) const;
  // What trial `t`'s reports are held to (core/agent_report.h).
  ReportLimits LimitsLocked(const SessionState& s, const storage::TrialRecord& t) const
      ABSL_LOCKS_EXCLUDED(mu_);
  int LiveAgentsFor(const SessionState& s) const ABSL_LOCKS_EXCLUDED(mu_);
  // The trial a lease names, if `who` took it (and `agent_id`, when given,
  // holds it).
  static absl::Status CheckLeaseHolder(const storage::TrialRecord& t, const Principal& who,
                                       const std::string& agent_id);
  // An agent's policy refused trial `t`: it goes to another agent that may
  // run it, or fails when none is left.
  // An outcome "infra": re-queued (its attempt counted), or failed as
  // "infrastructure: ..." after max_attempts.
  absl::Status InfraFailedLocked(SessionState& s, storage::TrialRecord& t,
                                 const v1::TrialOutcome& o);
  absl::Status RefuseLocked(SessionState& s, storage::TrialRecord& t, const std::string& why);
  // Sets s.notice (and says so on its stream when it changed): why no live
  // agent can take its work, or "" when one can or it has none.
  void RefreshNoticeLocked(SessionState& s);
  // RefreshNoticeLocked for every session that leases, but busy ones.
  void RefreshNotices() ABSL_LOCKS_EXCLUDED(mu_);
  // Quarantines agents whose trials in `s` failed where the same setting
  // succeeded on another agent (kQuarantineAfterFailures of them).
  absl::Status QuarantineBrokenHostsLocked(SessionState& s,
                                           const std::vector<storage::TrialRecord>& trials);
  // Puts the trials agent `agent_id` holds back in the queue (no attempt
  // counted), noting `why`. Returns how many.
  absl::StatusOr<int> RequeueLeasesOf(const std::string& agent_id, const std::string& why);
  v1::AgentInfo AgentInfoOf(const storage::AgentRecord& a) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
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
  std::atomic<int64_t> leases_expired_{0};
  Histogram proposal_latency_;

  mutable absl::Mutex mu_;
  absl::CondVar work_cv_;
  std::map<std::string, Entry> sessions_ ABSL_GUARDED_BY(mu_);
  AgentRegistry registry_ ABSL_GUARDED_BY(mu_);
  // Sessions a proposal is due for (by id; outside the session state, so a
  // rolled-back transaction leaves a mark at worst, which only costs a
  // recheck).
  std::set<std::string> refill_pending_ ABSL_GUARDED_BY(mu_);
  TrialQueue queue_ ABSL_GUARDED_BY(mu_);
  uint64_t next_touch_ ABSL_GUARDED_BY(mu_) = 1;
};

}  // namespace infrarsi

#endif  // INFRARSI_CORE_SESSION_MANAGER_H_
