#include "client/rpc_client.h"

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <tuple>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "client/spec_files.h"
#include "base/file_util.h"
#include "base/status_macros.h"

namespace infrarsi::client {

std::shared_ptr<grpc::ChannelCredentials> ChannelCredentialsFor(const TlsOptions& tls) {
  if (tls.ca_pem.empty()) return grpc::InsecureChannelCredentials();
  grpc::SslCredentialsOptions o;
  o.pem_root_certs = tls.ca_pem;
  o.pem_cert_chain = tls.cert_pem;
  o.pem_private_key = tls.key_pem;
  return grpc::SslCredentials(o);
}

absl::StatusOr<TlsOptions> LoadTlsFiles(const std::string& ca_path, const std::string& cert_path,
                                        const std::string& key_path) {
  TlsOptions tls;
  for (auto [flag, path, out] : {std::tuple{"--tls-ca", &ca_path, &tls.ca_pem},
                                 std::tuple{"--tls-cert", &cert_path, &tls.cert_pem},
                                 std::tuple{"--tls-key", &key_path, &tls.key_pem}}) {
    if (path->empty()) continue;
    auto pem = ReadRegularFile(*path, 1 << 20, flag);
    if (!pem.ok() || pem->empty()) {
      return absl::InvalidArgumentError(absl::StrCat(flag, ": cannot read ", *path));
    }
    *out = *std::move(pem);
  }
  if (tls.cert_pem.empty() != tls.key_pem.empty()) {
    return absl::InvalidArgumentError(tls.cert_pem.empty() ? "--tls-cert: required with --tls-key"
                                                           : "--tls-key: required with --tls-cert");
  }
  if (!tls.cert_pem.empty() && tls.ca_pem.empty()) {
    return absl::InvalidArgumentError("--tls-ca: required with --tls-cert (the server's CA)");
  }
  return tls;
}

absl::StatusOr<std::unique_ptr<RpcClient>> RpcClient::Create(const Options& options) {
  if (options.server.empty()) return absl::InvalidArgumentError("server: required");
  std::unique_ptr<RpcClient> c(new RpcClient(options));
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(64 << 20);
  auto channel =
      grpc::CreateCustomChannel(options.server, ChannelCredentialsFor(options.tls), args);
  c->sessions_ = v1::SessionService::NewStub(channel);
  c->bank_ = v1::BankService::NewStub(channel);
  return c;
}

absl::StatusOr<Credentials> ResolveCredentials(const std::string& token_file,
                                               const std::string& ca_path,
                                               const std::string& cert_path,
                                               const std::string& key_path) {
  Credentials c;
  if (!token_file.empty()) {
    ASSIGN_OR_RETURN(std::string text, ReadRegularFile(token_file, 4096, "--token-file"));
    c.token = std::string(absl::StripAsciiWhitespace(text.substr(0, text.find('\n'))));
    if (c.token.empty()) {
      return absl::InvalidArgumentError(absl::StrCat("--token-file: ", token_file, " is empty"));
    }
  } else if (const char* t = std::getenv("INFRARSI_TOKEN"); t != nullptr) {
    c.token = t;
  }
  ASSIGN_OR_RETURN(c.tls, LoadTlsFiles(ca_path, cert_path, key_path));
  return c;
}

absl::Status TokenOnCommandLine() {
  return absl::InvalidArgumentError(
      "--token: a token on the command line is visible to every user of this host (ps); put it "
      "in a file readable only by you and pass --token-file FILE, or set INFRARSI_TOKEN");
}

void AddToken(grpc::ClientContext* ctx, const std::string& token) {
  if (!token.empty()) ctx->AddMetadata("authorization", "Bearer " + token);
}

void RpcClient::Prepare(grpc::ClientContext* ctx) const {
  ctx->set_deadline(std::chrono::system_clock::now() +
                    absl::ToChronoMilliseconds(options_.call_timeout));
  AddToken(ctx, options_.token);
}

#define INFRARSI_UNARY(Method, Stub, Req, Resp)            \
  Resp resp;                                              \
  grpc::ClientContext ctx;                                \
  Prepare(&ctx);                                          \
  absl::Status st = FromGrpcStatus(Stub->Method(&ctx, Req, &resp)); \
  if (!st.ok()) return st;                                \
  return resp

absl::StatusOr<v1::SessionSummary> RpcClient::InitFromFile(const std::string& spec_path) {
  ASSIGN_OR_RETURN(v1::InitRequest req, ReadSpecRequest(spec_path));
  return Init(req);
}

absl::StatusOr<v1::SessionSummary> RpcClient::Init(const v1::InitRequest& req) {
  INFRARSI_UNARY(Init, sessions_, req, v1::SessionSummary);
}
absl::StatusOr<v1::SessionSummary> RpcClient::Doctor(const v1::DoctorRequest& req) {
  INFRARSI_UNARY(Doctor, sessions_, req, v1::SessionSummary);
}
absl::StatusOr<v1::SessionSummary> RpcClient::Run(const v1::RunRequest& req) {
  INFRARSI_UNARY(Run, sessions_, req, v1::SessionSummary);
}
absl::StatusOr<v1::SessionReport> RpcClient::Report(const std::string& session_id) {
  v1::ReportRequest req;
  req.set_session_id(session_id);
  INFRARSI_UNARY(Report, sessions_, req, v1::SessionReport);
}
absl::StatusOr<v1::TrialLogResponse> RpcClient::GetTrialLog(const std::string& session_id,
                                                            int64_t trial_id,
                                                            const std::string& stream) {
  v1::GetTrialLogRequest req;
  req.set_session_id(session_id);
  req.set_trial_id(trial_id);
  req.set_stream(stream);
  INFRARSI_UNARY(GetTrialLog, sessions_, req, v1::TrialLogResponse);
}
absl::StatusOr<v1::ApplyResponse> RpcClient::Apply(const v1::ApplyRequest& req) {
  INFRARSI_UNARY(Apply, sessions_, req, v1::ApplyResponse);
}
absl::StatusOr<v1::SessionSummary> RpcClient::GetSession(const std::string& session_id) {
  v1::GetSessionRequest req;
  req.set_session_id(session_id);
  INFRARSI_UNARY(GetSession, sessions_, req, v1::SessionSummary);
}
absl::StatusOr<v1::ListSessionsResponse> RpcClient::ListSessions(
    const v1::ListSessionsRequest& req) {
  INFRARSI_UNARY(ListSessions, sessions_, req, v1::ListSessionsResponse);
}
absl::StatusOr<v1::SessionSummary> RpcClient::Cancel(const std::string& session_id) {
  v1::CancelSessionRequest req;
  req.set_session_id(session_id);
  INFRARSI_UNARY(CancelSession, sessions_, req, v1::SessionSummary);
}
absl::StatusOr<v1::QueryExperienceResponse> RpcClient::QueryExperience(
    const v1::QueryExperienceRequest& req) {
  INFRARSI_UNARY(QueryExperience, bank_, req, v1::QueryExperienceResponse);
}
absl::StatusOr<v1::ListAgentsResponse> RpcClient::ListAgents(const v1::ListAgentsRequest& req) {
  INFRARSI_UNARY(ListAgents, sessions_, req, v1::ListAgentsResponse);
}
absl::StatusOr<v1::AgentInfo> RpcClient::SetAgentState(const v1::SetAgentStateRequest& req) {
  INFRARSI_UNARY(SetAgentState, sessions_, req, v1::AgentInfo);
}
#undef INFRARSI_UNARY

absl::StatusOr<v1::SessionSummary> RpcClient::Watch(
    const std::string& session_id, absl::Duration timeout,
    const std::function<bool(const v1::SessionEvent&)>& on_event, int64_t after_seq) {
  const absl::Time deadline = absl::Now() + timeout;
  v1::SessionSummary last;
  bool seen = false;
  while (absl::Now() < deadline) {
    grpc::ClientContext ctx;
    ctx.set_deadline(absl::ToChronoTime(deadline));
    AddToken(&ctx, options_.token);
    v1::WatchSessionRequest req;
    req.set_session_id(session_id);
    // Event numbers outlive a server restart (they start from its clock):
    // a reconnect goes on from the last one seen, and gets a snapshot if
    // the server no longer holds what came after it.
    req.set_after_seq(after_seq);
    auto reader = sessions_->WatchSession(&ctx, req);
    v1::SessionEvent ev;
    while (reader->Read(&ev)) {
      last = ev.session();
      seen = true;
      after_seq = std::max(after_seq, ev.seq());
      if (!on_event(ev)) {
        ctx.TryCancel();
        reader->Finish();
        return last;
      }
    }
    const absl::Status st = FromGrpcStatus(reader->Finish());
    if (st.ok() && seen) return last;  // the session finished: the server ended the stream
    if (absl::IsDeadlineExceeded(st)) break;
    if (!st.ok() && !absl::IsUnavailable(st) && !absl::IsCancelled(st)) return st;
    if (!st.ok()) absl::SleepFor(absl::Milliseconds(200));  // server restarting
  }
  return absl::DeadlineExceededError(
      absl::StrCat("session ", session_id, " still in stage ", last.stage_name(),
                   " after waiting ", absl::FormatDuration(timeout)));
}

absl::StatusOr<v1::SessionSummary> RpcClient::WatchWhile(
    const std::string& session_id, v1::Stage while_stage, absl::Duration timeout,
    const std::function<void(const v1::SessionEvent&)>& on_event) {
  return Watch(session_id, timeout, [&](const v1::SessionEvent& ev) {
    on_event(ev);
    return ev.session().stage() == while_stage;
  });
}

}  // namespace infrarsi::client
