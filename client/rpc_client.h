// A typed client for the SessionService and BankService, used by the CLI,
// the demo and tests. Every call returns absl::Status[Or]; gRPC errors keep
// their canonical code and message.
#ifndef INFRARSI_CLIENT_RPC_CLIENT_H_
#define INFRARSI_CLIENT_RPC_CLIENT_H_

#include <functional>
#include <memory>
#include <string>

#include <grpcpp/grpcpp.h>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "infrarsi/v1/infrarsi.grpc.pb.h"

namespace infrarsi::client {

// gRPC status -> absl::Status, same code and message.
inline absl::Status FromGrpcStatus(const grpc::Status& s) {
  if (s.ok()) return absl::OkStatus();
  return absl::Status(static_cast<absl::StatusCode>(s.error_code()), s.error_message());
}

// How a client reaches the server: plaintext when ca_pem is empty, else
// TLS verifying the server against ca_pem, presenting cert/key (mutual TLS)
// when given.
struct TlsOptions {
  std::string ca_pem;
  std::string cert_pem;
  std::string key_pem;
};
std::shared_ptr<grpc::ChannelCredentials> ChannelCredentialsFor(const TlsOptions& tls);
// Reads the PEM files named by the --tls-ca/--tls-cert/--tls-key flags
// (empty paths are skipped). INVALID_ARGUMENT names the flag.
absl::StatusOr<TlsOptions> LoadTlsFiles(const std::string& ca_path, const std::string& cert_path,
                                        const std::string& key_path);

// What the --token-file and --tls-* flags of the CLI and the agent resolve
// to: the token in `token_file` (its first line), or $INFRARSI_TOKEN when
// no file is named, and the TLS files read as LoadTlsFiles does. Never a
// token on the command line: every user of the host sees it in ps.
struct Credentials {
  std::string token;
  TlsOptions tls;
};
absl::StatusOr<Credentials> ResolveCredentials(const std::string& token_file,
                                               const std::string& ca_path,
                                               const std::string& cert_path,
                                               const std::string& key_path);

// The error for a --token flag: a secret on the command line.
absl::Status TokenOnCommandLine();

// Sends `token` as "authorization: Bearer <token>" (nothing when empty).
void AddToken(grpc::ClientContext* ctx, const std::string& token);

// Thread-safe (stubs are).
class RpcClient {
 public:
  struct Options {
    std::string server = "127.0.0.1:7420";  // HOST:PORT
    absl::Duration call_timeout = absl::Seconds(30);
    TlsOptions tls;  // default: plaintext (a loopback server)
    std::string token;  // bearer token (empty: an open server)
  };
  static absl::StatusOr<std::unique_ptr<RpcClient>> Create(const Options& options);

  // Reads the spec file and submits it with its folder for relative paths.
  absl::StatusOr<v1::SessionSummary> InitFromFile(const std::string& spec_path);
  absl::StatusOr<v1::SessionSummary> Init(const v1::InitRequest& req);
  absl::StatusOr<v1::SessionSummary> Doctor(const v1::DoctorRequest& req);
  absl::StatusOr<v1::SessionSummary> Run(const v1::RunRequest& req);
  absl::StatusOr<v1::SessionReport> Report(const std::string& session_id);
  absl::StatusOr<v1::TrialLogResponse> GetTrialLog(const std::string& session_id, int64_t trial_id,
                                                   const std::string& stream);
  absl::StatusOr<v1::ApplyResponse> Apply(const v1::ApplyRequest& req);
  absl::StatusOr<v1::SessionSummary> GetSession(const std::string& session_id);
  // Newest first, a page at a time (an empty request: the first 100).
  absl::StatusOr<v1::ListSessionsResponse> ListSessions(const v1::ListSessionsRequest& req = {});
  absl::StatusOr<v1::SessionSummary> Cancel(const std::string& session_id);
  absl::StatusOr<v1::QueryExperienceResponse> QueryExperience(
      const v1::QueryExperienceRequest& req);

  // Streams the session's events to `on_event` until it returns false or
  // the session has finished (the server ends the stream); DEADLINE_EXCEEDED
  // after `timeout`. Starts after event `after_seq` (0: a snapshot first;
  // Doctor and Run return the seq that shows all of their trials), and
  // after a reconnect (a server restart) from the last event seen, or a
  // snapshot when the server no longer has it. Returns the last summary.
  absl::StatusOr<v1::SessionSummary> Watch(
      const std::string& session_id, absl::Duration timeout,
      const std::function<bool(const v1::SessionEvent&)>& on_event, int64_t after_seq = 0);
  absl::StatusOr<v1::ListAgentsResponse> ListAgents(const v1::ListAgentsRequest& req);
  absl::StatusOr<v1::AgentInfo> SetAgentState(const v1::SetAgentStateRequest& req);

  // Watch until the session leaves `while_stage`.
  absl::StatusOr<v1::SessionSummary> WatchWhile(
      const std::string& session_id, v1::Stage while_stage, absl::Duration timeout,
      const std::function<void(const v1::SessionEvent&)>& on_event);

 private:
  explicit RpcClient(const Options& o) : options_(o) {}
  void Prepare(grpc::ClientContext* ctx) const;

  Options options_;
  std::unique_ptr<v1::SessionService::Stub> sessions_;
  std::unique_ptr<v1::BankService::Stub> bank_;
};

}  // namespace infrarsi::client

#endif  // INFRARSI_CLIENT_RPC_CLIENT_H_
