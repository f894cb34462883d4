#include "server/infrarsi_server.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstring>

#include <grpcpp/ext/proto_server_reflection_plugin.h>
#include <grpcpp/health_check_service_interface.h>

#include "server/tokens.h"

#include <arpa/inet.h>
#include <git2.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <grpcpp/grpcpp.h>
#include <spdlog/spdlog.h>

#include <mutex>

#include "absl/strings/numbers.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "core/model_optimizer.h"
#include "core/priors.h"
#include "server/llm_client.h"
#include "core/session_manager.h"
#include "base/status_macros.h"
#include "server/git_committer.h"
#include "server/services.h"
#include "storage/sqlite_storage.h"

namespace infrarsi::server {
namespace {
constexpr int kMaxMessageBytes = 16 << 20;

// Git's blob id of a file's content: what protected files are locked by
// and what the agents check. The content is what the submitter sent.
std::string GitBlobHash(const std::string& content) {
  git_oid oid;
  if (git_odb_hash(&oid, content.data(), content.size(), GIT_OBJECT_BLOB) != 0) return "";
  char buf[GIT_OID_HEXSZ + 1];
  git_oid_tostr(buf, sizeof(buf), &oid);
  return std::string(buf);
}
}  // namespace

bool ResolvesToLoopbackOnly(const std::string& host) {
  std::string h = host;
  if (h.size() >= 2 && h.front() == '[' && h.back() == ']') h = h.substr(1, h.size() - 2);
  if (h.empty()) return false;  // every interface
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  if (getaddrinfo(h.c_str(), nullptr, &hints, &res) != 0 || res == nullptr) return false;
  bool all = true;
  for (addrinfo* a = res; a != nullptr; a = a->ai_next) {
    if (a->ai_family == AF_INET) {
      const auto* in = reinterpret_cast<const sockaddr_in*>(a->ai_addr);
      all = all && (ntohl(in->sin_addr.s_addr) >> 24) == 127;
    } else if (a->ai_family == AF_INET6) {
      const auto* in6 = reinterpret_cast<const sockaddr_in6*>(a->ai_addr);
      all = all && IN6_IS_ADDR_LOOPBACK(&in6->sin6_addr);
    } else {
      all = false;
    }
  }
  freeaddrinfo(res);
  return all;
}

absl::StatusOr<std::pair<std::string, int>> ParseHostPort(const std::string& field,
                                                          const std::string& text) {
  const size_t colon = text.rfind(':');
  int port = -1;
  if (colon == std::string::npos || colon == 0 || !absl::SimpleAtoi(text.substr(colon + 1), &port) ||
      port < 0 || port > 65535) {
    return absl::InvalidArgumentError(absl::StrCat(field, ": expected HOST:PORT, got '", text, "'"));
  }
  return std::make_pair(text.substr(0, colon), port);
}

absl::Status CheckPlaintext(const std::string& field, const std::string& what, const std::string& host,
                            bool loopback, bool tls, bool insecure) {
  if (tls || insecure || loopback) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(
      field, ": refusing to serve ", what, host,
      " without TLS; give a certificate and key (--tls-cert, --tls-key), listen on "
      "127.0.0.1, or pass --insecure to accept plaintext on the network"));
}

absl::StatusOr<int> InfraRsiServer::LockDatabase(const std::string& db_path) {
  if (db_path.empty() || db_path == ":memory:") return -1;
  const std::string path = db_path + ".lock";
  const int fd = open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
  if (fd < 0) {
    return absl::FailedPreconditionError(
        absl::StrCat("db: cannot open the lock file ", path, ": ", std::strerror(errno)));
  }
  if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
    char pid[32] = {0};
    const ssize_t n = pread(fd, pid, sizeof(pid) - 1, 0);
    close(fd);
    return absl::FailedPreconditionError(absl::StrCat(
        "db: ", db_path, " is in use by another infrarsi-server",
        n > 0 ? absl::StrCat(" (pid ", std::string(pid, static_cast<size_t>(n)), ")") : "",
        "; one server per database: stop it first, or give this one another --db"));
  }
  const std::string me = std::to_string(getpid());
  if (ftruncate(fd, 0) != 0 || pwrite(fd, me.data(), me.size(), 0) != static_cast<ssize_t>(me.size())) {
    // The lock holds without the pid: the next server names no pid.
  }
  return fd;
}

absl::StatusOr<std::unique_ptr<InfraRsiServer>> InfraRsiServer::Create(const Options& options) {
  ASSIGN_OR_RETURN(const auto listen, ParseHostPort("listen", options.listen));
  const std::string& host = listen.first;
  if (options.tls_cert_pem.empty() != options.tls_key_pem.empty()) {
    return absl::InvalidArgumentError(options.tls_cert_pem.empty()
                                          ? "tls_cert: required with tls_key"
                                          : "tls_key: required with tls_cert");
  }
  if (!options.tls_client_ca_pem.empty() && options.tls_cert_pem.empty()) {
    return absl::InvalidArgumentError("tls_client_ca: needs tls_cert and tls_key");
  }
  if (options.max_streams_per_caller < 1) {
    return absl::InvalidArgumentError("max_streams_per_caller: must be >= 1");
  }
  if (options.max_long_polls_per_caller < 1) {
    return absl::InvalidArgumentError("max_long_polls_per_caller: must be >= 1");
  }
  // Tokens and commits cross this port: plaintext only where nobody else
  // can listen, unless the operator says otherwise.
  // The address the listener binds is what the name resolves to: judge
  // that, not the string.
  const bool tls = !options.tls_cert_pem.empty();
  const bool loopback = ResolvesToLoopbackOnly(host);
  RETURN_IF_ERROR(CheckPlaintext("listen", "", host, loopback, tls, options.insecure));
  // The dashboard's address, checked before anything is opened (the same
  // rules as its own Create).
  bool http_loopback = true;
  if (!options.http_listen.empty()) {
    ASSIGN_OR_RETURN(const auto http, ParseHostPort("http_listen", options.http_listen));
    http_loopback = ResolvesToLoopbackOnly(http.first);
    RETURN_IF_ERROR(CheckPlaintext("http_listen", "the dashboard on ", http.first, http_loopback, tls,
                                   options.insecure));
  }
  std::unique_ptr<InfraRsiServer> s(new InfraRsiServer());
  s->options_ = options;
  s->host_ = host;
  // One server per database: a second would serve a stale copy and write
  // over the first's sessions. Held until this server is destroyed (the
  // kernel drops it when the process dies, kill -9 included).
  ASSIGN_OR_RETURN(s->db_lock_.fd, LockDatabase(options.db_path));
  storage::SqliteStorage::Options so;
  so.path = options.db_path;
  so.upgrade = options.migrate ? storage::SqliteStorage::Options::Upgrade::kMigrate
                               : storage::SqliteStorage::Options::Upgrade::kRefuse;
  so.backup_before_migration = true;
  so.check_integrity = true;
  if (options.db_quota_mib < 0) return absl::InvalidArgumentError("db_quota_mib: must be >= 0");
  // SQLite's default page: 4 KiB.
  so.max_page_count = static_cast<int64_t>(std::ceil(options.db_quota_mib * 256));
  ASSIGN_OR_RETURN(s->storage_, storage::SqliteStorage::Create(so));
  if (!s->storage_->migration_backup().empty()) {
    spdlog::warn("migrated {} to schema version {}; the old schema is kept in {}", options.db_path,
                 storage::SqliteStorage::LatestSchemaVersion(), s->storage_->migration_backup());
  }
  {
    // With no token, every caller is admin: fine for one user on one
    // machine, never on a network.
    ASSIGN_OR_RETURN(auto tokens, s->storage_->ListTokens());
    if (tokens.empty() && !loopback) {
      return absl::FailedPreconditionError(absl::StrCat(
          "listen: no API token exists, so every caller on ", host,
          " would act as admin; create one first (infrarsi-server --db ", options.db_path,
          " token create --role admin) or listen on 127.0.0.1"));
    }
    // The dashboard reads every session of an open server: the same rule.
    if (tokens.empty() && !http_loopback) {
      return absl::FailedPreconditionError(absl::StrCat(
          "http_listen: no API token exists, so every visitor of ", options.http_listen,
          " would read every session; create one first (infrarsi-server --db ", options.db_path,
          " token create --role admin) or serve the dashboard on 127.0.0.1"));
    }
  }
  s->committer_ = std::make_unique<GitCommitter>(
      options.repos_dir.empty() ? options.db_path + ".repos" : options.repos_dir);
  SessionManager::Options mo;
  mo.storage = s->storage_.get();
  mo.clock = options.clock;
  mo.source_repo = s->committer_.get();
  mo.lease_timeout = options.lease_timeout;
  mo.step_retention = options.step_retention;
  mo.max_attempts = options.max_attempts;
  mo.release = INFRARSI_VERSION;
  mo.blob_hash = GitBlobHash;  // libgit2 is initialised by the committer
  std::optional<Priors> file_priors;
  if (!options.priors_yaml.empty()) {
    auto parsed = ParsePriors(options.priors_yaml);
    if (!parsed.ok()) return parsed.status();
    file_priors = *std::move(parsed);
  }
  std::shared_ptr<LlmPriorClient> llm;
  if (!options.llm_endpoint.empty()) {
    LlmPriorClient::Options lo;
    lo.endpoint = options.llm_endpoint;
    lo.model = options.llm_model;
    lo.api_key = options.llm_api_key;
    lo.timeout = options.llm_timeout;
    ASSIGN_OR_RETURN(llm, LlmPriorClient::Create(lo));
  }
  mo.priors_for = [file_priors, llm](const SessionSpec& spec)
      -> std::pair<std::optional<Priors>, std::string> {
    const std::string file_label = file_priors ? "file" : "none";
    if (!llm) return {file_priors, file_label};
    absl::StatusOr<Priors> answer = llm->Ask(spec);
    if (!answer.ok()) {
      spdlog::warn("session {}: LLM priors not used: {}", spec.name, answer.status().ToString());
      return {file_priors, absl::StrCat(file_label, " (LLM answer not used: ",
                                        answer.status().message(), ")")};
    }
    if (!file_priors) return {*std::move(answer), "llm"};
    return {BlendPriors(*file_priors, *answer, spec), "file+llm"};
  };
  if (options.llm_patches) {
    if (!llm) return absl::InvalidArgumentError("llm_patches: needs an LLM endpoint (--llm-endpoint)");
    const std::string model = options.llm_model;
    mo.llm_patches = [llm, model](const LlmPatchContext& ctx) -> absl::StatusOr<std::string> {
      absl::StatusOr<std::string> body = llm->Post(LlmPatchRequestJson(ctx, model));
      if (!body.ok()) spdlog::warn("session {}: LLM patches not used: {}", ctx.spec->name, body.status().ToString());
      return body;
    };
  }
  s->optimizer_ = std::make_unique<ModelOptimizer>();
  mo.optimizer = s->optimizer_.get();
  ASSIGN_OR_RETURN(s->manager_, SessionManager::Create(mo));

  Authenticator::Options ao;
  ao.storage = s->storage_.get();
  ao.hash = Sha256Hex;
  s->auth_ = std::make_unique<Authenticator>(ao);
  ASSIGN_OR_RETURN(auto tokens, s->storage_->ListTokens());
  if (tokens.empty()) {
    spdlog::warn("no API tokens: every caller is admin until `infrarsi-server token create`");
  }
  s->streams_ = std::make_unique<CallLimiter>(options.max_streams_per_caller);
  s->polls_ = std::make_unique<CallLimiter>(options.max_long_polls_per_caller);
  s->session_service_ =
      std::make_unique<SessionServiceImpl>(s->manager_.get(), s->auth_.get(), s->streams_.get());
  s->agent_service_ =
      std::make_unique<AgentServiceImpl>(s->manager_.get(), s->auth_.get(), s->polls_.get());
  s->bank_service_ = std::make_unique<BankServiceImpl>(s->manager_.get(), s->auth_.get());
  // The standard plumbing: grpc.health.v1.Health (NOT_SERVING once a
  // shutdown begins) and server reflection, for probes and tools.
  grpc::EnableDefaultHealthCheckService(true);
  grpc::reflection::InitProtoReflectionServerBuilderPlugin();
  grpc::ServerBuilder builder;
  std::shared_ptr<grpc::ServerCredentials> creds = grpc::InsecureServerCredentials();
  if (!options.tls_cert_pem.empty()) {
    grpc::SslServerCredentialsOptions ssl(
        options.tls_client_ca_pem.empty()
            ? GRPC_SSL_DONT_REQUEST_CLIENT_CERTIFICATE
            : GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY);
    ssl.pem_root_certs = options.tls_client_ca_pem;
    ssl.pem_key_cert_pairs.push_back({options.tls_key_pem, options.tls_cert_pem});
    creds = grpc::SslServerCredentials(ssl);
  }
  builder.AddListeningPort(options.listen, creds, &s->port_);
  // A taken address is an error: with port reuse a second server bound the
  // same port and the kernel split connections between the two.
  builder.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);
  builder.SetMaxReceiveMessageSize(kMaxMessageBytes);
  {
    std::vector<std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface>> creators;
    creators.push_back(s->rpc_metrics_.InterceptorFactory());
    builder.experimental().SetInterceptorCreators(std::move(creators));
  }
  builder.RegisterService(s->session_service_.get());
  builder.RegisterService(s->agent_service_.get());
  builder.RegisterService(s->bank_service_.get());
  s->grpc_server_ = builder.BuildAndStart();
  if (!s->grpc_server_ || s->port_ == 0) {
    return absl::UnavailableError(absl::StrCat("listen: cannot listen on ", options.listen,
                                               " (is another server listening there?)"));
  }
  if (grpc::HealthCheckServiceInterface* health = s->grpc_server_->GetHealthCheckService()) {
    health->SetServingStatus(true);
    for (const char* service : {"infrarsi.v1.SessionService", "infrarsi.v1.AgentService",
                                "infrarsi.v1.BankService"}) {
      health->SetServingStatus(service, true);
    }
  }
  if (!options.metrics_listen.empty()) {
    // Its own connection, so that a scrape never queues behind the bank.
    ASSIGN_OR_RETURN(storage::Storage * reader,
                     storage::ReaderOf(s->storage_.get(), &s->metrics_reader_));
    MetricsEndpoint::Options mo;
    mo.listen = options.metrics_listen;
    mo.manager = s->manager_.get();
    mo.reader = reader;
    mo.rpcs = &s->rpc_metrics_;
    mo.db_path = options.db_path;
    ASSIGN_OR_RETURN(s->metrics_, MetricsEndpoint::Create(mo));
  }
  if (!options.http_listen.empty()) {
    Dashboard::Options d;
    d.listen = options.http_listen;
    d.manager = s->manager_.get();
    d.auth = s->auth_.get();
    d.clock = options.clock;
    d.tls_cert_pem = options.tls_cert_pem;
    d.tls_key_pem = options.tls_key_pem;
    d.tls_client_ca_pem = options.tls_client_ca_pem;
    d.insecure = options.insecure;
    ASSIGN_OR_RETURN(s->dashboard_, Dashboard::Create(d));
  }
  InfraRsiServer* raw = s.get();
  s->reaper_ = std::thread([raw] {
    absl::Time next_prune = absl::Now();
    while (!raw->stop_.WaitForNotificationWithTimeout(raw->options_.reaper_interval)) {
      if (absl::Status st = raw->manager_->ExpireLeases(); !st.ok()) {
        spdlog::error("lease reaper: {}", st.ToString());
      }
      if (raw->options_.step_retention > absl::ZeroDuration() && absl::Now() >= next_prune) {
        next_prune = absl::Now() + raw->options_.prune_interval;
        // In short writes, so that no live session waits long on the writer.
        constexpr int32_t kBatch = 20000;
        int64_t pruned = 0;
        for (int i = 0; i < 50 && !raw->stop_.HasBeenNotified(); ++i) {
          auto n = raw->manager_->PruneSteps(kBatch);
          if (!n.ok()) {
            spdlog::error("step retention: {}", n.status().ToString());
            break;
          }
          pruned += *n;
          if (*n < kBatch) break;
        }
        if (pruned > 0) spdlog::info("step retention: dropped {} per-step rows", pruned);
      }
    }
  });
  return s;
}

std::string InfraRsiServer::address() const { return absl::StrCat(host_, ":", port_); }

void InfraRsiServer::Shutdown(absl::Duration grace) {
  std::call_once(shutdown_once_, [&] {
    // Create may have failed half-way: only what was built is stopped.
    // Probes see NOT_SERVING while in-flight calls drain.
    if (grpc_server_ && grpc_server_->GetHealthCheckService()) {
      grpc_server_->GetHealthCheckService()->SetServingStatus(false);
    }
    if (manager_) manager_->Shutdown();
    if (grpc_server_) {
      grpc_server_->Shutdown(std::chrono::system_clock::now() +
                             absl::ToChronoMilliseconds(grace));
    }
    stop_.Notify();
    if (reaper_.joinable()) reaper_.join();
    metrics_.reset();
    dashboard_.reset();
    stopped_.Notify();
  });
}

void InfraRsiServer::Wait() { stopped_.WaitForNotification(); }

InfraRsiServer::~InfraRsiServer() { Shutdown(); }

InfraRsiServer::DbLock::~DbLock() {
  if (fd >= 0) close(fd);
}

}  // namespace infrarsi::server
