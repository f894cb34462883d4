#include "storage/sqlite_storage.h"

#include <sys/stat.h>

#include <cstdio>
#include <ctime>
#include <vector>

#include <sqlite3.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <cstdlib>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "base/status_macros.h"

namespace infrarsi::storage {
namespace {

// Each entry moves the schema from version i to i+1. Never edit a shipped
// entry: add a new one.
const char* const kMigrations[] = {
    // v1: sessions, trials, per-step measurements, agents.
    R"sql(
CREATE TABLE sessions (
  id TEXT PRIMARY KEY,
  name TEXT NOT NULL,
  spec_yaml TEXT NOT NULL,
  spec_dir TEXT NOT NULL,
  stage TEXT NOT NULL,
  contract_hash TEXT NOT NULL,
  workload_signature TEXT NOT NULL,
  gpu_model TEXT NOT NULL,
  created_ms INTEGER NOT NULL,
  updated_ms INTEGER NOT NULL,
  doctor_repeats INTEGER NOT NULL DEFAULT 0,
  max_trials INTEGER NOT NULL DEFAULT 0,
  baseline_step_time_s REAL NOT NULL DEFAULT 0,
  baseline_cv REAL NOT NULL DEFAULT 0,
  baseline_runs INTEGER NOT NULL DEFAULT 0,
  best_trial_id INTEGER NOT NULL DEFAULT 0,
  error TEXT NOT NULL DEFAULT '',
  applied_commit TEXT NOT NULL DEFAULT ''
);
CREATE TABLE trials (
  id INTEGER PRIMARY KEY AUTOINCREMENT,
  session_id TEXT NOT NULL REFERENCES sessions(id),
  purpose TEXT NOT NULL,
  config TEXT NOT NULL,
  status TEXT NOT NULL,
  attempts INTEGER NOT NULL DEFAULT 0,
  lease_agent TEXT NOT NULL DEFAULT '',
  lease_token TEXT NOT NULL DEFAULT '',
  lease_deadline_ms INTEGER NOT NULL DEFAULT 0,
  step_time_s REAL NOT NULL DEFAULT 0,
  peak_mem_gib REAL NOT NULL DEFAULT 0,
  cost_s REAL NOT NULL DEFAULT 0,
  error TEXT NOT NULL DEFAULT '',
  note TEXT NOT NULL DEFAULT '',
  agent TEXT NOT NULL DEFAULT '',
  created_ms INTEGER NOT NULL,
  finished_ms INTEGER NOT NULL DEFAULT 0
);
CREATE INDEX trials_by_session ON trials(session_id, id);
CREATE INDEX trials_by_status ON trials(status, id);
CREATE TABLE steps (
  trial_id INTEGER NOT NULL REFERENCES trials(id),
  step INTEGER NOT NULL,
  loss REAL NOT NULL,
  tokens INTEGER NOT NULL,
  step_time_s REAL NOT NULL,
  peak_mem_gib REAL NOT NULL,
  warmup INTEGER NOT NULL,
  phases TEXT NOT NULL,
  PRIMARY KEY (trial_id, step)
);
CREATE TABLE agents (
  id TEXT PRIMARY KEY,
  host TEXT NOT NULL,
  gpu_model TEXT NOT NULL,
  gpu_count INTEGER NOT NULL,
  memory_per_gpu_gib REAL NOT NULL,
  executors TEXT NOT NULL,
  registered_ms INTEGER NOT NULL,
  last_heartbeat_ms INTEGER NOT NULL
);
)sql",
    // v2: the experience bank, shared across sessions.
    R"sql(
CREATE TABLE bank (
  id INTEGER PRIMARY KEY AUTOINCREMENT,
  session_id TEXT NOT NULL,
  trial_id INTEGER NOT NULL,
  workload_signature TEXT NOT NULL,
  gpu_model TEXT NOT NULL,
  gpu_count INTEGER NOT NULL,
  config TEXT NOT NULL,
  status TEXT NOT NULL,
  step_time_s REAL NOT NULL,
  peak_mem_gib REAL NOT NULL,
  cost_s REAL NOT NULL,
  created_ms INTEGER NOT NULL
);
CREATE UNIQUE INDEX bank_by_trial ON bank(trial_id);
CREATE INDEX bank_by_workload ON bank(workload_signature, gpu_model, id);
)sql",
    // v3: the task contract and the doctor: per-step extras, violations,
    // verification trials pinned to an agent, the doctor's and the
    // verification's reports.
    R"sql(
ALTER TABLE steps ADD COLUMN extra TEXT NOT NULL DEFAULT '{}';
ALTER TABLE trials ADD COLUMN violation TEXT NOT NULL DEFAULT '';
ALTER TABLE trials ADD COLUMN tag TEXT NOT NULL DEFAULT '';
ALTER TABLE trials ADD COLUMN pin_agent TEXT NOT NULL DEFAULT '';
ALTER TABLE sessions ADD COLUMN doctor_report TEXT NOT NULL DEFAULT '';
ALTER TABLE sessions ADD COLUMN verification TEXT NOT NULL DEFAULT '';
ALTER TABLE sessions ADD COLUMN contract TEXT NOT NULL DEFAULT '';
)sql",
    // v4: who may do what: hashed API tokens with a role and a team, and
    // each session's owning team and whether its bank entries are shared.
    R"sql(
CREATE TABLE tokens (
  id TEXT PRIMARY KEY,
  hash TEXT NOT NULL UNIQUE,
  name TEXT NOT NULL,
  role TEXT NOT NULL,
  team TEXT NOT NULL,
  created_ms INTEGER NOT NULL,
  revoked_ms INTEGER NOT NULL DEFAULT 0
);
ALTER TABLE sessions ADD COLUMN team TEXT NOT NULL DEFAULT '';
ALTER TABLE sessions ADD COLUMN share_bank INTEGER NOT NULL DEFAULT 0;
)sql",
    // v5: the agent's clock: each trial's timed window as the agent saw it,
    // how finely it could see, and when the server leased it.
    R"sql(
ALTER TABLE trials ADD COLUMN observed_window_s REAL NOT NULL DEFAULT 0;
ALTER TABLE trials ADD COLUMN observed_steps INTEGER NOT NULL DEFAULT 0;
ALTER TABLE trials ADD COLUMN clock_slack_s REAL NOT NULL DEFAULT 0;
ALTER TABLE trials ADD COLUMN leased_ms INTEGER NOT NULL DEFAULT 0;
)sql",
    // v6: tenancy: an agent id bound to the token that registered it, with
    // its team scope and its operator's policy; a lease bound to the token
    // that took it; agents that refused a trial; a replay session's
    // landscape as sent; repositories registered by an admin.
    R"sql(
ALTER TABLE agents ADD COLUMN token_id TEXT NOT NULL DEFAULT '';
ALTER TABLE agents ADD COLUMN team TEXT NOT NULL DEFAULT '';
ALTER TABLE agents ADD COLUMN serves TEXT NOT NULL DEFAULT '[]';
ALTER TABLE agents ADD COLUMN commands TEXT NOT NULL DEFAULT '[]';
ALTER TABLE trials ADD COLUMN lease_token_id TEXT NOT NULL DEFAULT '';
ALTER TABLE trials ADD COLUMN refused_by TEXT NOT NULL DEFAULT '';
ALTER TABLE sessions ADD COLUMN landscape TEXT NOT NULL DEFAULT '';
CREATE TABLE repositories (
  name TEXT PRIMARY KEY,
  url TEXT NOT NULL,
  team TEXT NOT NULL,
  created_ms INTEGER NOT NULL
);
)sql",
    // v7: a bank that scales: who may read an entry and the trial's purpose
    // on the entry itself (a query filters in SQL, not per row in core),
    // knob values in an indexed side table, indexes for every filter and
    // for newest-first reads; sessions found by stage (start-up reads the
    // active ones only).
    R"sql(
ALTER TABLE bank ADD COLUMN team TEXT NOT NULL DEFAULT '';
ALTER TABLE bank ADD COLUMN shared INTEGER NOT NULL DEFAULT 0;
ALTER TABLE bank ADD COLUMN purpose TEXT NOT NULL DEFAULT '';
UPDATE bank SET
  team = COALESCE((SELECT team FROM sessions WHERE sessions.id = bank.session_id), ''),
  shared = COALESCE((SELECT share_bank FROM sessions WHERE sessions.id = bank.session_id), 0),
  purpose = COALESCE((SELECT purpose FROM trials WHERE trials.id = bank.trial_id), '');
CREATE TABLE bank_knobs (
  knob TEXT NOT NULL,
  value TEXT NOT NULL,
  bank_id INTEGER NOT NULL,
  PRIMARY KEY (knob, value, bank_id)
) WITHOUT ROWID;
INSERT OR IGNORE INTO bank_knobs (knob, value, bank_id)
  SELECT j.key, CAST(j.value AS TEXT), bank.id FROM bank, json_each(bank.config) AS j
  WHERE json_valid(bank.config) AND json_type(bank.config) = 'object';
DROP INDEX bank_by_workload;
CREATE INDEX bank_by_workload ON bank(workload_signature, id);
CREATE INDEX bank_by_gpu ON bank(gpu_model COLLATE NOCASE, id);
CREATE INDEX bank_by_status ON bank(status, id);
CREATE INDEX bank_by_purpose ON bank(purpose, id);
CREATE INDEX bank_by_team ON bank(team, id);
CREATE INDEX sessions_by_stage ON sessions(stage);
)sql",
    // v8: what each session's search started from (its priors, how many
    // bank seeds and related trials), for the report of a finished session
    // that is no longer in memory.
    R"sql(
ALTER TABLE sessions ADD COLUMN search TEXT NOT NULL DEFAULT '';
)sql",
    // v9: agents an operator can see and steer: their state (active,
    // draining, quarantined, gone) and why; trials counted per agent from
    // an index.
    R"sql(
ALTER TABLE agents ADD COLUMN state TEXT NOT NULL DEFAULT 'active';
ALTER TABLE agents ADD COLUMN state_reason TEXT NOT NULL DEFAULT '';
CREATE INDEX trials_by_agent ON trials(agent, status);
)sql",
    // v10: the bank ranked by step time (its fastest ok entries first).
    R"sql(
CREATE INDEX bank_by_status_time ON bank(status, step_time_s, id);
)sql",
    // v11: each trial's executor, for metrics by status and executor.
    R"sql(
ALTER TABLE trials ADD COLUMN executor TEXT NOT NULL DEFAULT '';
CREATE INDEX trials_by_status_executor ON trials(status, executor);
)sql",
    // v12: the Slurm job a trial ran as (id, state, nodes), encoded by core.
    R"sql(
ALTER TABLE trials ADD COLUMN slurm TEXT NOT NULL DEFAULT '';
)sql",
    // v13: run time of a trial's attempts the infrastructure failed.
    R"sql(
ALTER TABLE trials ADD COLUMN lost_s REAL NOT NULL DEFAULT 0;
)sql",
    // v14: what each trial ran under on its host (the agent's sandbox).
    R"sql(
ALTER TABLE trials ADD COLUMN isolation TEXT NOT NULL DEFAULT '';
)sql",
    // v15: what each trial printed (the last MiB of stdout and of stderr).
    R"sql(
CREATE TABLE trial_logs (
  trial_id INTEGER NOT NULL,
  stream TEXT NOT NULL,
  content BLOB NOT NULL,
  dropped_bytes INTEGER NOT NULL DEFAULT 0,
  PRIMARY KEY (trial_id, stream)
);
)sql",
    // v16: finished sessions' reports as they were when they finished, so
    // an upgrade never makes an old report claim what did not run.
    R"sql(
CREATE TABLE frozen_reports (
  session_id TEXT PRIMARY KEY,
  release TEXT NOT NULL,
  frozen_ms INTEGER NOT NULL,
  report BLOB NOT NULL
);
)sql",
    // v17: when each trial was last written among its session's (rev), so
    // that the search reads only the trials changed since its last read.
    // Existing trials take their ids: ascending within each session.
    R"sql(
ALTER TABLE trials ADD COLUMN rev INTEGER NOT NULL DEFAULT 0;
UPDATE trials SET rev = id;
CREATE INDEX trials_by_session_rev ON trials(session_id, rev);
)sql",
    // v18: how much longer than the process ran each trial's whole time may
    // read (what its agent could not see of the run's ends).
    R"sql(
ALTER TABLE trials ADD COLUMN wall_resolution_s REAL NOT NULL DEFAULT 0;
)sql",
};
constexpr int kLatestVersion = sizeof(kMigrations) / sizeof(kMigrations[0]);

absl::Status SqliteError(sqlite3* db, absl::string_view what) {
  const int code = sqlite3_extended_errcode(db);
  std::string msg = absl::StrCat("sqlite: ", what, ": ", sqlite3_errmsg(db));
  switch (code & 0xff) {
    case SQLITE_FULL:
      return absl::ResourceExhaustedError(absl::StrCat(msg, " (disk full)"));
    case SQLITE_READONLY:
    case SQLITE_PERM:
    case SQLITE_CANTOPEN:
      return absl::FailedPreconditionError(msg);
    case SQLITE_BUSY:
    case SQLITE_LOCKED:
      return absl::UnavailableError(msg);
    case SQLITE_CONSTRAINT:
      return absl::AlreadyExistsError(msg);
    case SQLITE_CORRUPT:
    case SQLITE_NOTADB:
      // Said as damage, with what to do: never as an internal error.
      return absl::DataLossError(absl::StrCat(
          msg, " (the database file is damaged: `infrarsi-server check` names what; restore "
               "the last backup, docs/operations.md)"));
    default:
      return absl::InternalError(msg);
  }
}

// Whether `s` is well-formed UTF-8 (no overlong forms, surrogates or code
// points above U+10FFFF).
bool IsUtf8(absl::string_view s) {
  size_t i = 0;
  const size_t n = s.size();
  while (i < n) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    if (c < 0x80) {
      ++i;
      continue;
    }
    int len = 0;
    uint32_t cp = 0;
    if ((c & 0xE0) == 0xC0) {
      len = 2;
      cp = c & 0x1F;
    } else if ((c & 0xF0) == 0xE0) {
      len = 3;
      cp = c & 0x0F;
    } else if ((c & 0xF8) == 0xF0) {
      len = 4;
      cp = c & 0x07;
    } else {
      return false;
    }
    if (i + static_cast<size_t>(len) > n) return false;
    for (int k = 1; k < len; ++k) {
      const unsigned char cc = static_cast<unsigned char>(s[i + static_cast<size_t>(k)]);
      if ((cc & 0xC0) != 0x80) return false;
      cp = (cp << 6) | (cc & 0x3F);
    }
    if ((len == 2 && cp < 0x80) || (len == 3 && cp < 0x800) || (len == 4 && cp < 0x10000) ||
        cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) {
      return false;
    }
    i += static_cast<size_t>(len);
  }
  return true;
}

// A prepared statement with positional binding; finalized on destruction.
class Stmt {
 public:
  Stmt(sqlite3* db, const char* sql) : db_(db) {
    rc_ = sqlite3_prepare_v2(db, sql, -1, &stmt_, nullptr);
  }
  ~Stmt() { sqlite3_finalize(stmt_); }
  Stmt(const Stmt&) = delete;
  Stmt& operator=(const Stmt&) = delete;

  absl::Status status() const {
    return rc_ == SQLITE_OK ? absl::OkStatus() : SqliteError(db_, "prepare");
  }
  Stmt& Bind(const std::string& v) {
    sqlite3_bind_text(stmt_, ++idx_, v.data(), static_cast<int>(v.size()), SQLITE_TRANSIENT);
    return *this;
  }
  Stmt& Bind(int64_t v) {
    sqlite3_bind_int64(stmt_, ++idx_, v);
    return *this;
  }
  Stmt& Bind(int32_t v) { return Bind(static_cast<int64_t>(v)); }
  Stmt& Bind(double v) {
    if (std::isfinite(v)) {
      sqlite3_bind_double(stmt_, ++idx_, v);
    } else {
      // SQLite turns a NaN into NULL; a diverged loss must survive as itself.
      const char* text = std::isnan(v) ? "nan" : (v > 0 ? "inf" : "-inf");
      sqlite3_bind_text(stmt_, ++idx_, text, -1, SQLITE_STATIC);
    }
    return *this;
  }
  Stmt& Bind(bool v) { return Bind(static_cast<int64_t>(v ? 1 : 0)); }
  Stmt& BindBlob(const std::string& v) {
    sqlite3_bind_blob(stmt_, ++idx_, v.data(), static_cast<int>(v.size()), SQLITE_TRANSIENT);
    return *this;
  }

  // Steps once: true with a row, false when done. A row whose text is not
  // UTF-8 is damage (everything we write as text came through a proto
  // string, which is UTF-8): DATA_LOSS naming the table, the row and the
  // column, rather than a reply the client cannot parse.
  absl::StatusOr<bool> Step() {
    RETURN_IF_ERROR(status());
    const int rc = sqlite3_step(stmt_);
    if (rc == SQLITE_ROW) {
      RETURN_IF_ERROR(CheckRowText());
      return true;
    }
    if (rc == SQLITE_DONE) return false;
    return SqliteError(db_, "step");
  }
  absl::Status Run() {
    ASSIGN_OR_RETURN(bool row, Step());
    (void)row;
    return absl::OkStatus();
  }

  std::string Text(int col) const {
    const unsigned char* p = sqlite3_column_text(stmt_, col);
    return p ? std::string(reinterpret_cast<const char*>(p),
                           static_cast<size_t>(sqlite3_column_bytes(stmt_, col)))
             : std::string();
  }
  int64_t Int(int col) const { return sqlite3_column_int64(stmt_, col); }
  double Real(int col) const {
    if (sqlite3_column_type(stmt_, col) == SQLITE_TEXT) {
      return std::strtod(reinterpret_cast<const char*>(sqlite3_column_text(stmt_, col)), nullptr);
    }
    return sqlite3_column_double(stmt_, col);
  }

 private:
  absl::Status CheckRowText() const {
    const int n = sqlite3_column_count(stmt_);
    for (int c = 0; c < n; ++c) {
      if (sqlite3_column_type(stmt_, c) != SQLITE_TEXT) continue;
      const char* p = reinterpret_cast<const char*>(sqlite3_column_text(stmt_, c));
      const size_t len = static_cast<size_t>(sqlite3_column_bytes(stmt_, c));
      if (p == nullptr || IsUtf8(absl::string_view(p, len))) continue;
      const char* table = sqlite3_column_table_name(stmt_, c);
      const char* first = sqlite3_column_name(stmt_, 0);
      const unsigned char* key = sqlite3_column_text(stmt_, 0);
      std::string key_text = key ? reinterpret_cast<const char*>(key) : "";
      if (!IsUtf8(key_text)) key_text = "?";
      return absl::DataLossError(absl::StrCat(
          "db: damaged row: column ", sqlite3_column_name(stmt_, c), " of table ",
          table ? table : "?", " (row ", first ? first : "?", "=", key_text.substr(0, 64),
          ") is not valid UTF-8; `infrarsi-server check` lists the damage; restore the last "
          "backup (docs/operations.md)"));
    }
    return absl::OkStatus();
  }

  sqlite3* db_;
  sqlite3_stmt* stmt_ = nullptr;
  int rc_;
  int idx_ = 0;
};

// Every row of `st`, read by `read`.
template <typename Read>
auto CollectRows(Stmt& st, Read read) -> absl::StatusOr<std::vector<decltype(read(st))>> {
  std::vector<decltype(read(st))> out;
  while (true) {
    ASSIGN_OR_RETURN(bool row, st.Step());
    if (!row) return out;
    out.push_back(read(st));
  }
}

// "INSERT INTO table (cols) VALUES (?,...)" with one placeholder per
// column, so that adding a column cannot leave the count behind.
std::string InsertSql(absl::string_view verb, absl::string_view table, absl::string_view cols) {
  const size_t n = static_cast<size_t>(std::count(cols.begin(), cols.end(), ',')) + 1;
  std::string marks;
  for (size_t i = 0; i < n; ++i) absl::StrAppend(&marks, i ? ",?" : "?");
  return absl::StrCat(verb, " INTO ", table, " (", cols, ") VALUES (", marks, ")");
}

constexpr char kSessionCols[] =
    "id, name, spec_yaml, spec_dir, stage, contract_hash, workload_signature, gpu_model, "
    "created_ms, updated_ms, doctor_repeats, max_trials, baseline_step_time_s, baseline_cv, "
    "baseline_runs, best_trial_id, error, applied_commit, doctor_report, verification, contract, "
    "team, share_bank, landscape, search";

void BindSession(Stmt& st, const SessionRecord& s) {
  st.Bind(s.id).Bind(s.name).Bind(s.spec_yaml).Bind(s.spec_dir).Bind(s.stage)
      .Bind(s.contract_hash).Bind(s.workload_signature).Bind(s.gpu_model)
      .Bind(s.created_ms).Bind(s.updated_ms).Bind(s.doctor_repeats).Bind(s.max_trials)
      .Bind(s.baseline_step_time_s).Bind(s.baseline_cv).Bind(s.baseline_runs)
      .Bind(s.best_trial_id).Bind(s.error).Bind(s.applied_commit).Bind(s.doctor_report)
      .Bind(s.verification).Bind(s.contract).Bind(s.team).Bind(static_cast<int64_t>(s.share_bank))
      .Bind(s.landscape).Bind(s.search);
}

SessionRecord ReadSession(const Stmt& st) {
  SessionRecord s;
  int c = 0;
  s.id = st.Text(c++);
  s.name = st.Text(c++);
  s.spec_yaml = st.Text(c++);
  s.spec_dir = st.Text(c++);
  s.stage = st.Text(c++);
  s.contract_hash = st.Text(c++);
  s.workload_signature = st.Text(c++);
  s.gpu_model = st.Text(c++);
  s.created_ms = st.Int(c++);
  s.updated_ms = st.Int(c++);
  s.doctor_repeats = static_cast<int32_t>(st.Int(c++));
  s.max_trials = static_cast<int32_t>(st.Int(c++));
  s.baseline_step_time_s = st.Real(c++);
  s.baseline_cv = st.Real(c++);
  s.baseline_runs = static_cast<int32_t>(st.Int(c++));
  s.best_trial_id = st.Int(c++);
  s.error = st.Text(c++);
  s.applied_commit = st.Text(c++);
  s.doctor_report = st.Text(c++);
  s.verification = st.Text(c++);
  s.contract = st.Text(c++);
  s.team = st.Text(c++);
  s.share_bank = st.Int(c++) != 0;
  s.landscape = st.Text(c++);
  s.search = st.Text(c++);
  return s;
}

constexpr char kTrialCols[] =
    "session_id, purpose, config, status, attempts, lease_agent, lease_token, "
    "lease_deadline_ms, step_time_s, peak_mem_gib, cost_s, error, note, agent, created_ms, "
    "finished_ms, violation, tag, pin_agent, observed_window_s, observed_steps, clock_slack_s, "
    "leased_ms, lease_token_id, refused_by, executor, slurm, lost_s, isolation, wall_resolution_s";

void BindTrial(Stmt& st, const TrialRecord& t) {
  st.Bind(t.session_id).Bind(t.purpose).Bind(t.config).Bind(t.status).Bind(t.attempts)
      .Bind(t.lease_agent).Bind(t.lease_token).Bind(t.lease_deadline_ms).Bind(t.step_time_s)
      .Bind(t.peak_mem_gib).Bind(t.cost_s).Bind(t.error).Bind(t.note).Bind(t.agent)
      .Bind(t.created_ms).Bind(t.finished_ms).Bind(t.violation).Bind(t.tag).Bind(t.pin_agent)
      .Bind(t.observed_window_s).Bind(t.observed_steps).Bind(t.clock_slack_s).Bind(t.leased_ms)
      .Bind(t.lease_token_id).Bind(t.refused_by).Bind(t.executor).Bind(t.slurm).Bind(t.lost_s)
      .Bind(t.isolation).Bind(t.wall_resolution_s);
}

TrialRecord ReadTrial(const Stmt& st) {
  TrialRecord t;
  int c = 0;
  t.id = st.Int(c++);
  t.session_id = st.Text(c++);
  t.purpose = st.Text(c++);
  t.config = st.Text(c++);
  t.status = st.Text(c++);
  t.attempts = static_cast<int32_t>(st.Int(c++));
  t.lease_agent = st.Text(c++);
  t.lease_token = st.Text(c++);
  t.lease_deadline_ms = st.Int(c++);
  t.step_time_s = st.Real(c++);
  t.peak_mem_gib = st.Real(c++);
  t.cost_s = st.Real(c++);
  t.error = st.Text(c++);
  t.note = st.Text(c++);
  t.agent = st.Text(c++);
  t.created_ms = st.Int(c++);
  t.finished_ms = st.Int(c++);
  t.violation = st.Text(c++);
  t.tag = st.Text(c++);
  t.pin_agent = st.Text(c++);
  t.observed_window_s = st.Real(c++);
  t.observed_steps = static_cast<int32_t>(st.Int(c++));
  t.clock_slack_s = st.Real(c++);
  t.leased_ms = st.Int(c++);
  t.lease_token_id = st.Text(c++);
  t.refused_by = st.Text(c++);
  t.executor = st.Text(c++);
  t.slurm = st.Text(c++);
  t.lost_s = st.Real(c++);
  t.isolation = st.Text(c++);
  t.wall_resolution_s = st.Real(c++);
  t.rev = st.Int(c++);
  return t;
}

// What ReadTrial reads, in its order.
const std::string& TrialSelect() {
  static const std::string* const kSql = new std::string(absl::StrCat("SELECT id, ", kTrialCols, ", rev FROM trials"));
  return *kSql;
}

// The rev a write of one of `session`'s trials takes: above all its trials'
// (the write lock held meanwhile, so revs rise in commit order).
constexpr char kNextRev[] = "(SELECT COALESCE(MAX(rev), 0) + 1 FROM trials WHERE session_id = ?)";

constexpr char kBankCols[] =
    "session_id, trial_id, workload_signature, gpu_model, gpu_count, config, status, "
    "step_time_s, peak_mem_gib, cost_s, created_ms, team, shared, purpose";

constexpr char kAgentCols[] =
    "id, host, gpu_model, gpu_count, memory_per_gpu_gib, executors, registered_ms, "
    "last_heartbeat_ms, token_id, team, serves, commands, state, state_reason";

AgentRecord ReadAgent(const Stmt& st) {
  AgentRecord a;
  a.id = st.Text(0);
  a.host = st.Text(1);
  a.gpu_model = st.Text(2);
  a.gpu_count = static_cast<int32_t>(st.Int(3));
  a.memory_per_gpu_gib = st.Real(4);
  a.executors = st.Text(5);
  a.registered_ms = st.Int(6);
  a.last_heartbeat_ms = st.Int(7);
  a.token_id = st.Text(8);
  a.team = st.Text(9);
  a.serves = st.Text(10);
  a.commands = st.Text(11);
  a.state = st.Text(12);
  a.state_reason = st.Text(13);
  return a;
}

}  // namespace

int SqliteStorage::LatestSchemaVersion() { return kLatestVersion; }

absl::StatusOr<std::unique_ptr<SqliteStorage>> SqliteStorage::Create(const Options& options) {
  if (options.path.empty()) return absl::InvalidArgumentError("db: path is empty");
  using Upgrade = Options::Upgrade;
  const bool in_memory = options.path == ":memory:";
  sqlite3* db = nullptr;
  // As is: never created (a backup or a check of a missing file is an
  // error, not a new empty database) and query-only below. Read-write at
  // the file level all the same: a read-only connection to a WAL database
  // cannot open when no server left its shared-memory file.
  const int flags = options.upgrade == Upgrade::kAsIs
                        ? SQLITE_OPEN_READWRITE | SQLITE_OPEN_FULLMUTEX
                        : SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_FULLMUTEX;
  const int rc = sqlite3_open_v2(options.path.c_str(), &db, flags, nullptr);
  if (rc != SQLITE_OK) {
    absl::Status st = absl::FailedPreconditionError(absl::StrCat(
        "db: cannot open '", options.path, "': ", db ? sqlite3_errmsg(db) : "out of memory"));
    sqlite3_close(db);
    return st;
  }
  std::unique_ptr<SqliteStorage> s(new SqliteStorage(db, options.path));
  sqlite3_busy_timeout(db, 5000);
  if (options.upgrade == Upgrade::kAsIs) RETURN_IF_ERROR(s->Exec("PRAGMA query_only=1;"));
  // The first read: a file that is not a database says so here.
  auto version = s->SchemaVersion();
  if (!version.ok()) {
    return absl::Status(version.status().code(),
                        absl::StrCat("db: ", options.path, ": ", version.status().message()));
  }
  if (*version > kLatestVersion) {
    return absl::FailedPreconditionError(absl::StrCat(
        "db: schema version ", *version, " is newer than this build knows (", kLatestVersion,
        "); upgrade infrarsi-server"));
  }
  if (options.check_integrity && !in_memory) {
    ASSIGN_OR_RETURN(std::string damage, s->CheckIntegrity(/*quick=*/true));
    if (!damage.empty()) {
      return absl::DataLossError(absl::StrCat(
          "db: ", options.path, " is damaged (SQLite's quick_check: ", damage,
          "); it is not served. Restore the last backup (docs/operations.md), or copy out "
          "what is readable with sqlite3's .recover"));
    }
  }
  if (options.upgrade == Upgrade::kAsIs) return s;
  if (*version > 0 && *version < kLatestVersion && options.upgrade == Upgrade::kRefuse) {
    return absl::FailedPreconditionError(absl::StrCat(
        "db: ", options.path, " has schema version ", *version, " (an older release); this build ",
        "uses version ", kLatestVersion, ". Upgrading is a step of its own: stop the old server, "
        "then run `infrarsi-server --db ", options.path, " migrate` (it backs the file up first), ",
        "or start this one with --migrate"));
  }
  // WAL lets readers run beside the writer; NORMAL sync in WAL mode is safe
  // against a process crash (kill -9), which is the failure we design for.
  if (!in_memory) {
    RETURN_IF_ERROR(s->Exec("PRAGMA journal_mode=WAL;"));
  }
  // A checkpoint that resets the WAL also truncates its file to this size:
  // a burst (or a long reader, such as a backup) grows it, and without a
  // limit it stayed at its peak (129 MB after one backup under load).
  RETURN_IF_ERROR(s->Exec(
      "PRAGMA synchronous=NORMAL; PRAGMA foreign_keys=ON; PRAGMA journal_size_limit=33554432;"));
  const int target = options.target_version < 0 ? kLatestVersion : options.target_version;
  if (*version > 0 && *version < target && options.backup_before_migration && !in_memory) {
    // The old schema as it was, for a way back (an older server opens it).
    std::string to = absl::StrCat(options.path, ".schema-v", *version, ".bak");
    struct stat st;
    if (::stat(to.c_str(), &st) == 0) {
      to = absl::StrCat(options.path, ".schema-v", *version, ".", ::time(nullptr), ".bak");
    }
    RETURN_IF_ERROR(s->BackupTo(to));
    s->migration_backup_ = to;
  }
  RETURN_IF_ERROR(s->Migrate(target));
  if (options.max_page_count > 0) {
    RETURN_IF_ERROR(s->Exec(absl::StrCat("PRAGMA max_page_count=", options.max_page_count, ";")));
  }
  if (options.read_only) RETURN_IF_ERROR(s->Exec("PRAGMA query_only=1;"));
  return s;
}

absl::StatusOr<int> SqliteStorage::FileSchemaVersion(const std::string& path) {
  struct stat st;
  if (::stat(path.c_str(), &st) != 0) {
    return absl::NotFoundError(absl::StrCat("db: no database at ", path));
  }
  Options o;
  o.path = path;
  o.upgrade = Options::Upgrade::kAsIs;
  ASSIGN_OR_RETURN(auto s, Create(o));
  return s->SchemaVersion();
}

absl::StatusOr<std::string> SqliteStorage::CheckIntegrity(bool quick) {
  std::lock_guard<std::recursive_mutex> lock(mu_);
  Stmt st(db_, quick ? "PRAGMA quick_check(20);" : "PRAGMA integrity_check(20);");
  std::vector<std::string> problems;
  while (true) {
    auto row = st.Step();
    if (!row.ok()) {
      // A file damaged past what the check can walk: that is the answer.
      return std::string(row.status().message());
    }
    if (!*row) break;
    std::string line = st.Text(0);
    if (line != "ok") problems.push_back(std::move(line));
  }
  std::string out;
  for (const std::string& p : problems) absl::StrAppend(&out, out.empty() ? "" : "; ", p);
  return out;
}

SqliteStorage::~SqliteStorage() { sqlite3_close(db_); }

absl::StatusOr<std::unique_ptr<Storage>> SqliteStorage::OpenReader() {
  if (path_ == ":memory:" || path_.empty()) {
    return absl::UnimplementedError("db: a private in-memory database has no second connection");
  }
  sqlite3* db = nullptr;
  const int rc = sqlite3_open_v2(path_.c_str(), &db, SQLITE_OPEN_READONLY | SQLITE_OPEN_FULLMUTEX,
                                 nullptr);
  if (rc != SQLITE_OK) {
    absl::Status st = absl::FailedPreconditionError(absl::StrCat(
        "db: cannot open '", path_, "' for reading: ", db ? sqlite3_errmsg(db) : "out of memory"));
    sqlite3_close(db);
    return st;
  }
  std::unique_ptr<SqliteStorage> r(new SqliteStorage(db, path_));
  sqlite3_busy_timeout(db, 5000);
  ASSIGN_OR_RETURN(int version, r->SchemaVersion());
  if (version != kLatestVersion) {
    return absl::FailedPreconditionError(absl::StrCat(
        "db: reader sees schema version ", version, ", expected ", kLatestVersion));
  }
  return std::unique_ptr<Storage>(std::move(r));
}

absl::Status SqliteStorage::Exec(const std::string& sql) {
  char* err = nullptr;
  if (sqlite3_exec(db_, sql.c_str(), nullptr, nullptr, &err) != SQLITE_OK) {
    absl::Status st = SqliteError(db_, err ? err : "exec");
    sqlite3_free(err);
    return st;
  }
  return absl::OkStatus();
}

absl::StatusOr<int> SqliteStorage::SchemaVersion() {
  std::lock_guard<std::recursive_mutex> lock(mu_);
  Stmt st(db_, "PRAGMA user_version;");
  ASSIGN_OR_RETURN(bool row, st.Step());
  if (!row) return absl::InternalError("sqlite: user_version returned no row");
  return static_cast<int>(st.Int(0));
}

absl::StatusOr<std::string> SqliteStorage::JournalMode() {
  std::lock_guard<std::recursive_mutex> lock(mu_);
  Stmt st(db_, "PRAGMA journal_mode;");
  ASSIGN_OR_RETURN(bool row, st.Step());
  if (!row) return absl::InternalError("sqlite: journal_mode returned no row");
  return absl::AsciiStrToLower(st.Text(0));
}

absl::Status SqliteStorage::Migrate(int target_version) {
  ASSIGN_OR_RETURN(int version, SchemaVersion());
  if (version > kLatestVersion) {
    return absl::FailedPreconditionError(absl::StrCat(
        "db: schema version ", version, " is newer than this build knows (", kLatestVersion,
        "); upgrade infrarsi-server"));
  }
  for (int v = version; v < target_version && v < kLatestVersion; ++v) {
    // Each step is one transaction: a crash mid-migration leaves version v.
    RETURN_IF_ERROR(Transaction([&]() -> absl::Status {
      RETURN_IF_ERROR(Exec(kMigrations[v]));
      return Exec(absl::StrCat("PRAGMA user_version=", v + 1, ";"));
    }));
  }
  return absl::OkStatus();
}

absl::Status SqliteStorage::BackupTo(const std::string& path) {
  if (path.empty()) return absl::InvalidArgumentError("--to: required");
  struct stat st;
  if (::stat(path.c_str(), &st) == 0) {
    return absl::AlreadyExistsError(absl::StrCat("--to: ", path, " exists; a backup never overwrites"));
  }
  const std::string tmp = path + ".tmp";
  std::remove(tmp.c_str());
  sqlite3* dest = nullptr;
  if (sqlite3_open_v2(tmp.c_str(), &dest, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE, nullptr) !=
      SQLITE_OK) {
    absl::Status err = absl::UnavailableError(absl::StrCat(
        "--to: cannot create ", tmp, ": ", dest ? sqlite3_errmsg(dest) : "out of memory"));
    sqlite3_close(dest);
    return err;
  }
  absl::Status result;
  {
    std::lock_guard<std::recursive_mutex> lock(mu_);
    sqlite3_backup* b = sqlite3_backup_init(dest, "main", db_, "main");
    if (b == nullptr) {
      result = absl::InternalError(absl::StrCat("backup: ", sqlite3_errmsg(dest)));
    } else {
      int rc = SQLITE_OK;
      // All pages in one step, inside one read transaction: copied in
      // batches, every commit by another connection (the server's agents
      // reporting) restarted the copy, which then finished only once the
      // writes stopped. A busy source (a checkpoint) is retried.
      while ((rc = sqlite3_backup_step(b, -1)) == SQLITE_OK || rc == SQLITE_BUSY ||
             rc == SQLITE_LOCKED) {
        if (rc != SQLITE_OK) sqlite3_sleep(10);
      }
      sqlite3_backup_finish(b);
      if (rc != SQLITE_DONE) {
        result = absl::InternalError(absl::StrCat("backup: ", sqlite3_errstr(rc)));
      }
    }
  }
  sqlite3_close(dest);
  if (result.ok() && std::rename(tmp.c_str(), path.c_str()) != 0) {
    result = absl::UnavailableError(absl::StrCat("--to: cannot rename ", tmp, " to ", path));
  }
  if (!result.ok()) std::remove(tmp.c_str());
  return result;
}

absl::Status SqliteStorage::Transaction(const std::function<absl::Status()>& fn) {
  std::lock_guard<std::recursive_mutex> lock(mu_);
  if (in_transaction_) return absl::InternalError("storage: nested transaction");
  RETURN_IF_ERROR(Exec("BEGIN IMMEDIATE;"));
  in_transaction_ = true;
  absl::Status st = fn();
  in_transaction_ = false;
  if (!st.ok()) {
    (void)Exec("ROLLBACK;");
    return st;
  }
  absl::Status commit = Exec("COMMIT;");
  if (!commit.ok()) (void)Exec("ROLLBACK;");
  return commit;
}

absl::Status SqliteStorage::InsertSession(const SessionRecord& s) {
  std::lock_guard<std::recursive_mutex> lock(mu_);
  Stmt st(db_, InsertSql("INSERT", "sessions", kSessionCols).c_str());
  BindSession(st, s);
  return st.Run();
}

absl::Status SqliteStorage::UpdateSession(const SessionRecord& s) {
  std::lock_guard<std::recursive_mutex> lock(mu_);
  Stmt st(db_,
          "UPDATE sessions SET id=?, name=?, spec_yaml=?, spec_dir=?, stage=?, contract_hash=?, "
          "workload_signature=?, gpu_model=?, created_ms=?, updated_ms=?, doctor_repeats=?, "
          "max_trials=?, baseline_step_time_s=?, baseline_cv=?, baseline_runs=?, "
          "best_trial_id=?, error=?, applied_commit=?, doctor_report=?, verification=?, "
          "contract=?, team=?, share_bank=?, landscape=?, search=? WHERE id=?");
  BindSession(st, s);
  st.Bind(s.id);
  RETURN_IF_ERROR(st.Run());
  if (sqlite3_changes(db_) == 0) {
    return absl::NotFoundError(absl::StrCat("session_id: no session '", s.id, "'"));
  }
  return absl::OkStatus();
}

absl::StatusOr<SessionRecord> SqliteStorage::GetSession(const std::string& id) {
  std::lock_guard<std::recursive_mutex> lock(mu_);
  Stmt st(db_, absl::StrCat("SELECT ", kSessionCols, " FROM sessions WHERE id=?").c_str());
  st.Bind(id);
  ASSIGN_OR_RETURN(bool row, st.Step());
  if (!row) return absl::NotFoundError(absl::StrCat("session_id: no session '", id, "'"));
  return ReadSession(st);
}

absl::StatusOr<std::vector<SessionRecord>> SqliteStorage::ListSessions() {
  std::lock_guard<std::recursive_mutex> lock(mu_);
  Stmt st(db_, absl::StrCat("SELECT ", kSessionCols,
                            " FROM sessions ORDER BY created_ms, id")
                   .c_str());
  return CollectRows(st, ReadSession);
}

absl::StatusOr<std::vector<SessionRecord>> SqliteStorage::ListSessionsPage(
    const SessionQuery& q) {
  std::lock_guard<std::recursive_mutex> lock(mu_);
  std::string sql = absl::StrCat("SELECT ", kSessionCols, ", rowid FROM sessions WHERE 1");
  if (q.before_seq > 0) absl::StrAppend(&sql, " AND rowid < ?");
  if (!q.any_team) absl::StrAppend(&sql, " AND team = ?");
  if (!q.stages.empty()) {
    absl::StrAppend(&sql, " AND stage IN (");
    for (size_t i = 0; i < q.stages.size(); ++i) absl::StrAppend(&sql, i ? ",?" : "?");
    absl::StrAppend(&sql, ")");
  }
  absl::StrAppend(&sql, " ORDER BY rowid DESC");
  if (q.limit > 0) absl::StrAppend(&sql, " LIMIT ?");
  Stmt st(db_, sql.c_str());
  if (q.before_seq > 0) st.Bind(q.before_seq);
  if (!q.any_team) st.Bind(q.team);
  for (const std::string& stage : q.stages) st.Bind(stage);
  if (q.limit > 0) st.Bind(static_cast<int64_t>(q.limit));
  const int seq_col = static_cast<int>(std::count(kSessionCols, kSessionCols + sizeof(kSessionCols), ',')) + 1;
  return CollectRows(st, [&](const Stmt& row) {
    SessionRecord r = ReadSession(row);
    r.seq = row.Int(seq_col);
    return r;
  });
}

absl::StatusOr<int64_t> SqliteStorage::InsertTrial(const TrialRecord& t) {
  std::lock_guard<std::recursive_mutex> lock(mu_);
  std::string sql = InsertSql("INSERT", "trials", absl::StrCat(kTrialCols, ", rev"));
  sql.replace(sql.size() - 2, 1, kNextRev);  // the last mark: "?)"
  Stmt st(db_, sql.c_str());
  BindTrial(st, t);
  st.Bind(t.session_id);
  RETURN_IF_ERROR(st.Run());
  return static_cast<int64_t>(sqlite3_last_insert_rowid(db_));
}

absl::Status SqliteStorage::UpdateTrial(const TrialRecord& t) {
  std::lock_guard<std::recursive_mutex> lock(mu_);
  static const std::string* const kSql = new std::string(absl::StrCat(
      "UPDATE trials SET session_id=?, purpose=?, config=?, status=?, attempts=?, "
      "lease_agent=?, lease_token=?, lease_deadline_ms=?, step_time_s=?, peak_mem_gib=?, "
      "cost_s=?, error=?, note=?, agent=?, created_ms=?, finished_ms=?, violation=?, tag=?, "
      "pin_agent=?, observed_window_s=?, observed_steps=?, clock_slack_s=?, leased_ms=?, "
      "lease_token_id=?, refused_by=?, executor=?, slurm=?, lost_s=?, isolation=?, "
      "wall_resolution_s=?, rev=",
      kNextRev, " WHERE id=?"));
  Stmt st(db_, kSql->c_str());
  BindTrial(st, t);
  st.Bind(t.session_id).Bind(t.id);
  RETURN_IF_ERROR(st.Run());
  if (sqlite3_changes(db_) == 0) {
    return absl::NotFoundError(absl::StrCat("trial_id: no trial ", t.id));
  }
  return absl::OkStatus();
}

absl::StatusOr<TrialRecord> SqliteStorage::GetTrial(int64_t id) {
  std::lock_guard<std::recursive_mutex> lock(mu_);
  Stmt st(db_, absl::StrCat(TrialSelect(), " WHERE id=?").c_str());
  st.Bind(id);
  ASSIGN_OR_RETURN(bool row, st.Step());
  if (!row) return absl::NotFoundError(absl::StrCat("trial_id: no trial ", id));
  return ReadTrial(st);
}

absl::StatusOr<std::vector<TrialRecord>> SqliteStorage::ListTrials(
    const std::string& session_id) {
  std::lock_guard<std::recursive_mutex> lock(mu_);
  Stmt st(db_, absl::StrCat(TrialSelect(), " WHERE session_id=? ORDER BY id").c_str());
  st.Bind(session_id);
  return CollectRows(st, ReadTrial);
}

absl::StatusOr<std::vector<TrialRecord>> SqliteStorage::ListTrialsChangedSince(
    const std::string& session_id, int64_t after_rev) {
  std::lock_guard<std::recursive_mutex> lock(mu_);
  Stmt st(db_, absl::StrCat(TrialSelect(), " WHERE session_id=? AND rev>? ORDER BY id").c_str());
  st.Bind(session_id).Bind(after_rev);
  return CollectRows(st, ReadTrial);
}

absl::StatusOr<std::vector<TrialRecord>> SqliteStorage::ListTrialsByStatus(
    const std::string& status, int32_t limit) {
  std::lock_guard<std::recursive_mutex> lock(mu_);
  Stmt st(db_, absl::StrCat(TrialSelect(), " WHERE status=? ORDER BY id LIMIT ?").c_str());
  st.Bind(status).Bind(static_cast<int64_t>(limit));
  return CollectRows(st, ReadTrial);
}

absl::Status SqliteStorage::PutSteps(const std::vector<StepRecord>& steps) {
  std::lock_guard<std::recursive_mutex> lock(mu_);
  for (const StepRecord& s : steps) {
    Stmt st(db_,
            "INSERT OR REPLACE INTO steps (trial_id, step, loss, tokens, step_time_s, "
            "peak_mem_gib, warmup, phases, extra) VALUES (?,?,?,?,?,?,?,?,?)");
    st.Bind(s.trial_id).Bind(s.step).Bind(s.loss).Bind(s.tokens).Bind(s.step_time_s)
        .Bind(s.peak_mem_gib).Bind(s.warmup).Bind(s.phases).Bind(s.extra);
    RETURN_IF_ERROR(st.Run());
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<StepRecord>> SqliteStorage::ListSteps(int64_t trial_id) {
  // Below every step number: the whole trial.
  ASSIGN_OR_RETURN(StepTail all, ListStepTail(trial_id, std::numeric_limits<int64_t>::min()));
  return std::move(all.steps);
}

absl::StatusOr<Storage::StepTail> SqliteStorage::ListStepTail(int64_t trial_id, int64_t from_step) {
  std::lock_guard<std::recursive_mutex> lock(mu_);
  StepTail out;
  int64_t last = 0;
  {
    // MAX(step) is one lookup in the primary key; COUNT(*) walks the index
    // only, never the rows.
    Stmt st(db_, "SELECT COUNT(*), MAX(step) FROM steps WHERE trial_id=?");
    st.Bind(trial_id);
    ASSIGN_OR_RETURN(bool row, st.Step());
    if (!row || st.Int(0) == 0) return out;
    out.count = st.Int(0);
    last = st.Int(1);
  }
  Stmt st(db_,
          "SELECT trial_id, step, loss, tokens, step_time_s, peak_mem_gib, warmup, phases, extra "
          "FROM steps WHERE trial_id=? AND step>=? ORDER BY step");
  st.Bind(trial_id).Bind(std::min(from_step, last));
  while (true) {
    ASSIGN_OR_RETURN(bool row, st.Step());
    if (!row) break;
    StepRecord s;
    s.trial_id = st.Int(0);
    s.step = st.Int(1);
    s.loss = st.Real(2);
    s.tokens = st.Int(3);
    s.step_time_s = st.Real(4);
    s.peak_mem_gib = st.Real(5);
    s.warmup = st.Int(6) != 0;
    s.phases = st.Text(7);
    s.extra = st.Text(8);
    out.steps.push_back(std::move(s));
  }
  return out;
}

absl::StatusOr<int64_t> SqliteStorage::PruneSteps(const std::vector<std::string>& stages,
                                                   int64_t before_ms, int32_t limit) {
  std::lock_guard<std::recursive_mutex> lock(mu_);
  if (stages.empty() || limit <= 0) return 0;
  std::string in;
  for (size_t i = 0; i < stages.size(); ++i) absl::StrAppend(&in, i ? ",?" : "?");
  const std::string sql = absl::StrCat(
      "DELETE FROM steps WHERE rowid IN (SELECT steps.rowid FROM steps JOIN trials ON trials.id = "
      "steps.trial_id JOIN sessions ON sessions.id = trials.session_id WHERE sessions.stage IN (",
      in, ") AND sessions.updated_ms < ? LIMIT ?)");
  Stmt st(db_, sql.c_str());
  for (const std::string& stage : stages) st.Bind(stage);
  st.Bind(before_ms).Bind(static_cast<int64_t>(limit));
  RETURN_IF_ERROR(st.Run());
  int64_t deleted = static_cast<int64_t>(sqlite3_changes(db_));
  // The trials' kept output goes with their steps.
  const std::string logs_sql = absl::StrCat(
      "DELETE FROM trial_logs WHERE rowid IN (SELECT trial_logs.rowid FROM trial_logs JOIN trials "
      "ON trials.id = trial_logs.trial_id JOIN sessions ON sessions.id = trials.session_id WHERE "
      "sessions.stage IN (", in, ") AND sessions.updated_ms < ? LIMIT ?)");
  Stmt logs(db_, logs_sql.c_str());
  for (const std::string& stage : stages) logs.Bind(stage);
  logs.Bind(before_ms).Bind(static_cast<int64_t>(limit));
  RETURN_IF_ERROR(logs.Run());
  deleted += static_cast<int64_t>(sqlite3_changes(db_));
  return deleted;
}

absl::Status SqliteStorage::PutTrialLog(const TrialLogRecord& log) {
  std::lock_guard<std::recursive_mutex> lock(mu_);
  Stmt st(db_, "INSERT OR REPLACE INTO trial_logs (trial_id, stream, content, dropped_bytes) "
               "VALUES (?, ?, ?, ?)");
  st.Bind(log.trial_id).Bind(log.stream).BindBlob(log.content).Bind(log.dropped_bytes);
  return st.Run();
}

absl::Status SqliteStorage::PutFrozenReport(const FrozenReportRecord& r) {
  std::lock_guard<std::recursive_mutex> lock(mu_);
  Stmt st(db_, "INSERT OR REPLACE INTO frozen_reports (session_id, release, frozen_ms, report) "
               "VALUES (?, ?, ?, ?)");
  st.Bind(r.session_id).Bind(r.release).Bind(r.frozen_ms).BindBlob(r.report);
  return st.Run();
}

absl::StatusOr<FrozenReportRecord> SqliteStorage::GetFrozenReport(const std::string& session_id) {
  std::lock_guard<std::recursive_mutex> lock(mu_);
  Stmt st(db_, "SELECT release, frozen_ms, report FROM frozen_reports WHERE session_id=?");
  st.Bind(session_id);
  ASSIGN_OR_RETURN(bool row, st.Step());
  if (!row) return absl::NotFoundError(absl::StrCat("session ", session_id, " has no frozen report"));
  FrozenReportRecord out;
  out.session_id = session_id;
  out.release = st.Text(0);
  out.frozen_ms = st.Int(1);
  out.report = st.Text(2);
  return out;
}

absl::StatusOr<TrialLogRecord> SqliteStorage::GetTrialLog(int64_t trial_id, const std::string& stream) {
  std::lock_guard<std::recursive_mutex> lock(mu_);
  Stmt st(db_, "SELECT content, dropped_bytes FROM trial_logs WHERE trial_id=? AND stream=?");
  st.Bind(trial_id).Bind(stream);
  ASSIGN_OR_RETURN(bool row, st.Step());
  if (!row) {
    return absl::NotFoundError(absl::StrCat("trial ", trial_id, " kept no ", stream,
                                            " (none was sent, or retention removed it)"));
  }
  TrialLogRecord out;
  out.trial_id = trial_id;
  out.stream = stream;
  out.content = st.Text(0);
  out.dropped_bytes = st.Int(1);
  return out;
}

absl::Status SqliteStorage::DeleteSteps(int64_t trial_id) {
  std::lock_guard<std::recursive_mutex> lock(mu_);
  Stmt st(db_, "DELETE FROM steps WHERE trial_id=?");
  st.Bind(trial_id);
  return st.Run();
}

absl::Status SqliteStorage::PutAgent(const AgentRecord& a) {
  std::lock_guard<std::recursive_mutex> lock(mu_);
  Stmt st(db_, InsertSql("INSERT OR REPLACE", "agents", kAgentCols).c_str());
  st.Bind(a.id).Bind(a.host).Bind(a.gpu_model).Bind(a.gpu_count).Bind(a.memory_per_gpu_gib)
      .Bind(a.executors).Bind(a.registered_ms).Bind(a.last_heartbeat_ms).Bind(a.token_id)
      .Bind(a.team).Bind(a.serves).Bind(a.commands).Bind(a.state).Bind(a.state_reason);
  return st.Run();
}

absl::StatusOr<AgentRecord> SqliteStorage::GetAgent(const std::string& id) {
  std::lock_guard<std::recursive_mutex> lock(mu_);
  Stmt st(db_, absl::StrCat("SELECT ", kAgentCols, " FROM agents WHERE id=?").c_str());
  st.Bind(id);
  ASSIGN_OR_RETURN(bool row, st.Step());
  if (!row) return absl::NotFoundError(absl::StrCat("agent_id: no agent '", id, "'"));
  return ReadAgent(st);
}

absl::StatusOr<std::vector<AgentRecord>> SqliteStorage::ListAgents() {
  std::lock_guard<std::recursive_mutex> lock(mu_);
  Stmt st(db_, absl::StrCat("SELECT ", kAgentCols, " FROM agents ORDER BY id").c_str());
  return CollectRows(st, ReadAgent);
}

namespace {
absl::StatusOr<std::map<std::string, int64_t>> CountGroups(Stmt& st) {
  std::map<std::string, int64_t> out;
  while (true) {
    ASSIGN_OR_RETURN(bool row, st.Step());
    if (!row) break;
    out[st.Text(0)] = st.Int(1);
  }
  return out;
}
}  // namespace

absl::StatusOr<std::map<std::string, int64_t>> SqliteStorage::CountSessionsByStage() {
  std::lock_guard<std::recursive_mutex> lock(mu_);
  Stmt st(db_, "SELECT stage, COUNT(*) FROM sessions GROUP BY stage");
  return CountGroups(st);
}

absl::StatusOr<std::map<std::pair<std::string, std::string>, int64_t>>
SqliteStorage::CountTrialsByStatus() {
  std::lock_guard<std::recursive_mutex> lock(mu_);
  Stmt st(db_, "SELECT status, executor, COUNT(*) FROM trials GROUP BY status, executor");
  std::map<std::pair<std::string, std::string>, int64_t> out;
  while (true) {
    ASSIGN_OR_RETURN(bool row, st.Step());
    if (!row) break;
    out[{st.Text(0), st.Text(1)}] = st.Int(2);
  }
  return out;
}

absl::StatusOr<std::map<std::string, int64_t>> SqliteStorage::CountAgentTrials(
    const std::string& agent_id) {
  std::lock_guard<std::recursive_mutex> lock(mu_);
  Stmt st(db_, "SELECT status, COUNT(*) FROM trials WHERE agent=? GROUP BY status");
  st.Bind(agent_id);
  return CountGroups(st);
}

absl::StatusOr<int64_t> SqliteStorage::AddBankEntry(const BankRecord& b) {
  std::lock_guard<std::recursive_mutex> lock(mu_);
  // The entry and its knob rows land together or not at all.
  const bool own = !in_transaction_;
  if (own) RETURN_IF_ERROR(Exec("SAVEPOINT bank_entry;"));
  auto write = [&]() -> absl::StatusOr<int64_t> {
    Stmt st(db_, InsertSql("INSERT", "bank", kBankCols).c_str());
    st.Bind(b.session_id).Bind(b.trial_id).Bind(b.workload_signature).Bind(b.gpu_model)
        .Bind(b.gpu_count).Bind(b.config).Bind(b.status).Bind(b.step_time_s)
        .Bind(b.peak_mem_gib).Bind(b.cost_s).Bind(b.created_ms).Bind(b.team).Bind(b.shared)
        .Bind(b.purpose);
    RETURN_IF_ERROR(st.Run());
    const int64_t id = static_cast<int64_t>(sqlite3_last_insert_rowid(db_));
    for (const auto& [knob, value] : b.knobs) {
      Stmt k(db_, "INSERT OR IGNORE INTO bank_knobs (knob, value, bank_id) VALUES (?,?,?)");
      k.Bind(knob).Bind(value).Bind(id);
      RETURN_IF_ERROR(k.Run());
    }
    return id;
  };
  absl::StatusOr<int64_t> id = write();
  if (own) {
    if (!id.ok()) {
      (void)Exec("ROLLBACK TO bank_entry; RELEASE bank_entry;");
      return id.status();
    }
    RETURN_IF_ERROR(Exec("RELEASE bank_entry;"));
  }
  return id;
}

absl::StatusOr<int64_t> SqliteStorage::CountBank() {
  std::lock_guard<std::recursive_mutex> lock(mu_);
  Stmt st(db_, "SELECT COUNT(*) FROM bank");
  ASSIGN_OR_RETURN(bool row, st.Step());
  if (!row) return absl::InternalError("sqlite: COUNT returned no row");
  return st.Int(0);
}

absl::StatusOr<bool> SqliteStorage::BankHasKnob(const std::string& knob,
                                                const std::optional<std::string>& visible_to_team) {
  std::lock_guard<std::recursive_mutex> lock(mu_);
  // The primary key's prefix (knob) finds the rows; the team's rule is
  // checked on each until one passes.
  Stmt st(db_, visible_to_team
                   ? "SELECT 1 FROM bank_knobs k JOIN bank b ON b.id = k.bank_id WHERE k.knob = ? "
                     "AND (b.team = ? OR b.shared = 1) LIMIT 1"
                   : "SELECT 1 FROM bank_knobs WHERE knob = ? LIMIT 1");
  st.Bind(knob);
  if (visible_to_team) st.Bind(*visible_to_team);
  return st.Step();
}

absl::Status SqliteStorage::SetBankStatus(int64_t trial_id, const std::string& status) {
  std::lock_guard<std::recursive_mutex> lock(mu_);
  Stmt st(db_, "UPDATE bank SET status=? WHERE trial_id=?");
  st.Bind(status).Bind(trial_id);
  RETURN_IF_ERROR(st.Run());
  if (sqlite3_changes(db_) == 0) {
    return absl::NotFoundError(absl::StrCat("trial_id: no bank entry of trial ", trial_id));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<BankRecord>> SqliteStorage::QueryBank(const BankFilter& f) {
  std::lock_guard<std::recursive_mutex> lock(mu_);
  std::string sql = absl::StrCat("SELECT id, ", kBankCols, " FROM bank WHERE 1");
  if (f.cursor > 0) {
    absl::StrAppend(&sql, f.fastest ? " AND (step_time_s, id) > ((SELECT step_time_s FROM bank "
                                      "WHERE id = ?1), ?1)"
                          : f.oldest_first ? " AND id > ?1" : " AND id < ?1");
  }
  if (!f.workload_signature.empty()) absl::StrAppend(&sql, " AND workload_signature = ?");
  if (!f.gpu_model.empty()) absl::StrAppend(&sql, " AND gpu_model = ? COLLATE NOCASE");
  if (!f.status.empty()) absl::StrAppend(&sql, " AND status = ?");
  if (!f.purpose.empty()) absl::StrAppend(&sql, " AND purpose = ?");
  if (f.visible_to_team) absl::StrAppend(&sql, " AND (team = ? OR shared = 1)");
  // Knob filters: the rarest pair, when rare, drives the query from its
  // index (IN: its few ids are read first); the others are checked per
  // candidate row (EXISTS: one primary-key probe each), so that neither a
  // common value (materialising half the bank) nor a rare one (walking the
  // whole bank) costs more than the rows it can match.
  constexpr int64_t kDriveBelow = 4096;
  size_t drive = f.knobs.size();
  int64_t rarest = kDriveBelow + 1;
  for (size_t i = 0; i < f.knobs.size(); ++i) {
    Stmt count(db_,
               "SELECT COUNT(*) FROM (SELECT 1 FROM bank_knobs WHERE knob = ? AND value = ? "
               "LIMIT ?)");
    count.Bind(f.knobs[i].first).Bind(f.knobs[i].second).Bind(kDriveBelow + 1);
    ASSIGN_OR_RETURN(bool row, count.Step());
    const int64_t n = row ? count.Int(0) : 0;
    if (n < rarest) {
      rarest = n;
      drive = i;
    }
  }
  for (size_t i = 0; i < f.knobs.size(); ++i) {
    absl::StrAppend(&sql, i == drive
                              ? " AND id IN (SELECT bank_id FROM bank_knobs WHERE knob = ? AND "
                                "value = ?)"
                              : " AND EXISTS (SELECT 1 FROM bank_knobs WHERE knob = ? AND value = "
                                "? AND bank_id = bank.id)");
  }
  absl::StrAppend(&sql,
                  f.fastest ? " ORDER BY step_time_s, id"
                            : f.oldest_first ? " ORDER BY id" : " ORDER BY id DESC",
                  " LIMIT ?");
  Stmt st(db_, sql.c_str());
  if (f.cursor > 0) st.Bind(f.cursor);
  if (!f.workload_signature.empty()) st.Bind(f.workload_signature);
  if (!f.gpu_model.empty()) st.Bind(f.gpu_model);
  if (!f.status.empty()) st.Bind(f.status);
  if (!f.purpose.empty()) st.Bind(f.purpose);
  if (f.visible_to_team) st.Bind(*f.visible_to_team);
  for (const auto& [knob, value] : f.knobs) st.Bind(knob).Bind(value);
  st.Bind(static_cast<int64_t>(f.limit));
  std::vector<BankRecord> out;
  while (true) {
    ASSIGN_OR_RETURN(bool row, st.Step());
    if (!row) break;
    BankRecord b;
    int c = 0;
    b.id = st.Int(c++);
    b.session_id = st.Text(c++);
    b.trial_id = st.Int(c++);
    b.workload_signature = st.Text(c++);
    b.gpu_model = st.Text(c++);
    b.gpu_count = static_cast<int32_t>(st.Int(c++));
    b.config = st.Text(c++);
    b.status = st.Text(c++);
    b.step_time_s = st.Real(c++);
    b.peak_mem_gib = st.Real(c++);
    b.cost_s = st.Real(c++);
    b.created_ms = st.Int(c++);
    b.team = st.Text(c++);
    b.shared = st.Int(c++) != 0;
    b.purpose = st.Text(c++);
    out.push_back(std::move(b));
  }
  return out;
}

absl::Status SqliteStorage::AddRepository(const RepositoryRecord& r) {
  std::lock_guard<std::recursive_mutex> lock(mu_);
  Stmt st(db_, "INSERT INTO repositories (name, url, team, created_ms) VALUES (?,?,?,?)");
  st.Bind(r.name).Bind(r.url).Bind(r.team).Bind(r.created_ms);
  absl::Status s = st.Run();
  if (!s.ok() && sqlite3_extended_errcode(db_) == SQLITE_CONSTRAINT_PRIMARYKEY) {
    return absl::AlreadyExistsError(absl::StrCat("name: repository '", r.name, "' exists"));
  }
  return s;
}

namespace {
RepositoryRecord ReadRepository(const Stmt& st) {
  RepositoryRecord r;
  r.name = st.Text(0);
  r.url = st.Text(1);
  r.team = st.Text(2);
  r.created_ms = st.Int(3);
  return r;
}
}  // namespace

absl::StatusOr<RepositoryRecord> SqliteStorage::GetRepository(const std::string& name) {
  std::lock_guard<std::recursive_mutex> lock(mu_);
  Stmt st(db_, "SELECT name, url, team, created_ms FROM repositories WHERE name=?");
  st.Bind(name);
  ASSIGN_OR_RETURN(bool row, st.Step());
  if (!row) return absl::NotFoundError(absl::StrCat("name: no repository '", name, "'"));
  return ReadRepository(st);
}

absl::StatusOr<std::vector<RepositoryRecord>> SqliteStorage::ListRepositories() {
  std::lock_guard<std::recursive_mutex> lock(mu_);
  Stmt st(db_, "SELECT name, url, team, created_ms FROM repositories ORDER BY name");
  return CollectRows(st, ReadRepository);
}

absl::Status SqliteStorage::RemoveRepository(const std::string& name) {
  std::lock_guard<std::recursive_mutex> lock(mu_);
  Stmt st(db_, "DELETE FROM repositories WHERE name=?");
  st.Bind(name);
  RETURN_IF_ERROR(st.Run());
  if (sqlite3_changes(db_) == 0) {
    return absl::NotFoundError(absl::StrCat("name: no repository '", name, "'"));
  }
  return absl::OkStatus();
}

absl::Status SqliteStorage::AddToken(const TokenRecord& t) {
  std::lock_guard<std::recursive_mutex> lock(mu_);
  Stmt st(db_,
          "INSERT INTO tokens (id, hash, name, role, team, created_ms, revoked_ms) "
          "VALUES (?,?,?,?,?,?,?)");
  st.Bind(t.id).Bind(t.hash).Bind(t.name).Bind(t.role).Bind(t.team).Bind(t.created_ms)
      .Bind(t.revoked_ms);
  absl::Status r = st.Run();
  if (!r.ok() && (sqlite3_extended_errcode(db_) == SQLITE_CONSTRAINT_UNIQUE ||
                  sqlite3_extended_errcode(db_) == SQLITE_CONSTRAINT_PRIMARYKEY)) {
    return absl::AlreadyExistsError(absl::StrCat("token: '", t.id, "' or its hash exists"));
  }
  return r;
}

namespace {
TokenRecord ReadToken(const Stmt& st) {
  TokenRecord t;
  t.id = st.Text(0);
  t.hash = st.Text(1);
  t.name = st.Text(2);
  t.role = st.Text(3);
  t.team = st.Text(4);
  t.created_ms = st.Int(5);
  t.revoked_ms = st.Int(6);
  return t;
}
constexpr char kTokenSelect[] =
    "SELECT id, hash, name, role, team, created_ms, revoked_ms FROM tokens";
}  // namespace

absl::StatusOr<TokenRecord> SqliteStorage::GetTokenByHash(const std::string& hash) {
  std::lock_guard<std::recursive_mutex> lock(mu_);
  Stmt st(db_, absl::StrCat(kTokenSelect, " WHERE hash=?").c_str());
  st.Bind(hash);
  ASSIGN_OR_RETURN(bool row, st.Step());
  if (!row) return absl::NotFoundError("token: unknown");
  return ReadToken(st);
}

absl::StatusOr<std::vector<TokenRecord>> SqliteStorage::ListTokens() {
  std::lock_guard<std::recursive_mutex> lock(mu_);
  Stmt st(db_, absl::StrCat(kTokenSelect, " ORDER BY created_ms, id").c_str());
  return CollectRows(st, ReadToken);
}

absl::Status SqliteStorage::RevokeToken(const std::string& id, int64_t at_ms) {
  std::lock_guard<std::recursive_mutex> lock(mu_);
  Stmt st(db_, "UPDATE tokens SET revoked_ms=? WHERE id=? AND revoked_ms=0");
  st.Bind(at_ms).Bind(id);
  RETURN_IF_ERROR(st.Run());
  if (sqlite3_changes(db_) == 0) {
    Stmt check(db_, "SELECT 1 FROM tokens WHERE id=?");
    check.Bind(id);
    ASSIGN_OR_RETURN(bool row, check.Step());
    if (!row) return absl::NotFoundError(absl::StrCat("token: no token '", id, "'"));
  }
  return absl::OkStatus();
}

}  // namespace infrarsi::storage
