// infrarsi-server: the daemon. Flags are parsed here and nowhere else.
#include <malloc.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstddef>
#include <cstring>
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include <CLI/CLI.hpp>

#include "core/spec.h"
#include <cstdio>
#include <tuple>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <sstream>
#include <thread>

#include "absl/time/clock.h"
#include "base/allocator.h"
#include "base/file_util.h"
#include "base/logs/json_logs.h"
#include "base/status_macros.h"
#include "server/infrarsi_server.h"
#include "server/tokens.h"
#include "storage/sqlite_storage.h"

namespace {

// systemd's readiness protocol (sd_notify) without libsystemd, whose
// headers Debian ships only in libsystemd-dev: one datagram to
// $NOTIFY_SOCKET. Nothing happens outside a Type=notify unit.
void NotifySystemd(const char* state) {
  const char* path = std::getenv("NOTIFY_SOCKET");
  if (path == nullptr || path[0] == '\0') return;
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  const size_t len = std::strlen(path);
  if (len >= sizeof(addr.sun_path)) return;
  std::memcpy(addr.sun_path, path, len);
  if (addr.sun_path[0] == '@') addr.sun_path[0] = '\0';  // an abstract socket
  const int fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return;
  (void)sendto(fd, state, std::strlen(state), MSG_NOSIGNAL, reinterpret_cast<sockaddr*>(&addr),
               static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + len));
  close(fd);
}

}  // namespace

int main(int argc, char** argv) {
  // Logs go to stderr from the first line: spdlog's default logger writes
  // to stdout, where the admin commands print what scripts read (a token).
  spdlog::set_default_logger(spdlog::stderr_color_mt("infrarsi-server"));
  CLI::App app{
      "infrarsi-server: keeps tuning sessions, trial history and the experience bank, and "
      "serves the SessionService, AgentService and BankService gRPC APIs."};
  app.set_version_flag("--version", std::string("infrarsi-server ") + INFRARSI_VERSION);
  infrarsi::server::InfraRsiServer::Options opts;
  double lease_timeout_s = 30;
  std::string log_level = "info";
  app.set_config("--config", "",
                 "read flags from this file (key = value lines, the flag names without "
                 "dashes; deploy/systemd/infrarsi-server.conf documents them)");
  app.allow_config_extras(CLI::config_extras_mode::error);  // a misspelt key is an error
  app.add_option("--listen", opts.listen, "HOST:PORT to listen on (port 0: any free port)")
      ->capture_default_str();
  app.add_option("--db", opts.db_path, "SQLite database file (created if missing)")
      ->capture_default_str();
  app.add_option("--db-quota-mib", opts.db_quota_mib,
                 "cap the database file at this many MiB (0: none); writes past it wait as on a "
                 "full disk, and the sessions they stall say so")
      ->capture_default_str()
      ->check(CLI::Range(0.0, 1e9));
  app.add_flag("--migrate", opts.migrate,
               "upgrade a database an older release wrote, after copying it to "
               "<db>.schema-v<N>.bak (without it such a database is refused; see `migrate`)");
  app.add_option("--lease-timeout-s", lease_timeout_s,
                 "seconds an agent may hold a trial without reporting progress")
      ->capture_default_str()
      ->check(CLI::Range(0.1, 86400.0));
  app.add_option("--max-attempts", opts.max_attempts,
                 "leases a trial may lose before it is recorded as failed")
      ->capture_default_str()
      ->check(CLI::Range(1, 100));
  double step_retention_days = 0;
  app.add_option("--step-retention-days", step_retention_days,
                 "drop per-step metrics of sessions finished more than this many days ago "
                 "(trials, reports and the bank stay; 0: keep forever)")
      ->capture_default_str()
      ->check(CLI::Range(0.0, 36500.0));
  int malloc_arenas = 1;
  app.add_option("--malloc-arenas", malloc_arenas,
                 "glibc malloc arenas (M_ARENA_MAX); each gRPC thread's own arena keeps what "
                 "it freed, so more arenas hold more memory (0: glibc's default, 8 per core)")
      ->capture_default_str()
      ->check(CLI::Range(0, 1024));
  std::string log_format = "text";
  app.add_option("--log-format", log_format, "text, or json: one JSON object per line")
      ->check(CLI::IsMember({"text", "json"}))
      ->capture_default_str();
  app.add_option("--log-level", log_level, "trace, debug, info, warn, error")
      ->capture_default_str()
      ->check(CLI::IsMember({"trace", "debug", "info", "warn", "error"}));
  std::string priors_path;
  app.add_option("--priors", priors_path,
                 "YAML file of prior knob effects for the search, e.g. deploy/priors.yaml "
                 "(default: none, a cold start)");
  std::string llm_key_env = "INFRARSI_LLM_API_KEY";
  double llm_timeout_s = 30;
  app.add_option("--llm-endpoint", opts.llm_endpoint,
                 "OpenAI-compatible base URL asked for knob priors per session, e.g. "
                 "http://127.0.0.1:8080/v1 (optional; a bad or missing answer falls back to "
                 "--priors)");
  app.add_option("--llm-model", opts.llm_model, "model name sent to --llm-endpoint");
  app.add_flag("--llm-patches", opts.llm_patches,
               "also ask --llm-endpoint, once per session when its run starts, for code patches "
               "within the editable scope (each checked as a spec's own patch: scope, protected "
               "files, a clean apply; its trials judged by the contract)");
  app.add_option("--llm-key-env", llm_key_env,
                 "environment variable holding the endpoint's API key (may be unset)")
      ->capture_default_str();
  app.add_option("--llm-timeout-s", llm_timeout_s, "seconds to wait for the LLM's answer")
      ->capture_default_str()
      ->check(CLI::Range(0.1, 600.0));
  std::string tls_cert, tls_key, tls_client_ca;
  app.add_option("--tls-cert", tls_cert, "PEM certificate chain: serve TLS")->check(CLI::ExistingFile);
  app.add_option("--tls-key", tls_key, "PEM private key of --tls-cert")->check(CLI::ExistingFile);
  app.add_option("--tls-client-ca", tls_client_ca,
                 "PEM CA: clients must present a certificate it signed (mutual TLS)")
      ->check(CLI::ExistingFile);
  app.add_flag("--insecure", opts.insecure,
               "allow plaintext on a non-loopback --listen address (default: refused)");
  app.add_option("--metrics-listen", opts.metrics_listen,
                 "HOST:PORT for GET /metrics in Prometheus' text format (plain HTTP: loopback "
                 "or a private network); default: none");
  app.add_option("--http-listen", opts.http_listen,
                 "HOST:PORT for the read-only web dashboard (the same tokens and TLS as "
                 "--listen; plaintext only on loopback unless --insecure); default: none");
  app.add_option("--max-streams-per-caller", opts.max_streams_per_caller,
                 "concurrent WatchSession streams one caller (token) may hold")
      ->capture_default_str()
      ->check(CLI::Range(1, 100000));
  app.add_option("--max-long-polls-per-caller", opts.max_long_polls_per_caller,
                 "concurrent waiting LeaseTrial calls one caller (token) may hold")
      ->capture_default_str()
      ->check(CLI::Range(1, 100000));
  app.add_option("--repos-dir", opts.repos_dir,
                 "where mirrors of registered repositories with remote URLs are kept "
                 "(default: --db path + .repos)");
  // infrarsi-server token create|list|revoke: manage API tokens in --db.
  auto* token = app.add_subcommand("token", "manage API tokens (stored hashed in --db)");
  std::string token_role, token_team, token_name, token_id;
  auto* token_create = token->add_subcommand("create", "issue a token; prints it once");
  token_create->add_option("--role", token_role, "admin, submitter, reader or agent")->required();
  token_create->add_option("--team", token_team, "the team it acts for (submitter, reader)");
  token_create->add_option("--name", token_name, "a label for `token list`");
  auto* token_list = token->add_subcommand("list", "list tokens (never the tokens themselves)");
  auto* token_revoke = token->add_subcommand("revoke", "revoke a token by id");
  token_revoke->add_option("id", token_id, "token id from `token list`")->required();
  token->require_subcommand(1);
  // infrarsi-server repo add|list|remove: the repositories teams may name.
  auto* repo = app.add_subcommand(
      "repo", "register the repositories sessions may name (repository: {name: NAME}); the "
              "server reads them at init, agents fetch them");
  std::string repo_name, repo_url, repo_team;
  auto* repo_add = repo->add_subcommand("add", "register NAME for a team");
  repo_add->add_option("name", repo_name, "the name specs use")->required();
  repo_add->add_option("--url", repo_url, "where the server and the agents read it (a path or URL)")
      ->required();
  repo_add->add_option("--team", repo_team, "the team whose sessions may name it")->required();
  auto* repo_list = repo->add_subcommand("list", "list registered repositories");
  auto* repo_remove = repo->add_subcommand("remove", "unregister a repository");
  repo_remove->add_option("name", repo_name)->required();
  repo->require_subcommand(1);
  // infrarsi-server backup --to FILE: a consistent copy of --db, safe while
  // the server runs (SQLite's online backup reads as any reader does).
  auto* backup = app.add_subcommand(
      "backup", "copy --db consistently to a new file, safe while the server runs");
  std::string backup_to;
  backup->add_option("--to", backup_to, "the copy's path (must not exist)")->required();
  // infrarsi-server migrate: the upgrade as a step of its own (systemd's
  // ExecStartPre), under the server's lock, with its backup.
  auto* migrate = app.add_subcommand(
      "migrate", "upgrade --db to this release's schema and exit (a copy of the old file is kept "
                 "as <db>.schema-v<N>.bak first); refused while a server holds --db");
  // infrarsi-server check: SQLite's full integrity check, on demand.
  auto* check = app.add_subcommand(
      "check", "check --db for damage (SQLite's integrity_check) and exit: 0 sound, 3 damaged; "
               "safe while the server runs");
  CLI11_PARSE(app, argc, argv);
  // The level and format apply before the first line is logged (the
  // allocator's warning below), so a --log-format json log holds no plain line.
  spdlog::set_level(spdlog::level::from_str(log_level));
  if (log_format == "json") infrarsi::UseJsonLogs();
  // Before any other thread starts: a server with per-thread arenas held
  // ~58 MB after 200 replay sessions, with one ~41 MB, at the same
  // throughput (tests/bench/server_rss.sh).
  if (malloc_arenas > 0) (void)mallopt(M_ARENA_MAX, malloc_arenas);
  // And a proposal's matrices stay mapped for the next one rather than
  // page-faulted in afresh (base/allocator.h: a third of its CPU time).
  if (const absl::Status s = infrarsi::KeepFreedMemoryForReuse(); !s.ok()) {
    spdlog::warn("allocator settings not applied: {}", std::string(s.message()));
  }
  // The admin's commands on the database. None of them migrates: a
  // database an older release wrote is refused by token and repo (with
  // what to run), and backed up or checked as it is.
  using Upgrade = infrarsi::storage::SqliteStorage::Options::Upgrade;
  auto on_db = [&](const std::function<absl::Status(infrarsi::storage::SqliteStorage*)>& fn,
                   Upgrade upgrade = Upgrade::kRefuse) {
    infrarsi::storage::SqliteStorage::Options so;
    so.path = opts.db_path;
    so.upgrade = upgrade;
    if (upgrade == Upgrade::kAsIs) {
      if (auto v = infrarsi::storage::SqliteStorage::FileSchemaVersion(opts.db_path); !v.ok()) {
        std::fprintf(stderr, "%s\n", std::string(v.status().message()).c_str());
        return 4;
      }
    }
    auto db = infrarsi::storage::SqliteStorage::Create(so);
    absl::Status st = db.ok() ? fn(db->get()) : db.status();
    if (!st.ok()) {
      std::fprintf(stderr, "%s\n", std::string(st.message()).c_str());
      return absl::IsDataLoss(st) ? 3 : 1;
    }
    return 0;
  };
  if (*backup) {
    return on_db([&](infrarsi::storage::SqliteStorage* db) -> absl::Status {
      const absl::Time start = absl::Now();
      absl::Status st = db->BackupTo(backup_to);
      ASSIGN_OR_RETURN(int version, db->SchemaVersion());
      if (st.ok()) {
        std::printf("backed up %s (schema version %d) to %s in %.2f s\n", opts.db_path.c_str(),
                    version, backup_to.c_str(), absl::ToDoubleSeconds(absl::Now() - start));
      }
      return st;
    }, Upgrade::kAsIs);
  }
  if (*check) {
    return on_db([&](infrarsi::storage::SqliteStorage* db) -> absl::Status {
      ASSIGN_OR_RETURN(std::string damage, db->CheckIntegrity(/*quick=*/false));
      if (!damage.empty()) {
        return absl::DataLossError(absl::StrCat(opts.db_path, " is damaged: ", damage,
                                                "; restore the last backup (docs/operations.md)"));
      }
      ASSIGN_OR_RETURN(int version, db->SchemaVersion());
      std::printf("%s: sound (schema version %d)\n", opts.db_path.c_str(), version);
      return absl::OkStatus();
    }, Upgrade::kAsIs);
  }
  if (*migrate) {
    auto lock = infrarsi::server::InfraRsiServer::LockDatabase(opts.db_path);
    if (!lock.ok()) {
      std::fprintf(stderr, "%s\n", std::string(lock.status().message()).c_str());
      return 1;
    }
    auto before = infrarsi::storage::SqliteStorage::FileSchemaVersion(opts.db_path);
    infrarsi::storage::SqliteStorage::Options so;
    so.path = opts.db_path;
    so.upgrade = Upgrade::kMigrate;
    so.backup_before_migration = true;
    so.check_integrity = true;
    auto db = infrarsi::storage::SqliteStorage::Create(so);
    if (!db.ok()) {
      std::fprintf(stderr, "%s\n", std::string(db.status().message()).c_str());
      return absl::IsDataLoss(db.status()) ? 3 : 1;
    }
    const int latest = infrarsi::storage::SqliteStorage::LatestSchemaVersion();
    if ((*db)->migration_backup().empty()) {
      std::printf("%s: schema version %d, nothing to migrate\n", opts.db_path.c_str(), latest);
    } else {
      std::printf("migrated %s from schema version %d to %d; the old file is kept as %s (an older "
                  "server opens that copy)\n",
                  opts.db_path.c_str(), before.ok() ? *before : 0, latest,
                  (*db)->migration_backup().c_str());
    }
    return 0;
  }
  if (*repo) {
    return on_db([&](infrarsi::storage::SqliteStorage* db) -> absl::Status {
      if (*repo_add) {
        absl::Status st = infrarsi::server::AddRepository(db, repo_name, repo_url, repo_team);
        if (st.ok()) std::printf("registered %s for team %s\n", repo_name.c_str(), repo_team.c_str());
        return st;
      }
      if (*repo_list) {
        auto l = infrarsi::server::ListRepositories(db);
        if (l.ok()) std::printf("%s", l->c_str());
        return l.status();
      }
      absl::Status st = db->RemoveRepository(repo_name);
      if (st.ok()) std::printf("removed %s\n", repo_name.c_str());
      return st;
    });
  }
  if (*token) {
    return on_db([&](infrarsi::storage::SqliteStorage* db) -> absl::Status {
      if (*token_create) {
        auto t = infrarsi::server::CreateToken(db, token_role, token_team, token_name);
        if (t.ok()) std::printf("%s\n", t->c_str());
        return t.status();
      }
      if (*token_list) {
        auto l = infrarsi::server::ListTokens(db);
        if (l.ok()) std::printf("%s", l->c_str());
        return l.status();
      }
      absl::Status st = infrarsi::server::RevokeToken(db, token_id);
      if (st.ok()) std::printf("revoked %s\n", token_id.c_str());
      return st;
    });
  }
  for (auto [flag, path, out] : {std::tuple{"--tls-cert", &tls_cert, &opts.tls_cert_pem},
                                 std::tuple{"--tls-key", &tls_key, &opts.tls_key_pem},
                                 std::tuple{"--tls-client-ca", &tls_client_ca, &opts.tls_client_ca_pem}}) {
    if (path->empty()) continue;
    auto pem = infrarsi::ReadRegularFile(*path, 1 << 20, flag);
    if (!pem.ok() || pem->empty()) {
      std::fprintf(stderr, "%s: cannot read %s\n", flag, path->c_str());
      return 2;
    }
    *out = *std::move(pem);
  }
  if (!opts.llm_endpoint.empty() && opts.llm_model.empty()) {
    std::fprintf(stderr, "--llm-model: required with --llm-endpoint\n");
    return 2;
  }
  if (const char* key = std::getenv(llm_key_env.c_str()); key != nullptr) opts.llm_api_key = key;
  opts.llm_timeout = absl::Seconds(llm_timeout_s);
  if (!priors_path.empty()) {
    auto priors = infrarsi::ReadRegularFile(priors_path, 4 << 20, "--priors");
    if (!priors.ok()) {
      std::fprintf(stderr, "%s\n", std::string(priors.status().message()).c_str());
      return 2;
    }
    opts.priors_yaml = *std::move(priors);
  }
  opts.lease_timeout = absl::Seconds(lease_timeout_s);
  opts.step_retention = absl::Seconds(step_retention_days * 86400);

  // Block the stop signals in every thread; one thread waits for them.
  sigset_t sigs;
  sigemptyset(&sigs);
  sigaddset(&sigs, SIGTERM);
  sigaddset(&sigs, SIGINT);
  pthread_sigmask(SIG_BLOCK, &sigs, nullptr);

  auto server = infrarsi::server::InfraRsiServer::Create(opts);
  if (!server.ok()) {
    spdlog::error("cannot start: {}", server.status().ToString());
    return 1;
  }
  // The first stdout line tells scripts (and tests) the bound address.
  std::printf("infrarsi-server listening on %s\n", (*server)->address().c_str());
  std::fflush(stdout);
  if ((*server)->http_port() > 0) {
    // The second line, for the same scripts: where the dashboard is.
    std::printf("infrarsi-server dashboard on %s://%s:%d/\n",
                opts.tls_cert_pem.empty() ? "http" : "https",
                opts.http_listen.substr(0, opts.http_listen.rfind(':')).c_str(),
                (*server)->http_port());
    std::fflush(stdout);
  }
  NotifySystemd("READY=1");  // Type=notify: ready once it listens
  spdlog::info("listening on {} with database {}", (*server)->address(), opts.db_path);
  if ((*server)->metrics_port() > 0) {
    spdlog::info("metrics on http://{}:{}/metrics",
                 opts.metrics_listen.substr(0, opts.metrics_listen.rfind(':')),
                 (*server)->metrics_port());
  }

  std::thread waiter([&] {
    int sig = 0;
    sigwait(&sigs, &sig);
    spdlog::info("signal {}: shutting down gracefully", sig);
    NotifySystemd("STOPPING=1");
    (*server)->Shutdown();
  });
  (*server)->Wait();
  waiter.join();
  spdlog::info("stopped");
  return 0;
}
