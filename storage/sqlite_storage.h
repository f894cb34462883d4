// SQLite implementation of Storage: WAL mode, versioned forward migrations.
#ifndef INFRARSI_STORAGE_SQLITE_STORAGE_H_
#define INFRARSI_STORAGE_SQLITE_STORAGE_H_

#include <memory>
#include <mutex>
#include <string>

#include "storage/storage.h"

struct sqlite3;

namespace infrarsi::storage {

class SqliteStorage : public Storage {
 public:
  struct Options {
    // Database file; ":memory:" for a private in-memory database. Created if
    // missing. Required.
    std::string path;
    // Apply migrations up to this schema version (default: the newest).
    // Lower values exist so tests can build an old database.
    int target_version = -1;
    // Caps the database at this many pages (SQLite's max_page_count; 0: no
    // cap): a quota, and how tests fill the "disk". Writes past it fail with
    // RESOURCE_EXHAUSTED and change nothing.
    int64_t max_page_count = 0;
    // Opens the database read-only (a read-only disk or mount): reads work,
    // writes fail with FAILED_PRECONDITION.
    bool read_only = false;
    // What Create does with a database an older release wrote (a schema
    // version below the newest; a new, empty file is always created at the
    // newest):
    //   kMigrate (default): migrates it forward, first copying it to
    //     `<path>.schema-v<N>.bak` when `backup_before_migration`;
    //   kRefuse: FAILED_PRECONDITION naming both versions and --migrate
    //     (the server without --migrate, the admin's offline commands);
    //   kAsIs: opens it as it is, writing nothing (backup, check).
    enum class Upgrade { kMigrate, kRefuse, kAsIs };
    Upgrade upgrade = Upgrade::kMigrate;
    bool backup_before_migration = false;
    // Runs SQLite's quick_check at open: a damaged file is refused
    // (DATA_LOSS naming what is damaged) before anything reads or writes it.
    bool check_integrity = false;
  };

  // Opens (or creates) the database, enables WAL and migrates the schema
  // forward (see Options::upgrade). Fails with FAILED_PRECONDITION on a
  // database written by a newer InfraRSI (schema version above the newest
  // known), and with DATA_LOSS on a file that is not a database or (with
  // check_integrity) one that is damaged.
  static absl::StatusOr<std::unique_ptr<SqliteStorage>> Create(const Options& options);

  // The schema version of the database at `path`, read without creating,
  // migrating or writing anything (0: a new, empty database). NOT_FOUND if
  // there is no such file.
  static absl::StatusOr<int> FileSchemaVersion(const std::string& path);

  // The newest schema version this build knows.
  static int LatestSchemaVersion();

  ~SqliteStorage() override;
  SqliteStorage(const SqliteStorage&) = delete;
  SqliteStorage& operator=(const SqliteStorage&) = delete;

  absl::StatusOr<int> SchemaVersion();
  // The journal mode SQLite reports ("wal" for a file database).
  absl::StatusOr<std::string> JournalMode();

  absl::Status Transaction(const std::function<absl::Status()>& fn) override;
  absl::Status InsertSession(const SessionRecord& s) override;
  absl::Status UpdateSession(const SessionRecord& s) override;
  absl::StatusOr<SessionRecord> GetSession(const std::string& id) override;
  absl::StatusOr<std::vector<SessionRecord>> ListSessions() override;
  absl::StatusOr<std::vector<SessionRecord>> ListSessionsPage(const SessionQuery& q) override;
  absl::StatusOr<int64_t> InsertTrial(const TrialRecord& t) override;
  absl::Status UpdateTrial(const TrialRecord& t) override;
  absl::StatusOr<TrialRecord> GetTrial(int64_t id) override;
  absl::StatusOr<std::vector<TrialRecord>> ListTrials(const std::string& session_id) override;
  absl::StatusOr<std::vector<TrialRecord>> ListTrialsChangedSince(const std::string& session_id,
                                                                 int64_t after_rev) override;
  absl::StatusOr<std::vector<TrialRecord>> ListTrialsByStatus(const std::string& status,
                                                             int32_t limit) override;
  absl::Status PutSteps(const std::vector<StepRecord>& steps) override;
  absl::StatusOr<std::vector<StepRecord>> ListSteps(int64_t trial_id) override;
  absl::StatusOr<StepTail> ListStepTail(int64_t trial_id, int64_t from_step) override;
  absl::Status DeleteSteps(int64_t trial_id) override;
  absl::Status PutTrialLog(const TrialLogRecord& log) override;
  absl::Status PutFrozenReport(const FrozenReportRecord& r) override;
  absl::StatusOr<FrozenReportRecord> GetFrozenReport(const std::string& session_id) override;
  absl::StatusOr<TrialLogRecord> GetTrialLog(int64_t trial_id, const std::string& stream) override;
  absl::StatusOr<int64_t> PruneSteps(const std::vector<std::string>& stages, int64_t before_ms,
                                     int32_t limit) override;
  absl::Status PutAgent(const AgentRecord& a) override;
  absl::StatusOr<AgentRecord> GetAgent(const std::string& id) override;
  absl::StatusOr<std::vector<AgentRecord>> ListAgents() override;
  absl::StatusOr<std::map<std::string, int64_t>> CountSessionsByStage() override;
  absl::StatusOr<std::map<std::pair<std::string, std::string>, int64_t>> CountTrialsByStatus()
      override;
  absl::StatusOr<std::map<std::string, int64_t>> CountAgentTrials(
      const std::string& agent_id) override;
  absl::StatusOr<int64_t> AddBankEntry(const BankRecord& b) override;
  absl::Status SetBankStatus(int64_t trial_id, const std::string& status) override;
  absl::StatusOr<std::vector<BankRecord>> QueryBank(const BankFilter& f) override;
  absl::StatusOr<int64_t> CountBank() override;
  absl::StatusOr<bool> BankHasKnob(const std::string& knob,
                                   const std::optional<std::string>& visible_to_team) override;
  // A read-only connection to the same file (WAL: it reads the last commit
  // while this one writes). UNIMPLEMENTED for ":memory:".
  absl::StatusOr<std::unique_ptr<Storage>> OpenReader() override;
  // A consistent copy of the whole database at `path`, through SQLite's
  // online backup API: it reads as any reader does, so a live server's
  // writer never waits on it. Written to `path`.tmp and renamed into place
  // once complete; an existing `path` is refused (ALREADY_EXISTS).
  // One step (the whole file inside one read transaction), so writers that
  // commit meanwhile never make it start over, however busy they are.
  absl::Status BackupTo(const std::string& path);
  // SQLite's integrity_check (quick: quick_check, which skips the index
  // contents and is linear in the file's size): "" when the file is sound,
  // else what is damaged, one problem per line (at most 20).
  absl::StatusOr<std::string> CheckIntegrity(bool quick);
  // The backup Create made before migrating ("" if none).
  const std::string& migration_backup() const { return migration_backup_; }
  absl::Status AddRepository(const RepositoryRecord& r) override;
  absl::StatusOr<RepositoryRecord> GetRepository(const std::string& name) override;
  absl::StatusOr<std::vector<RepositoryRecord>> ListRepositories() override;
  absl::Status RemoveRepository(const std::string& name) override;
  absl::Status AddToken(const TokenRecord& t) override;
  absl::StatusOr<TokenRecord> GetTokenByHash(const std::string& hash) override;
  absl::StatusOr<std::vector<TokenRecord>> ListTokens() override;
  absl::Status RevokeToken(const std::string& id, int64_t at_ms) override;

 private:
  SqliteStorage(sqlite3* db, std::string path) : db_(db), path_(std::move(path)) {}
  absl::Status Exec(const std::string& sql);
  absl::Status Migrate(int target_version);

  sqlite3* db_;
  const std::string path_;
  std::string migration_backup_;
  // Recursive so that a Transaction's callback can call the other methods.
  std::recursive_mutex mu_;
  bool in_transaction_ = false;
};

}  // namespace infrarsi::storage

#endif  // INFRARSI_STORAGE_SQLITE_STORAGE_H_
