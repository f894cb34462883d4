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
  };

  // Opens (or creates) the database, enables WAL and migrates the schema
  // forward. Fails with FAILED_PRECONDITION on a database written by a newer
  // InfraRSI (schema version above the newest known).
  static absl::StatusOr<std::unique_ptr<SqliteStorage>> Create(const Options& options);

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
  absl::StatusOr<std::vector<TrialRecord>> ListTrialsByStatus(const std::string& status,
                                                             int32_t limit) override;
  absl::Status PutSteps(const std::vector<StepRecord>& steps) override;
  absl::StatusOr<std::vector<StepRecord>> ListSteps(int64_t trial_id) override;
  absl::StatusOr<StepTail> ListStepTail(int64_t trial_id, int64_t from_step) override;
  absl::Status DeleteSteps(int64_t trial_id) override;
  absl::Status PutTrialLog(const TrialLogRecord& log) override;
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
  // A read-only connection to the same file (WAL: it reads the last commit
  // while this one writes). UNIMPLEMENTED for ":memory:".
  absl::StatusOr<std::unique_ptr<Storage>> OpenReader() override;
  // A consistent copy of the whole database at `path`, through SQLite's
  // online backup API: it reads as any reader does, so a live server's
  // writer never waits on it. Written to `path`.tmp and renamed into place
  // once complete; an existing `path` is refused (ALREADY_EXISTS).
  absl::Status BackupTo(const std::string& path);
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
  // Recursive so that a Transaction's callback can call the other methods.
  std::recursive_mutex mu_;
  bool in_transaction_ = false;
};

}  // namespace infrarsi::storage

#endif  // INFRARSI_STORAGE_SQLITE_STORAGE_H_
