// The InfraRSI server as an object: storage, core, gRPC services and the
// lease reaper, wired together. Used by infrarsi-server's main, by the CLI's
// embedded demo and by integration tests.
#ifndef INFRARSI_SERVER_INFRARSI_SERVER_H_
#define INFRARSI_SERVER_INFRARSI_SERVER_H_

#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <utility>

#include "absl/status/statusor.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "core/auth.h"
#include "base/clock.h"
#include "server/dashboard.h"
#include "server/git_committer.h"
#include "server/metrics_endpoint.h"

namespace grpc {
class Server;
}

namespace infrarsi {
class SessionManager;
class Committer;
class Optimizer;
namespace storage {
class SqliteStorage;
}
namespace server {
class SessionServiceImpl;
class AgentServiceImpl;
class BankServiceImpl;
class CallLimiter;

// Whether every address `host` resolves to (as the listener binds it) is a
// loopback one: 127.0.0.0/8 or ::1. A name in the hosts file that resolves
// elsewhere is not loopback, whatever it is called; "" and wildcard
// addresses are not either.
bool ResolvesToLoopbackOnly(const std::string& host);

// "HOST:PORT" (port 0: any free one) as host and port; INVALID_ARGUMENT
// "<field>: expected HOST:PORT, got '...'" otherwise (an empty host too).
absl::StatusOr<std::pair<std::string, int>> ParseHostPort(const std::string& field,
                                                          const std::string& text);

// Whether `host` (`loopback`: ResolvesToLoopbackOnly(host)) may be served:
// with TLS anywhere; without it only on loopback, unless `insecure`.
// INVALID_ARGUMENT naming `field` and saying how to fix it otherwise. The
// rule of the gRPC port and the dashboard alike.
absl::Status CheckPlaintext(const std::string& field, const std::string& what, const std::string& host,
                            bool loopback, bool tls, bool insecure);

class InfraRsiServer {
 public:
  struct Options {
    // HOST:PORT to listen on; port 0 picks a free port (see port()).
    std::string listen = "127.0.0.1:7420";
    // SQLite database file; created if missing. One an older release wrote
    // is migrated only with `migrate` (after a copy of it is kept as
    // <db>.schema-v<N>.bak); without it the server refuses to start.
    std::string db_path = "./infrarsi.db";
    bool migrate = false;
    // Caps the database file (MiB; 0: no cap), a quota: writes past it fail
    // as on a full disk, and the sessions they stall say so.
    double db_quota_mib = 0;
    // How long an agent holds a trial without reporting.
    absl::Duration lease_timeout = absl::Seconds(30);
    // Leases a trial may lose before it counts as failed.
    int max_attempts = 3;
    // How often expired leases are looked for.
    absl::Duration reaper_interval = absl::Seconds(1);
    // Per-step metrics of sessions finished longer ago than this are
    // dropped (checked every `prune_interval`); zero keeps them forever.
    absl::Duration step_retention = absl::ZeroDuration();
    absl::Duration prune_interval = absl::Minutes(10);
    // Not owned; default: the real clock.
    Clock* clock = Clock::Real();
    // The search's prior knob effects, as YAML (deploy/priors.yaml format).
    // Empty (default): a cold start. The shipped priors help on the landscape
    // they were written next to but hurt on the simulator workloads (see
    // search_bench), so they are opt-in until they are revised from runs.
    std::string priors_yaml;
    // Optional LLM priors: an OpenAI-compatible base URL (e.g.
    // "http://127.0.0.1:8080/v1"), the model name, and the API key (the
    // daemon reads it from an environment variable, never a flag). Asked
    // once per session run; its answer is validated and blended with the
    // file; a bad or missing answer falls back to the file.
    std::string llm_endpoint;
    std::string llm_model;
    std::string llm_api_key;
    absl::Duration llm_timeout = absl::Seconds(30);
    // Also ask the endpoint, once per session when its run starts, for code
    // patches within the session's editable scope (core/llm_patches.h):
    // each is admitted only as a spec's own patch would be.
    bool llm_patches = false;
    // TLS: the server's certificate chain and private key (PEM). With a
    // client CA, clients must present a certificate it signed (mutual TLS).
    // Without TLS the server listens only on a loopback address unless
    // `insecure` says plaintext on the network is wanted.
    std::string tls_cert_pem;
    std::string tls_key_pem;
    std::string tls_client_ca_pem;
    bool insecure = false;
    // Long-lived calls one caller (a token; on an open server a peer
    // address) may hold at once: WatchSession streams and waiting
    // LeaseTrial polls. Past it: RESOURCE_EXHAUSTED naming the cap.
    // Where GET /metrics serves Prometheus' text format (HOST:PORT, port 0:
    // any free one); "" serves none. Plain HTTP: keep it on loopback or a
    // private network.
    std::string metrics_listen;
    // Where the read-only web dashboard is served (HOST:PORT, port 0: any
    // free one); "" serves none. The same tokens and TLS as the gRPC port;
    // plaintext only on loopback unless `insecure`.
    std::string http_listen;
    int max_streams_per_caller = 64;
    int max_long_polls_per_caller = 256;
    // Bare mirrors of registered repositories with remote URLs. Default:
    // db_path + ".repos".
    std::string repos_dir;
  };

  // Takes `db_path`'s lock file (<db>.lock, flock'ed; its pid written in
  // it): the fd to keep open while the database is written, or
  // FAILED_PRECONDITION naming the holder's pid. -1 for ":memory:". What a
  // server holds while it runs, and what `infrarsi-server migrate` holds.
  static absl::StatusOr<int> LockDatabase(const std::string& db_path);

  // Opens the database (a quick integrity check first: a damaged file is
  // refused with DATA_LOSS), resumes every session and starts serving.
  static absl::StatusOr<std::unique_ptr<InfraRsiServer>> Create(const Options& options);

  // Shuts down (see Shutdown) if still running.
  ~InfraRsiServer();

  // The port actually bound.
  int port() const { return port_; }
  std::string address() const;
  // The metrics endpoint's port (0: none).
  int metrics_port() const { return metrics_ ? metrics_->port() : 0; }
  // The dashboard's port (0: none).
  int http_port() const { return dashboard_ ? dashboard_->port() : 0; }
  const Dashboard* dashboard() const { return dashboard_.get(); }
  SessionManager* manager() { return manager_.get(); }

  // Graceful: wakes long polls and watchers, lets in-flight RPCs finish (up
  // to `grace`), stops the reaper. Idempotent. Thread-safe.
  void Shutdown(absl::Duration grace = absl::Seconds(5));
  // Blocks until Shutdown() has been called and finished.
  void Wait();

 private:
  InfraRsiServer() = default;

  // The database's lock file (<db>.lock), flock'ed while this server lives
  // so that a second server on the same database refuses to start. The
  // first member: destroyed last, after everything that writes the
  // database (the kernel drops it at once if the process dies).
  struct DbLock {
    int fd = -1;  // -1: none (an in-memory database)
    ~DbLock();
  };
  DbLock db_lock_;

  Options options_;
  std::string host_;
  int port_ = 0;
  std::unique_ptr<storage::SqliteStorage> storage_;
  std::unique_ptr<GitCommitter> committer_;
  std::unique_ptr<Authenticator> auth_;
  std::unique_ptr<Optimizer> optimizer_;
  std::unique_ptr<SessionManager> manager_;
  std::unique_ptr<SessionServiceImpl> session_service_;
  std::unique_ptr<AgentServiceImpl> agent_service_;
  std::unique_ptr<BankServiceImpl> bank_service_;
  std::unique_ptr<CallLimiter> streams_;
  std::unique_ptr<CallLimiter> polls_;
  std::unique_ptr<grpc::Server> grpc_server_;
  RpcMetrics rpc_metrics_;
  std::unique_ptr<storage::Storage> metrics_reader_;
  std::unique_ptr<MetricsEndpoint> metrics_;
  std::unique_ptr<Dashboard> dashboard_;
  absl::Notification stop_;
  absl::Notification stopped_;
  std::once_flag shutdown_once_;
  std::thread reaper_;
};

}  // namespace server
}  // namespace infrarsi

#endif  // INFRARSI_SERVER_INFRARSI_SERVER_H_
