// Durable state of the server: sessions, trials, per-step measurements,
// agents and the experience bank.
//
// Storage holds plain records and knows nothing of what they mean: the
// config of a trial is an opaque canonical string written by core. All
// times are Unix milliseconds.
//
// Thread safety: implementations are safe to call from several threads. A
// Transaction() holds the writer for its whole length: another thread's
// call (a single write or a transaction) waits until it has committed or
// rolled back, so a rollback never takes another caller's write with it.
// Core relies on this: sessions write concurrently, each under its own lock.
#ifndef INFRARSI_STORAGE_STORAGE_H_
#define INFRARSI_STORAGE_STORAGE_H_

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace infrarsi::storage {

struct SessionRecord {
  std::string id;
  std::string name;
  std::string spec_yaml;
  std::string spec_dir;
  std::string stage;  // core's stage name, e.g. "running"
  std::string contract_hash;
  std::string workload_signature;
  std::string gpu_model;
  int64_t created_ms = 0;
  int64_t updated_ms = 0;
  int32_t doctor_repeats = 0;
  int32_t max_trials = 0;  // the run's budget once Run started
  double baseline_step_time_s = 0;
  double baseline_cv = 0;
  int32_t baseline_runs = 0;
  int64_t best_trial_id = 0;  // 0: none
  std::string error;
  std::string applied_commit;
  std::string doctor_report;  // encoded by core
  std::string verification;   // encoded by core
  std::string contract;       // encoded by core: what Init locked
  std::string team;           // the team that owns it ("" before tokens)
  bool share_bank = false;    // its bank entries are readable by other teams
  // A replay session's landscape, as the submitter sent it (the server
  // reads no file a spec names); empty otherwise.
  std::string landscape;
  // What the session's search started from (its priors, how many bank
  // seeds and related trials), encoded by core: the report shows it after
  // the session left memory.
  std::string search;
  // Storage's insertion order (set on reads, ignored on writes): the cursor
  // of ListSessionsPage.
  int64_t seq = 0;
};

// Which sessions ListSessionsPage returns: newest first.
struct SessionQuery {
  // Only sessions of this team (`any_team`: all teams).
  bool any_team = true;
  std::string team;
  // Only sessions in one of these stages (empty: any stage).
  std::vector<std::string> stages;
  int64_t before_seq = 0;  // paging: sessions with seq < before_seq (0: from the newest)
  int32_t limit = 0;       // 0: no limit
};

// An API token. Only its hash is stored; the token itself is shown once.
struct TokenRecord {
  std::string id;
  std::string hash;  // hex digest of the whole token
  std::string name;
  std::string role;  // admin, submitter, reader, agent
  std::string team;
  int64_t created_ms = 0;
  int64_t revoked_ms = 0;  // 0: live
};

struct TrialRecord {
  int64_t id = 0;  // assigned by InsertTrial
  std::string session_id;
  std::string purpose;  // "doctor", "search" or "verify" (core/trial_status.h)
  std::string config;   // canonical encoding, owned by core
  std::string status;   // queued, leased, running, ok, oom, failed, timeout, violation, cancelled
  int32_t attempts = 0;
  std::string lease_agent;
  std::string lease_token;
  int64_t lease_deadline_ms = 0;
  double step_time_s = 0;
  double peak_mem_gib = 0;
  double cost_s = 0;
  std::string error;
  std::string note;
  std::string agent;  // who produced the outcome
  int64_t created_ms = 0;
  int64_t finished_ms = 0;
  std::string violation;  // contract check that failed, e.g. "tokens_per_step"
  std::string tag;        // free-form label owned by core (verification arm)
  std::string pin_agent;  // only this agent may lease it (empty: any)
  // The agent's clock over the timed window (trials that ran a real
  // process): its length in seconds and the timed steps inside it.
  double observed_window_s = 0;
  int32_t observed_steps = 0;
  // How far the agent's clock may be off over that window: the read delays
  // of the lines that open and close it.
  double clock_slack_s = 0;
  // How much longer than the process ran cost_s may read (the agent's
  // TrialOutcome.wall_resolution_s; 0 before schema v18).
  double wall_resolution_s = 0;
  int64_t leased_ms = 0;       // when the current lease was handed out
  // The token that took the current lease ("" on an open server): only it
  // may report on the lease or complete it.
  std::string lease_token_id;
  // Agents that refused the trial under their policy, comma-separated: it
  // is not offered to them again.
  std::string refused_by;
  // The executor its session runs ("replay", "process", "sim"; "" for
  // trials written before schema v11), for metrics.
  std::string executor;
  // The Slurm job it ran as, encoded by core ("" when it ran as none).
  std::string slurm;
  // Wall seconds of its attempts the infrastructure failed.
  double lost_s = 0;
  // What it ran under on its agent's host, as the agent stated it (""
  // before schema v14 and for executors that run no tenant code).
  std::string isolation;
  // When it was last written, among its session's trials: InsertTrial and
  // UpdateTrial set it (what the record passed holds is ignored) above
  // every rev its session's trials had, so a reader that has seen the
  // trials up to rev r reads what changed since with
  // ListTrialsChangedSince(session, r). Read-only for callers.
  int64_t rev = 0;
};

struct StepRecord {
  int64_t trial_id = 0;
  int64_t step = 0;
  double loss = 0;
  int64_t tokens = 0;
  double step_time_s = 0;
  double peak_mem_gib = 0;
  bool warmup = false;
  std::string phases;  // canonical encoding, owned by core
  std::string extra = "{}";  // further per-step fields, encoded by core
};

struct AgentRecord {
  std::string id;
  std::string host;
  std::string gpu_model;
  int32_t gpu_count = 0;
  double memory_per_gpu_gib = 0;
  std::string executors;  // comma-separated
  int64_t registered_ms = 0;
  int64_t last_heartbeat_ms = 0;
  // The token that registered the id ("" on an open server): the id is
  // bound to it. `team`: the team that token is scoped to ("" for the
  // shared pool). What the agent's operator lets it run: teams it serves
  // and command prefixes (JSON lists of strings, "[]": any).
  std::string token_id;
  std::string team;
  std::string serves = "[]";
  std::string commands = "[]";
  // "active" (takes work), "draining" (finishes what it holds, takes no
  // more), "quarantined" (takes no work until an admin resumes it) or
  // "gone" (deregistered); why, for the last three.
  std::string state = "active";
  std::string state_reason;
};

// A team's repository, registered by an admin on the server host: sessions
// name it, agents fetch it from `url`.
struct RepositoryRecord {
  std::string name;
  std::string url;
  std::string team;
  int64_t created_ms = 0;
};

struct BankRecord {
  int64_t id = 0;  // assigned by AddBankEntry
  std::string session_id;
  int64_t trial_id = 0;
  std::string workload_signature;
  std::string gpu_model;
  int32_t gpu_count = 0;
  std::string config;
  std::string status;
  double step_time_s = 0;
  double peak_mem_gib = 0;
  double cost_s = 0;
  int64_t created_ms = 0;
  // Who may read it: the owning session's team, and whether that session
  // shares its entries with every team. Fixed when written.
  std::string team;
  bool shared = false;
  std::string purpose;  // the trial's: "doctor", "search", "verify"
  // The setting as (knob, value) pairs, written to an indexed side table
  // so that knob filters need not scan the config text.
  std::vector<std::pair<std::string, std::string>> knobs;
};

struct BankFilter {
  std::string workload_signature;  // empty: any
  std::string gpu_model;           // empty: any; compared case-insensitively
  std::string status;              // empty: any
  std::string purpose;             // empty: any
  // Each (knob, value) must be one of the entry's.
  std::vector<std::pair<std::string, std::string>> knobs;
  // Only entries this team may read (its own and shared ones); unset: all.
  std::optional<std::string> visible_to_team;
  // Newest first (descending id) unless `oldest_first`, or with `fastest`
  // by ascending step time (then id).
  bool oldest_first = false;
  bool fastest = false;
  // Paging: entries past this one in the order asked (0: from the start).
  int64_t cursor = 0;
  int32_t limit = 50;
};

// A finished session's report as it was when the session finished: the
// release that made it and the report's serialized bytes (core's).
struct FrozenReportRecord {
  std::string session_id;
  std::string release;
  int64_t frozen_ms = 0;
  std::string report;
};

// What a trial printed: the last `content` bytes of one stream, and how
// many bytes before them were not kept.
struct TrialLogRecord {
  int64_t trial_id = 0;
  std::string stream;  // "stdout" or "stderr"
  std::string content;
  int64_t dropped_bytes = 0;
};

class Storage {
 public:
  virtual ~Storage() = default;

  // Another connection to the same database for reads that must not queue
  // behind this one (bank queries, reports): with SQLite's WAL, readers
  // see the last committed state and never block the writer. UNIMPLEMENTED
  // where there is no such thing (a private in-memory database): callers
  // then read through this one.
  virtual absl::StatusOr<std::unique_ptr<Storage>> OpenReader() {
    return absl::UnimplementedError("storage: no second connection to this database");
  }

  // Runs `fn` atomically: all its writes land or none do. `fn` must only call
  // this Storage. Not reentrant.
  virtual absl::Status Transaction(const std::function<absl::Status()>& fn) = 0;

  virtual absl::Status InsertSession(const SessionRecord& s) = 0;
  // NOT_FOUND if no session has s.id.
  virtual absl::Status UpdateSession(const SessionRecord& s) = 0;
  virtual absl::StatusOr<SessionRecord> GetSession(const std::string& id) = 0;
  // Oldest first.
  virtual absl::StatusOr<std::vector<SessionRecord>> ListSessions() = 0;
  // Newest first, what `q` selects; each record's seq is set.
  virtual absl::StatusOr<std::vector<SessionRecord>> ListSessionsPage(const SessionQuery& q) = 0;

  // Assigns and returns the new trial's id.
  virtual absl::StatusOr<int64_t> InsertTrial(const TrialRecord& t) = 0;
  virtual absl::Status UpdateTrial(const TrialRecord& t) = 0;
  virtual absl::StatusOr<TrialRecord> GetTrial(int64_t id) = 0;
  // Trials of one session by id.
  virtual absl::StatusOr<std::vector<TrialRecord>> ListTrials(
      const std::string& session_id) = 0;
  // Trials of one session written after `after_rev` (their rev above it),
  // by id: with after_rev 0, all of them. A reader that keeps a session's
  // trials reads only what changed since the highest rev it has seen: a
  // write committed after that read always gets a higher rev. (A trial
  // never moves to another session; trials are never deleted.)
  virtual absl::StatusOr<std::vector<TrialRecord>> ListTrialsChangedSince(
      const std::string& session_id, int64_t after_rev) = 0;
  // Trials in `status` over all sessions, by id, at most `limit`.
  virtual absl::StatusOr<std::vector<TrialRecord>> ListTrialsByStatus(
      const std::string& status, int32_t limit) = 0;

  // Inserts or replaces (trial_id, step).
  virtual absl::Status PutSteps(const std::vector<StepRecord>& steps) = 0;
  virtual absl::StatusOr<std::vector<StepRecord>> ListSteps(int64_t trial_id) = 0;
  // What a new report is checked against without reading the whole trial:
  // its steps numbered `from_step` or later and, in any case, its last one
  // (in step order), and how many steps it has in all.
  struct StepTail {
    std::vector<StepRecord> steps;
    int64_t count = 0;
  };
  virtual absl::StatusOr<StepTail> ListStepTail(int64_t trial_id, int64_t from_step) = 0;
  virtual absl::Status DeleteSteps(int64_t trial_id) = 0;
  // Retention: deletes per-step rows (and kept output) of trials whose
  // session is in one of `stages` and was last updated before `before_ms`,
  // at most `limit` rows of each (so that a large history is pruned in
  // short writes). Trials and their summaries stay. Returns the rows
  // deleted.
  virtual absl::StatusOr<int64_t> PruneSteps(const std::vector<std::string>& stages,
                                             int64_t before_ms, int32_t limit) = 0;

  // A trial's output, kept for `infrarsi logs`: the last bytes of one
  // stream (stdout or stderr), inserted or replaced by (trial_id, stream).
  // Retention prunes them with the steps (PruneSteps).
  virtual absl::Status PutTrialLog(const TrialLogRecord& log) = 0;
  // Stores (or replaces) a session's frozen report.
  virtual absl::Status PutFrozenReport(const FrozenReportRecord& r) = 0;
  // NOT_FOUND when the session has none (unfinished, or finished before
  // reports were frozen).
  virtual absl::StatusOr<FrozenReportRecord> GetFrozenReport(const std::string& session_id) = 0;
  // NOT_FOUND when the trial kept no such stream (or it was pruned).
  virtual absl::StatusOr<TrialLogRecord> GetTrialLog(int64_t trial_id, const std::string& stream) = 0;

  // Inserts or replaces by id.
  virtual absl::Status PutAgent(const AgentRecord& a) = 0;
  virtual absl::StatusOr<AgentRecord> GetAgent(const std::string& id) = 0;
  virtual absl::StatusOr<std::vector<AgentRecord>> ListAgents() = 0;
  // For metrics: sessions by stage, and trials by (status, executor) (each
  // an index scan: a scrape costs what the history holds, not a table scan).
  virtual absl::StatusOr<std::map<std::string, int64_t>> CountSessionsByStage() = 0;
  virtual absl::StatusOr<std::map<std::pair<std::string, std::string>, int64_t>>
  CountTrialsByStatus() = 0;
  // Finished trials agent `agent_id` ran, by status (from an index).
  virtual absl::StatusOr<std::map<std::string, int64_t>> CountAgentTrials(
      const std::string& agent_id) = 0;

  virtual absl::StatusOr<int64_t> AddBankEntry(const BankRecord& b) = 0;
  // Changes the status of the entry of `trial_id` (a verdict revised after
  // the fact); NOT_FOUND when it has none.
  virtual absl::Status SetBankStatus(int64_t trial_id, const std::string& status) = 0;
  // Matching entries in the order `f` asks (newest first by default), at
  // most f.limit. Filters use indexes: the cost of a query grows with the
  // rows it returns and skips in the index it uses, not with the bank.
  virtual absl::StatusOr<std::vector<BankRecord>> QueryBank(const BankFilter& f) = 0;
  // Whether any entry (one `visible_to_team` may read, when set) has a
  // knob named `knob`: an empty answer to a filter on a misspelt knob is
  // then told apart from one with no matching value.
  virtual absl::StatusOr<bool> BankHasKnob(const std::string& knob,
                                           const std::optional<std::string>& visible_to_team) = 0;
  // Bank statistics for operators and benchmarks.
  virtual absl::StatusOr<int64_t> CountBank() = 0;

  // ----- repositories
  // ALREADY_EXISTS when the name is taken.
  virtual absl::Status AddRepository(const RepositoryRecord& r) = 0;
  // NOT_FOUND for an unknown name.
  virtual absl::StatusOr<RepositoryRecord> GetRepository(const std::string& name) = 0;
  virtual absl::StatusOr<std::vector<RepositoryRecord>> ListRepositories() = 0;
  // NOT_FOUND for an unknown name.
  virtual absl::Status RemoveRepository(const std::string& name) = 0;

  // ----- tokens
  // ALREADY_EXISTS on a duplicate id or hash.
  virtual absl::Status AddToken(const TokenRecord& t) = 0;
  // NOT_FOUND when no token has this hash.
  virtual absl::StatusOr<TokenRecord> GetTokenByHash(const std::string& hash) = 0;
  virtual absl::StatusOr<std::vector<TokenRecord>> ListTokens() = 0;
  // Marks it revoked at `at_ms`; NOT_FOUND for an unknown id.
  virtual absl::Status RevokeToken(const std::string& id, int64_t at_ms) = 0;
};

// A reader connection of `storage` (Storage::OpenReader), owned by *owned;
// or `storage` itself where it has none (a private in-memory database).
inline absl::StatusOr<Storage*> ReaderOf(Storage* storage, std::unique_ptr<Storage>* owned) {
  auto reader = storage->OpenReader();
  if (reader.ok()) {
    *owned = *std::move(reader);
    return owned->get();
  }
  if (absl::IsUnimplemented(reader.status())) return storage;
  return reader.status();
}

}  // namespace infrarsi::storage

#endif  // INFRARSI_STORAGE_STORAGE_H_
